#!/bin/bash
# Session 27 run 2 (carry .bundle): the rope GPU tests (grid with every scalar variant, the
# sanitizer case list, > 2^31 elements of q), then the Rust bench's rope grid, bf16 and f16.
export SUITE_OUT=/tmp/s27-r2
TESTS_FILTER=rope timeout 330 bash .bundle/suite.sh tests > /dev/null
BENCH_DTYPES="bf16 f16" BENCH_ROUTINES="apply_rope_pos_ids apply_rope_pos_ids_inplace" timeout 90 bash .bundle/suite.sh bench > /dev/null
tar czf $OUT/s27-r2.tgz -C $SUITE_OUT .
grep -h "test result\|FAILED\|panicked" $SUITE_OUT/tests.log | sort | uniq -c | head -20
grep -h "exit" $SUITE_OUT/*.log | sort | uniq -c
cat $SUITE_OUT/ferrinfer.csv
