#!/bin/bash
# Session 15 run 4 (final kernels: logits weighed only where top-k keeps them): every sampling
# GPU test, then memcheck and racecheck of the filter and sampling kernels' cluster paths (rows
# in 1, 2, 4 and 8 blocks), the top-k-then-top-p kernels (probabilities and logits) included.
set -x
R=$OUT/r4; mkdir -p $R
SUITE_OUT=/tmp/s15r4 TESTS_FILTER=sampling_gpu TESTS_SKIP=over_2_pow_31 timeout 330 bash .bundle/suite.sh tests > $R/tests-run.log 2>&1
echo "tests rc=$?" >> $R/tests-run.log
SUITE_OUT=/tmp/s15r4 SANITIZER_TESTS=sampling_gpu_sanitizer_filter_cluster_paths SANITIZER_TIMEOUT=200 bash .bundle/suite.sh memcheck racecheck > $R/sanitizers-run.log 2>&1
cp -r /tmp/s15r4/* $R/ 2>/dev/null; ls $R
