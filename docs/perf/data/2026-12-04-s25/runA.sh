#!/bin/bash
# Session 25 run A (carry .bundle: the peeled kernels, built from the working tree; after a run that
# copied .peers/a to /tmp/peers): every norm GPU test but the grid and > 2^31 (the layouts test
# holds the peeled widths), memcheck of every kernel path (peeled rows among them), racecheck of
# the register kernels (staged off) and of the staged kernel's small case list.
export SUITE_OUT=/tmp/s25-rA
TESTS_FILTER=norm_ TESTS_SKIP="norm_gpu_grid over_2_pow_31" timeout 200 bash .bundle/suite.sh tests > /dev/null
SANITIZER_TESTS='norm_gpu_sanitizer_every\|narrow_vectors\|norm_staged_gpu_sanitizer' SANITIZER_TIMEOUT=60 \
  timeout 120 bash .bundle/suite.sh memcheck > /dev/null
FERRINFER_NORM_LAYOUT='*:*:*:0' SANITIZER_TESTS='norm_gpu_sanitizer_every\|narrow_vectors' SANITIZER_TIMEOUT=60 \
  timeout 70 bash .bundle/suite.sh racecheck > /dev/null
SANITIZER_TESTS='norm_staged_gpu_racecheck' SANITIZER_TIMEOUT=170 timeout 175 bash .bundle/suite.sh racecheck > /dev/null
tar czf $OUT/s25-rA.tgz -C $SUITE_OUT .
grep -h "exit\|ERROR SUMMARY\|RACECHECK SUMMARY\|test result\|FAILED\|panicked" $SUITE_OUT/*.log | sort | uniq -c
