#!/bin/bash
# Session 34, run 3 (carry .bundle at 0453968): every cascade GPU test (the grid and > 2^31
# elements included), racecheck and memcheck over its sanitizer case, all with both states'
# unrolled entries forced (FERRINFER_CASCADE_LAYOUT=2).
export SUITE_OUT=/tmp/s34; mkdir -p $SUITE_OUT; nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
export FERRINFER_CASCADE_LAYOUT=2
TESTS_FILTER=cascade_gpu timeout 300 bash .bundle/suite.sh tests > /dev/null 2>&1
echo "tests-cascade-2 rc=$? ${SECONDS}s" >> $OUT/gpu.txt; cp $SUITE_OUT/tests.log $OUT/tests-cascade-2.log
SANITIZER_TESTS=cascade_gpu_sanitizer SANITIZER_TIMEOUT=60 timeout 70 bash .bundle/suite.sh racecheck > /dev/null 2>&1
echo "racecheck-2 rc=$? ${SECONDS}s" >> $OUT/gpu.txt; cp $SUITE_OUT/racecheck.log $OUT/racecheck-cascade-2.log
SANITIZER_TESTS=cascade_gpu_sanitizer SANITIZER_TIMEOUT=60 timeout 70 bash .bundle/suite.sh memcheck > /dev/null 2>&1
echo "memcheck-2 rc=$? ${SECONDS}s" >> $OUT/gpu.txt; cp $SUITE_OUT/memcheck.log $OUT/memcheck-cascade-2.log
cat $OUT/gpu.txt
