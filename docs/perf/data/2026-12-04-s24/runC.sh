#!/bin/bash
# Session 24 run C (carry .peers/b after a run that copied .peers/a to /tmp/peers; .bundle: the
# commit's own, the new planner and rmsnorm's predicated narrow rows): the Python module beside
# torch eager, torch.compile and FlashInfer 0.7.2, graph replay — the standard norm grid (bf16,
# f16) and the wide grid (bf16); memcheck of every kernel path; every norm GPU test;
# the Rust bench at rmsnorm's narrow rows, the planner (4 rows a group at 2-byte vectors) against
# the old rule's 2 rows (`8:*:2:0`).
source .peers/b/install.sh
export SUITE_OUT=/tmp/s24-rC
PYBENCH_FAMILIES=norm PYBENCH_EAGER=0 timeout 150 bash .bundle/suite.sh pybench > /dev/null
PYBENCH_GRID=wide PYBENCH_FAMILIES=norm PYBENCH_EAGER=0 timeout 150 bash .bundle/suite.sh pybench > /dev/null
PYBENCH_DTYPES=float16 PYBENCH_FAMILIES=norm PYBENCH_EAGER=0 timeout 100 bash .bundle/suite.sh pybench > /dev/null
VARIANT_CASES="rmsnorm:4096:4095 rmsnorm:4096:4095:8:*:2:0 rmsnorm:16384:4095 rmsnorm:16384:4095:8:*:2:0 \
rmsnorm:65536:4095 rmsnorm:65536:4095:8:*:2:0 rmsnorm:65536:1001 rmsnorm:65536:1001:8:*:2:0" \
  timeout 60 bash .bundle/suite.sh variants > /dev/null
SANITIZER_TESTS="norm_gpu_sanitizer_every_kernel_path" SANITIZER_TIMEOUT=100 timeout 110 bash .bundle/suite.sh memcheck > /dev/null
TESTS_FILTER=norm timeout 170 bash .bundle/suite.sh tests > /dev/null
tar czf $OUT/s24-rC.tgz -C $SUITE_OUT .
grep -c . $SUITE_OUT/*.csv; grep -h "exit\|ERROR SUMMARY\|test result" $SUITE_OUT/*.log | sort | uniq -c
sort -t, -k3,3 -k5,5n -k6,6n -k2,2 $SUITE_OUT/variants.csv
