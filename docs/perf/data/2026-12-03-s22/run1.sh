#!/bin/bash
# Session 22 run 1 (carry .bundle: session 21's kernels — row groups of any whole number of
# warps, staged copies without the L2 hint — with session 22's planner: the fused ops' rows of
# 2- and 4-byte vectors pipelined, 4 chunks; the staged kernel's threshold on a row's slot, so
# fused 2 KB rows are staged again). Session 21's run 7 (this racecheck and > 2^31) was cut off
# by an environment restart and returned nothing.
# 1. every norm GPU test, > 2^31 elements included (the grid now takes the new defaults);
# 2. SWEEP=narrow: the fused op at 2-, 4- and 8-byte vectors and 2 KB rows, the planner against
#    the old choices;
# 3. racecheck of the norm tests' sanitizer cases (row groups of 3 and 5 warps meet at named
#    barriers: 3000- and 5120-wide rows; the staged kernel's cases).
export SUITE_OUT=/tmp/s22-r1
TESTS_FILTER=norm timeout 230 bash .bundle/suite.sh tests > /dev/null
SWEEP=narrow timeout 100 bash .bundle/suite.sh sweep > /dev/null
SANITIZER_TESTS="norm_gpu_sanitizer_every_kernel_path\|norm_staged_gpu_sanitizer" SANITIZER_TIMEOUT=150 \
  timeout 230 bash .bundle/suite.sh racecheck > /dev/null
tar czf $OUT/s22-r1.tgz -C $SUITE_OUT .
grep -h "exit\|ERROR SUMMARY\|RACECHECK SUMMARY" $SUITE_OUT/*.log | head -30
grep -h "test result" $SUITE_OUT/*.log
sort -t, -k5,5n -k4,4n -k7,7n $SUITE_OUT/sweep.csv
