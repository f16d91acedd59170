#!/bin/bash
# Session 31 run 1 (H200; carry .bundle built from ae4bed1 + the working tree's batched pass, with
# page variants from scripts/gpu/variant.sh — see run2.sh): the sampling GPU tests on the
# batched pass (every filter but the 16-bit mask, every staged sampler), then memcheck over
# the sampling sanitizer cases. Results in run1/.
export SUITE_OUT=/tmp/s31r1; mkdir -p $SUITE_OUT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $SUITE_OUT/gpu.txt
cat .bundle/commit >> $SUITE_OUT/gpu.txt
TESTS_FILTER=sampling_gpu TESTS_SKIP=over_2_pow_31 timeout 300 bash .bundle/suite.sh tests > /dev/null 2>&1
echo "sampling rc=$?" >> $SUITE_OUT/gpu.txt
SANITIZER_TESTS=sampling_gpu_sanitizer SANITIZER_TIMEOUT=130 timeout 200 bash .bundle/suite.sh memcheck > /dev/null 2>&1
echo "memcheck rc=$?" >> $SUITE_OUT/gpu.txt
tar czf $OUT/s31r1.tgz -C $SUITE_OUT .
cat $SUITE_OUT/gpu.txt; grep -E "test result|passed|failed|ERROR SUMMARY" $SUITE_OUT/*.log | tail -20
