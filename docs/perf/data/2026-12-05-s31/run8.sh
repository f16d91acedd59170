#!/bin/bash
# Session 31 run 8 (H200; carry .bundle built from the working tree of the cascade and page
# commits: the merge with each row's pointers computed once and its values loaded before its
# scores; the append's store policy chosen by size): the cascade and page GPU tests (the
# >2^31-element case included, page's sanitizer-path case left to memcheck), memcheck over
# both families' sanitizer cases, then the Rust bench's grid of the cascade ops and the
# append, bf16 (graph replay). Results in run8/.
export SUITE_OUT=/tmp/s31r8; mkdir -p $SUITE_OUT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $SUITE_OUT/gpu.txt
cat .bundle/commit >> $SUITE_OUT/gpu.txt
TESTS_FILTER=cascade_gpu timeout 150 bash .bundle/suite.sh tests > /dev/null 2>&1
echo "cascade rc=$?" >> $SUITE_OUT/gpu.txt; mv $SUITE_OUT/tests.log $SUITE_OUT/tests-cascade.log
TESTS_FILTER=page_gpu TESTS_SKIP="sanitizer layouts" timeout 90 bash .bundle/suite.sh tests > /dev/null 2>&1
echo "page rc=$?" >> $SUITE_OUT/gpu.txt; mv $SUITE_OUT/tests.log $SUITE_OUT/tests-page.log
SANITIZER_TESTS="cascade_gpu_sanitizer\|page_gpu_sanitizer" SANITIZER_TIMEOUT=60 timeout 130 \
  bash .bundle/suite.sh memcheck > /dev/null 2>&1
echo "memcheck rc=$?" >> $SUITE_OUT/gpu.txt
BENCH_DTYPES=bf16 BENCH_ROUTINES="merge_state merge_state_in_place merge_states append_paged_kv_cache" \
  timeout 90 bash .bundle/suite.sh bench > /dev/null 2>&1
echo "bench rc=$?" >> $SUITE_OUT/gpu.txt
tar czf $OUT/s31r8.tgz -C $SUITE_OUT .
cat $SUITE_OUT/gpu.txt; grep -hE "^test |test result|ERROR SUMMARY" $SUITE_OUT/*.log | grep -v "0 passed" | tail -20
cat $SUITE_OUT/ferrinfer.csv
