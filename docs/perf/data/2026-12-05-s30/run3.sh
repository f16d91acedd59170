#!/bin/bash
# Session 30 run 3 (made, H200; results in run3/): the filters' passes with every load of a batch
# issued before any is turned into keys (batched-pass.patch: `Slice::batch_keys`,
# `Packed::batch_zero`; the 16-bit mask's register cap 64 → 72, where it spilled 8 bytes at 64),
# beside the committed kernels (whose first pass ptxas issues one load at a time: "1 LDG in
# flight" in crates/ferrinfer-jit/tests/snapshots/jit_sass__sampling_sm90.snap). Build the
# variant here first: `git apply docs/perf/data/2026-12-05-s30/batched-pass.patch && bash
# scripts/gpu/variant.sh pass sampling; git apply -R docs/perf/data/2026-12-05-s30/batched-pass.patch`.
# Carry .peers/b and .bundle (aot-pass.tar.xz included) as run 2.
set -x
source .peers/b/install.sh
export PYBENCH_FAMILIES=sampling PYBENCH_DTYPES="float32 bfloat16" PYBENCH_EAGER=0
export PYBENCH_OPS=top_k_mask_logits,top_k_renorm_probs,top_p_renorm_probs,top_k_sampling_from_probs
SUITE_OUT=/tmp/s30r3 timeout 280 bash .bundle/suite.sh pybench
SUITE_OUT=/tmp/s30r3 AOT_VARIANT=pass timeout 250 bash .bundle/suite.sh pybench
tar czf $OUT/s30-r3.tgz -C /tmp/s30r3 .
