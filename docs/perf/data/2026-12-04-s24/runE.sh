#!/bin/bash
# Session 24 run E (carry .bundle: run C's): racecheck of every norm kernel path with the staged
# kernel off (FERRINFER_NORM_LAYOUT='*:*:*:0': the register and streaming kernels only) — a
# diagnosis of why the every-path racecheck that finished in 17 s in session 22 ran past 140 s
# (session 23) and 540 s (run B).
export SUITE_OUT=/tmp/s24-rE FERRINFER_NORM_LAYOUT='*:*:*:0'
SANITIZER_TESTS="norm_gpu_sanitizer_every_kernel_path" SANITIZER_TIMEOUT=190 \
  timeout 200 bash .bundle/suite.sh racecheck > /dev/null
grep -h "exit\|RACECHECK SUMMARY\|finished in" $SUITE_OUT/*.log
