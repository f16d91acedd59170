#!/bin/bash
# Session 28 run 1 (carry .bundle): the rope GPU tests (the cos/sin-cache ops in the grid, narrow
# tables, positions outside the table), then memcheck and racecheck of the rope kernel paths
# (every path's case list and the outside-the-table case).
export SUITE_OUT=/tmp/s28-r1
TESTS_FILTER=rope timeout 280 bash .bundle/suite.sh tests > /dev/null
SANITIZER_TESTS="rope_gpu_sanitizer\|outside_the_table" SANITIZER_TIMEOUT=100 timeout 150 bash .bundle/suite.sh memcheck > /dev/null
SANITIZER_TESTS="rope_gpu_sanitizer\|outside_the_table" SANITIZER_TIMEOUT=100 timeout 150 bash .bundle/suite.sh racecheck > /dev/null
tar czf $OUT/s28-r1.tgz -C $SUITE_OUT .
sed -n '/rope_gpu rope/,/^== /p' $SUITE_OUT/tests.log | grep -v "^$" | tail -20
grep -h "ERROR SUMMARY\|RACECHECK SUMMARY\|exit\|passed\|failed" $SUITE_OUT/*.log | sort | uniq -c
