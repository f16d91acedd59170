#!/bin/bash
# Session 16 run 1: the activation family's GPU tests and sanitizers on this bundle's kernels
# (constants folded, pointers by steps), code-generation variants beside them (Rust bench, two
# passes: `old` = the previous commit's kernel, `rows2` = two rows a step, `tanh` = a probe with
# tanh.approx for silu and gelu_tanh — not accurate enough to ship, it asks whether the MUFU pipe
# bounds these sizes), and the Rust host path per call (`eager`).
set -x
export SUITE_OUT=$OUT/r1
bash .bundle/suite.sh info
TESTS_FILTER=activation_gpu bash .bundle/suite.sh tests
SANITIZER_TESTS=activation_gpu_sanitizer bash .bundle/suite.sh memcheck racecheck
VARIANT_LAYOUT_VAR=FERRINFER_ACTIVATION_LAYOUT VARIANT_CASES="silu_and_mul:128:4096 silu_and_mul:1024:4096 \
silu_and_mul:1024:4096:*:512:* silu_and_mul:4096:4096 silu_and_mul:1024:14336 silu_and_mul:16384:4096 \
silu_and_mul:16384:14336 gelu_tanh_and_mul:128:4096 gelu_tanh_and_mul:1024:4096 gelu_tanh_and_mul:4096:4096 \
gelu_tanh_and_mul:16384:14336 gelu_and_mul:1024:4096" bash .bundle/suite.sh variants
bash .bundle/suite.sh eager
