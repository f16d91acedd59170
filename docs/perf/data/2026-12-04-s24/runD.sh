#!/bin/bash
# Session 24 run D (.bundle from run C): the staged kernel's GPU tests (run C's test step ran out
# of time before them) and cascade's > 2^31-element test (run A's ran out of time in it; the
# grid passed there) — cascade's SASS changed in sessions 22-23 and had not been re-run.
export SUITE_OUT=/tmp/s24-rD
TESTS_FILTER=staged timeout 100 bash .bundle/suite.sh tests > /dev/null
TESTS_FILTER=cascade_gpu_over timeout 230 bash .bundle/suite.sh tests > /dev/null
grep -h "^test \|test result\|exit" $SUITE_OUT/tests.log | grep -v "0 passed"
