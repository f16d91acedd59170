#!/bin/bash
# Session 23 run A (carry .bundle: norm v10 kernels — rows of 2- and 4-byte vectors with
# predicated loads and stores past the row's end instead of branches, no L2 hint on their
# in-place loads; planner unchanged from 90ac173, never run on the GPU before as a whole).
# 1. every norm GPU test, > 2^31 elements included;
# 2. SWEEP=narrow: rmsnorm and the fused op at 2-, 4- and 8-byte vectors, layouts forced;
#    SWEEP=long (the working tree's suite.sh): rmsnorm's 16-32 KB rows, staged against registers;
export SUITE_OUT=/tmp/s23-rA
timeout 20 bash .bundle/suite.sh info > /dev/null
TESTS_FILTER=norm timeout 230 bash .bundle/suite.sh tests > /dev/null
SWEEP=narrow timeout 200 bash .bundle/suite.sh sweep > /dev/null
cp $SUITE_OUT/sweep.csv $SUITE_OUT/sweep-narrow.csv
SWEEP=long timeout 90 bash scripts/gpu/suite.sh sweep > /dev/null
cp $SUITE_OUT/sweep.csv $SUITE_OUT/sweep-long.csv
tar czf $OUT/s23-rA.tgz -C $SUITE_OUT .
grep -h "exit" $SUITE_OUT/*.log | head -30
grep -h "test result" $SUITE_OUT/*.log
sort -t, -k2,2 -k5,5n -k4,4n -k7,7n $SUITE_OUT/sweep-narrow.csv $SUITE_OUT/sweep-long.csv
