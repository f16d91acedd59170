#!/bin/bash
# Session 17 run D: the `rows2` variant (the kernel's ROWS_PER_STEP 4 -> 2, the launch still
# planning 4 rows a thread: two steps of two) as a candidate to commit — the activation GPU
# tests and memcheck on its modules (AOT_VARIANT=rows2), then the Rust bench, base (f0882e7)
# beside rows2, two passes, at the shapes run 1 did not cover (T = 1, 16, d = 11008 / 14336,
# gelu at streaming sizes, where session 8 found two rows *a thread* 2-11 % slower).
set -x
export SUITE_OUT=$OUT/rD
rm -f .bundle/aot-old.tar.xz .bundle/aot-tanh.tar.xz
AOT_VARIANT=rows2 TESTS_FILTER=activation_gpu bash .bundle/suite.sh tests
AOT_VARIANT=rows2 SANITIZER_TESTS=activation_gpu_sanitizer bash .bundle/suite.sh memcheck
VARIANT_LAYOUT_VAR=FERRINFER_ACTIVATION_LAYOUT VARIANT_CASES="silu_and_mul:1:4096 silu_and_mul:16:14336 \
silu_and_mul:128:4096 silu_and_mul:128:14336 silu_and_mul:1024:4096 silu_and_mul:1024:11008 silu_and_mul:4096:14336 \
silu_and_mul:16384:4096 gelu_and_mul:128:4096 gelu_and_mul:1024:14336 gelu_and_mul:4096:4096 \
gelu_and_mul:16384:14336 gelu_tanh_and_mul:1024:14336 gelu_tanh_and_mul:16384:4096" bash .bundle/suite.sh variants
