#!/bin/bash
# Session 14 run 3: memcheck and racecheck of the sampling kernels' cluster paths (rows in 1, 2,
# 4 and 8 blocks), top-p's rejection rounds and min-p's second weighing included.
set -x
SUITE_OUT=/tmp/s14r3 SANITIZER_TESTS=sampling_gpu_sanitizer_filter_cluster_paths SANITIZER_TIMEOUT=280 bash .bundle/suite.sh memcheck racecheck
mkdir -p $OUT/r3; cp -r /tmp/s14r3/* $OUT/r3/ 2>/dev/null; ls $OUT/r3
