#!/bin/bash
# Session 20 run 2 (bundle: c508f11 + the fused ops' rows and in-place rows read with
# vector::Lingering in the register kernels, run 1's `linger`, committed after this run; variant
# `stagelinger`: the staged kernel's bulk copies also with an L2 evict_last hint).
# (1) the mid-size fused shapes, where the planner takes the staged kernel: planner, register
# kernels forced (stages 0), both variants; (2) the norm GPU tests; (3) memcheck of the norm
# sanitizer cases, racecheck of them with the register kernels forced and with the streaming
# kernel forced (the staged kernel's known reports make the unforced racecheck outrun 10 min).
export SUITE_OUT=/tmp/s20-r2
mkdir -p $SUITE_OUT
export VARIANT_CASES="fused_add_rmsnorm:1024:4096 fused_add_rmsnorm:1024:4096:*:*:*:0 fused_add_rmsnorm:2048:4096 fused_add_rmsnorm:2048:4096:*:*:*:0 fused_add_rmsnorm:4096:4096 fused_add_rmsnorm:4096:4096:*:*:*:0 fused_add_rmsnorm:4096:4096:1:512:1:0 fused_add_rmsnorm:1024:8192 fused_add_rmsnorm:1024:8192:*:*:*:0 fused_add_rmsnorm:4096:8192 fused_add_rmsnorm:4096:8192:*:*:*:0 fused_add_rmsnorm:4096:8192:2:512:1:0 rmsnorm:4096:8192"
timeout 210 bash .bundle/suite.sh info variants > /dev/null
TESTS_FILTER=norm TESTS_SKIP=over_2_pow_31 timeout 140 bash .bundle/suite.sh tests > /dev/null
SANITIZER_TESTS=norm_gpu_sanitizer SANITIZER_TIMEOUT=40 timeout 45 bash .bundle/suite.sh memcheck > /dev/null
for layout in '*:*:*:0' '0:*:1'; do
  FERRINFER_NORM_LAYOUT="$layout" SANITIZER_TESTS=norm_gpu_sanitizer SANITIZER_TIMEOUT=75 timeout 85 bash .bundle/suite.sh racecheck > /dev/null
  mv $SUITE_OUT/racecheck.log "$SUITE_OUT/racecheck-${layout//[*:]/_}.log"  # kept as racecheck-register.log / racecheck-stream.log
done
cat $SUITE_OUT/variants.csv; grep -h "test result\|ERROR SUMMARY\|exit\|panicked" $SUITE_OUT/tests.log $SUITE_OUT/memcheck.log $SUITE_OUT/racecheck-*.log
tar czf $OUT/s20-r2.tgz -C $SUITE_OUT .
