#!/bin/bash
# Session 24 run B (carry .bundle: run A's, with its `rmspred` variant): racecheck of every norm
# kernel path on the kernels about to be committed, given 540 s — it ran past them (exit 124),
# as session 23's did at 140 s: `norm_gpu_sanitizer_every_kernel_path` is too long for racecheck.
export SUITE_OUT=/tmp/s24-rB
AOT_VARIANT=rmspred SANITIZER_TESTS="norm_gpu_sanitizer_every_kernel_path" SANITIZER_TIMEOUT=540 \
  timeout 560 bash .bundle/suite.sh racecheck > /dev/null
grep -h "exit\|RACECHECK SUMMARY" $SUITE_OUT/*.log
