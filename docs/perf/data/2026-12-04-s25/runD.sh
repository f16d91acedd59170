#!/bin/bash
# Session 25 run D (carry .bundle: the committed kernels and planner — peeled rows where rows are
# many, gathered weights, 2-byte vectors and the fused ops' 4-byte ones; the staged kernel's
# one-warp blocks meet at a barrier before a refill): every norm GPU test but the grid and
# > 2^31, memcheck of every kernel path, racecheck of the register kernels (staged off) and of the
# staged kernel's case list; the Rust bench at the peeled points against the same rows read narrow.
export SUITE_OUT=/tmp/s25-rD
TESTS_FILTER=norm_ TESTS_SKIP="norm_gpu_grid over_2_pow_31" timeout 200 bash .bundle/suite.sh tests > /dev/null
SANITIZER_TESTS='norm_gpu_sanitizer_every\|narrow_vectors\|norm_staged_gpu_sanitizer' SANITIZER_TIMEOUT=60 \
  timeout 120 bash .bundle/suite.sh memcheck > /dev/null
FERRINFER_NORM_LAYOUT='*:*:*:0' SANITIZER_TESTS='norm_gpu_sanitizer_every\|narrow_vectors' SANITIZER_TIMEOUT=60 \
  timeout 70 bash .bundle/suite.sh racecheck > /dev/null
SANITIZER_TESTS='norm_staged_gpu_racecheck' SANITIZER_TIMEOUT=100 timeout 105 bash .bundle/suite.sh racecheck > /dev/null
n='*:*:*:*:0'
cases=""
for c in rmsnorm:4096:4095 rmsnorm:16384:4095 rmsnorm:65536:1001 rmsnorm:1:1001 rmsnorm:128:4095 \
    fused_add_rmsnorm:4096:4095 fused_add_rmsnorm:65536:4095 fused_add_rmsnorm:4096:4094 fused_add_rmsnorm:1:4095; do
  cases="$cases $c $c:$n"
done
VARIANT_CASES="$cases" timeout 150 bash .bundle/suite.sh variants > /dev/null
tar czf $OUT/s25-rD.tgz -C $SUITE_OUT .
grep -h "exit\|ERROR SUMMARY\|RACECHECK SUMMARY\|test result\|FAILED\|panicked" $SUITE_OUT/*.log | sort | uniq -c
sort -t, -k3,3 -k5,5n -k6,6n -k2,2 -k1,1 $SUITE_OUT/variants.csv
