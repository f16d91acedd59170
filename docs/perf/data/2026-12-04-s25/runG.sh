#!/bin/bash
# Session 25 run G (carry .bundle: run D's): long rows the committed planner reads narrow only by
# accident (no 8-chunk peeled kernel, so its "many rows" test failed for them: review of a0d93ad),
# forced peeled (`*:*:*:*:1`: 4 chunks, what the mended planner takes) beside the planner's
# narrow reading (`*`), Rust bench, bf16 and f32.
export SUITE_OUT=/tmp/s25-rG
p='*:*:*:*:1'
VARIANT_CASES="rmsnorm:4096:12287 rmsnorm:4096:12287:$p rmsnorm:16384:12287 rmsnorm:16384:12287:$p \
rmsnorm:4096:16383 rmsnorm:4096:16383:$p fused_add_rmsnorm:4096:12287 fused_add_rmsnorm:4096:12287:$p \
fused_add_rmsnorm:4096:16383 fused_add_rmsnorm:4096:16383:$p" timeout 150 bash .bundle/suite.sh variants > /dev/null
mv $SUITE_OUT/variants.csv $SUITE_OUT/variants-bf16.csv
POINT_DTYPE=f32 VARIANT_CASES="fused_add_rmsnorm:4096:5001 fused_add_rmsnorm:4096:5001:$p" timeout 40 bash .bundle/suite.sh variants > /dev/null
mv $SUITE_OUT/variants.csv $SUITE_OUT/variants-f32.csv
tar czf $OUT/s25-rG.tgz -C $SUITE_OUT .
sort -t, -k3,3 -k5,5n -k6,6n -k2,2 $SUITE_OUT/variants-*.csv
