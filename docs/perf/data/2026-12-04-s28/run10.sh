#!/bin/bash
# Session 28 run 10 (carry .bundle, rebuilt: merge_states' any-count entry four states a step,
# every state's loads before any is weighed; a step's states past the last not read): the
# cascade GPU tests, memcheck and racecheck of its case list, and its Rust bench.
export SUITE_OUT=/tmp/s28-r10
TESTS_FILTER=cascade timeout 250 bash .bundle/suite.sh tests > /dev/null
SANITIZER_TESTS=cascade SANITIZER_TIMEOUT=100 timeout 150 bash .bundle/suite.sh memcheck > /dev/null
SANITIZER_TESTS=cascade SANITIZER_TIMEOUT=100 timeout 150 bash .bundle/suite.sh racecheck > /dev/null
BENCH_DTYPES=bf16 BENCH_ROUTINES="merge_states merge_state merge_state_in_place" timeout 60 bash .bundle/suite.sh bench > /dev/null
tar czf $OUT/s28-r10.tgz -C $SUITE_OUT .
sed -n '/cascade_gpu cascade/,/^== /p' $SUITE_OUT/tests.log | grep -v "^$" | tail -8
grep -h "ERROR SUMMARY\|RACECHECK SUMMARY\|exit" $SUITE_OUT/*.log | sort | uniq -c
cat $SUITE_OUT/ferrinfer.csv
