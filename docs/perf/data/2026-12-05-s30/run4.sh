#!/bin/bash
# Session 30 run 4 (made, H200; carry .bundle of f958101; results in run4/): memcheck over the
# sampling sanitizer cases on the new weighing, then racecheck over every kernel path.
export SUITE_OUT=/tmp/s30r4; mkdir -p $SUITE_OUT
SANITIZER_TESTS=sampling_gpu_sanitizer SANITIZER_TIMEOUT=130 timeout 280 bash .bundle/suite.sh memcheck > /dev/null 2>&1
SANITIZER_TESTS=sampling_gpu_sanitizer_every_kernel_path SANITIZER_TIMEOUT=230 timeout 240 bash .bundle/suite.sh racecheck > /dev/null 2>&1
tar czf $OUT/s30r4.tgz -C $SUITE_OUT .
