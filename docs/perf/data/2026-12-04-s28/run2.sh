#!/bin/bash
# Session 28 run 2 (carry .bundle, with .bundle/aot-f32sums.tar.xz): the Python wheel's tests on
# CUDA tensors, the Rust bench's cache op beside apply_rope_pos_ids, and the fused norm's
# code-generation variant `f32sums` (statistics and outputs from the unrounded f32 sum of input
# and residual, FlashInfer's arithmetic; the residual still stored rounded) beside the bundle's
# kernels, two passes.
export SUITE_OUT=/tmp/s28-r2
timeout 150 bash .bundle/suite.sh python > /dev/null
BENCH_DTYPES=bf16 BENCH_ROUTINES="apply_rope_with_cos_sin_cache apply_rope_pos_ids" timeout 80 bash .bundle/suite.sh bench > /dev/null
VARIANT_CASES="fused_add_rmsnorm:1024:4096 fused_add_rmsnorm:4096:4096 fused_add_rmsnorm:65536:4096 fused_add_rmsnorm:1024:8192 fused_add_rmsnorm:16384:8192 fused_add_rmsnorm:128:4096" \
  timeout 250 bash .bundle/suite.sh variants > /dev/null
tar czf $OUT/s28-r2.tgz -C $SUITE_OUT .
grep -h "exit\|passed\|failed" $SUITE_OUT/*.log | sort | uniq -c
cat $SUITE_OUT/ferrinfer.csv
sort -t, -k3,3 -k5,5n -k6,6n -k1,1 $SUITE_OUT/variants.csv
