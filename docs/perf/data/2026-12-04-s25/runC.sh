#!/bin/bash
# Session 25 run C (carry .bundle: run A's bundle, whose peeled kernels gather a row's weights an
# element at a time, and aot-shifted: the same kernels reading the weights as aligned 16-byte
# blocks shifted into place): the Rust bench, each peeled point beside the same rows read narrow
# (`*:*:*:*:0`), bf16 at T = 1, 128, 4096 and more, f32 at two points.
export SUITE_OUT=/tmp/s25-rC
n='*:*:*:*:0'
cases=""
for c in rmsnorm:4096:4095 rmsnorm:65536:4095 rmsnorm:4096:1001 rmsnorm:4096:4094 rmsnorm:1:4095 rmsnorm:1:1001 \
    rmsnorm:128:1001 rmsnorm:128:4095 fused_add_rmsnorm:4096:4095 fused_add_rmsnorm:16384:4095 \
    fused_add_rmsnorm:4096:1001 fused_add_rmsnorm:1:1001 fused_add_rmsnorm:128:1001 fused_add_rmsnorm:4096:4094 \
    fused_add_rmsnorm:1:4095; do
  cases="$cases $c $c:$n"
done
VARIANT_CASES="$cases" timeout 330 bash .bundle/suite.sh variants > /dev/null
mv $SUITE_OUT/variants.csv $SUITE_OUT/variants-bf16.csv
POINT_DTYPE=f32 VARIANT_CASES="rmsnorm:4096:4095 rmsnorm:4096:4095:$n fused_add_rmsnorm:4096:4095 fused_add_rmsnorm:4096:4095:$n" \
  timeout 100 bash .bundle/suite.sh variants > /dev/null
mv $SUITE_OUT/variants.csv $SUITE_OUT/variants-f32.csv
tar czf $OUT/s25-rC.tgz -C $SUITE_OUT .
sort -t, -k3,3 -k5,5n -k6,6n -k2,2 -k1,1 $SUITE_OUT/variants-*.csv
