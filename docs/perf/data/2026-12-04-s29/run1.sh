#!/bin/bash
# Session 29 run 1 (carry .bundle): the page family's GPU tests (grid, layouts and page sizes,
# tables leading outside the caches), memcheck and racecheck of its kernel paths, the Rust bench
# of append_paged_kv_cache at the points (bf16, f16), the Python CUDA tests.
export SUITE_OUT=/tmp/s29-r1
TESTS_FILTER=page timeout 200 bash .bundle/suite.sh tests > /dev/null
SANITIZER_TESTS="page_gpu_sanitizer\|outside_the_caches" SANITIZER_TIMEOUT=100 timeout 120 bash .bundle/suite.sh memcheck > /dev/null
SANITIZER_TESTS="page_gpu_sanitizer\|outside_the_caches" SANITIZER_TIMEOUT=100 timeout 120 bash .bundle/suite.sh racecheck > /dev/null
BENCH_ROUTINES=append_paged_kv_cache BENCH_DTYPES="bf16 f16" timeout 60 bash .bundle/suite.sh bench > /dev/null
timeout 120 bash .bundle/suite.sh python > /dev/null
tar czf $OUT/s29-r1.tgz -C $SUITE_OUT .
sed -n '/page_gpu/,/^== /p' $SUITE_OUT/tests.log | grep -v "^$" | tail -12
grep -h "ERROR SUMMARY\|RACECHECK SUMMARY\|exit\|passed\|failed" $SUITE_OUT/*.log | sort | uniq -c
cat $SUITE_OUT/*.csv 2>/dev/null | grep -i "append\|op," | head -20
