#!/bin/bash
# Session 25 run B (carry .peers/b; .bundle from run A; aot-v11: v11's norm kernels under the
# bundle's keys): the Python module beside torch eager, torch.compile and FlashInfer 0.7.2, graph
# replay — the wide grid (bf16) and the standard grid (bf16, f16); the Rust bench, bf16, peeled
# rows against the same rows read narrow (`*:*:*:*:0`), and v11's kernels beside this bundle's
# at standard-grid points (the kernel change moved ptxas's code for the unpeeled entries too).
source .peers/b/install.sh
export SUITE_OUT=/tmp/s25-rB
PYBENCH_GRID=wide PYBENCH_FAMILIES=norm PYBENCH_EAGER=0 timeout 150 bash .bundle/suite.sh pybench > /dev/null
PYBENCH_FAMILIES=norm PYBENCH_EAGER=0 timeout 120 bash .bundle/suite.sh pybench > /dev/null
n='*:*:*:*:0'
VARIANT_CASES="rmsnorm:4096:4095 rmsnorm:4096:4095:$n rmsnorm:65536:4095 rmsnorm:65536:4095:$n \
rmsnorm:4096:1001 rmsnorm:4096:1001:$n rmsnorm:4096:4094 rmsnorm:4096:4094:$n rmsnorm:1:4095 rmsnorm:1:4095:$n \
fused_add_rmsnorm:4096:4095 fused_add_rmsnorm:4096:4095:$n fused_add_rmsnorm:16384:4095 fused_add_rmsnorm:16384:4095:$n \
fused_add_rmsnorm:4096:1001 fused_add_rmsnorm:4096:1001:$n fused_add_rmsnorm:4096:3000 \
rmsnorm:1:4096 rmsnorm:16:8192 rmsnorm:128:4096 rmsnorm:65536:4096 fused_add_rmsnorm:1:4096 fused_add_rmsnorm:128:8192 \
fused_add_rmsnorm:1024:4096" timeout 200 bash .bundle/suite.sh variants > /dev/null
tar czf $OUT/s25-rB.tgz -C $SUITE_OUT .
grep -c . $SUITE_OUT/*.csv; grep -h "exit" $SUITE_OUT/*.log | sort | uniq -c
sort -t, -k3,3 -k5,5n -k6,6n -k2,2 -k1,1 $SUITE_OUT/variants.csv
