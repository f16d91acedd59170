#!/bin/bash
# Session 21 run 4 (carry .bundle: row groups of whole warps, any number — 5120 = 5 warps of 4
# vectors, not 8; the staged kernel only for rows of >= 4 KB; its bulk copies without the L2
# hint): the norm GPU tests on these kernels (all but > 2^31), then SWEEP=wide: the planner's
# choice against the layouts forced one by one at T = 4096 (and 16384) for the widths run 1
# found short.
export SUITE_OUT=/tmp/s21-r4
TESTS_FILTER=norm TESTS_SKIP=over_2_pow_31 timeout 220 bash .bundle/suite.sh tests > /dev/null
SWEEP=wide timeout 230 bash .bundle/suite.sh sweep > /dev/null
tar czf $OUT/s21-r4.tgz -C $SUITE_OUT .
grep -h "exit" $SUITE_OUT/*.log; grep -h "test result\|FAILED\|panicked" $SUITE_OUT/tests.log | sort | uniq -c
