#!/bin/bash
# Session 28 run 7 (carry .bundle, rebuilt: the cache ops' angles read where they are turned, no
# shared table nor barrier; one-step blocks where the grid leaves multiprocessors idle): the rope
# GPU tests, memcheck and racecheck of the rope paths (narrow tables with odd row pads too), the
# Python wheel's CUDA tests, and the Rust bench's rope routines.
export SUITE_OUT=/tmp/s28-r7
TESTS_FILTER=rope timeout 280 bash .bundle/suite.sh tests > /dev/null
SANITIZER_TESTS="rope_gpu_sanitizer\|outside_the_table\|narrow_tables" SANITIZER_TIMEOUT=120 timeout 200 bash .bundle/suite.sh memcheck > /dev/null
SANITIZER_TESTS="rope_gpu_sanitizer\|outside_the_table" SANITIZER_TIMEOUT=100 timeout 120 bash .bundle/suite.sh racecheck > /dev/null
timeout 120 bash .bundle/suite.sh python > /dev/null
BENCH_DTYPES=bf16 BENCH_ROUTINES="apply_rope_with_cos_sin_cache apply_rope_pos_ids apply_rope" timeout 80 bash .bundle/suite.sh bench > /dev/null
tar czf $OUT/s28-r7.tgz -C $SUITE_OUT .
sed -n '/rope_gpu rope/,/^== /p' $SUITE_OUT/tests.log | grep -v "^$" | tail -12
grep -h "ERROR SUMMARY\|RACECHECK SUMMARY\|exit\|passed\|failed" $SUITE_OUT/*.log | sort | uniq -c
cat $SUITE_OUT/ferrinfer.csv
