#!/bin/bash
# Session 31 run 4 (H200; carry .bundle of runs 1–3 with .bundle/aot-new.tar.xz:
# `bash scripts/gpu/variant.sh new cascade page` on the working tree — the cascade merge with
# each row's pointers computed once, lanes by shifts and one-step merges weighing by wₖ / W,
# and the page append's streaming stores): the cascade and page GPU tests on the variant's
# kernels (the >2³¹-element case included), then memcheck over both families' sanitizer
# cases. Results in run4/.
export SUITE_OUT=/tmp/s31r4; mkdir -p $SUITE_OUT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $SUITE_OUT/gpu.txt
cat .bundle/commit >> $SUITE_OUT/gpu.txt
export AOT_VARIANT=new
TESTS_FILTER=cascade_gpu timeout 150 bash .bundle/suite.sh tests > /dev/null 2>&1
echo "cascade rc=$?" >> $SUITE_OUT/gpu.txt; mv $SUITE_OUT/tests.log $SUITE_OUT/tests-cascade.log
TESTS_FILTER=page_gpu TESTS_SKIP=sanitizer timeout 120 bash .bundle/suite.sh tests > /dev/null 2>&1
echo "page rc=$?" >> $SUITE_OUT/gpu.txt; mv $SUITE_OUT/tests.log $SUITE_OUT/tests-page.log
SANITIZER_TESTS="cascade_gpu_sanitizer\|page_gpu_sanitizer" SANITIZER_TIMEOUT=110 timeout 240 \
  bash .bundle/suite.sh memcheck > /dev/null 2>&1
echo "memcheck rc=$?" >> $SUITE_OUT/gpu.txt
tar czf $OUT/s31r4.tgz -C $SUITE_OUT .
cat $SUITE_OUT/gpu.txt; grep -hE "^test |test result|ERROR SUMMARY|memcheck:" $SUITE_OUT/*.log | grep -v "0 passed" | tail -30
