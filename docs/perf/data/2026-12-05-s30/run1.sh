#!/bin/bash
# Session 30 run 1 (made, H200; carry .bundle built at f958101 with the variant
# .bundle/aot-pass.tar.xz from batched-pass.patch — see run3.sh): the sampling GPU tests on the
# new weighing, the page tests (get_batch_indices_positions' first GPU run), then the sampling
# tests again on the `pass` variant (grid skipped). Results in run1/.
export SUITE_OUT=/tmp/s30r1; mkdir -p $SUITE_OUT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $SUITE_OUT/gpu.txt
cat .bundle/commit >> $SUITE_OUT/gpu.txt
TESTS_FILTER=sampling_gpu TESTS_SKIP=over_2_pow_31 timeout 300 bash .bundle/suite.sh tests > /dev/null 2>&1
echo "sampling rc=$?" >> $SUITE_OUT/gpu.txt
TESTS_FILTER=page_gpu timeout 90 bash .bundle/suite.sh tests > /dev/null 2>&1
echo "page rc=$?" >> $SUITE_OUT/gpu.txt
mv $SUITE_OUT/tests.log $SUITE_OUT/tests-main.log
AOT_VARIANT=pass TESTS_FILTER=sampling_gpu TESTS_SKIP="over_2_pow_31 _grid" timeout 120 bash .bundle/suite.sh tests > /dev/null 2>&1
echo "pass-variant rc=$?" >> $SUITE_OUT/gpu.txt
mv $SUITE_OUT/tests.log $SUITE_OUT/tests-pass.log
tar czf $OUT/s30r1.tgz -C $SUITE_OUT .
