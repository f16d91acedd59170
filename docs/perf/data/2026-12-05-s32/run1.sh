#!/bin/bash
# Session 32's prepared run 1 (not run: no device was lent in session 32; for the next GPU
# session, carry a .bundle built from main by scripts/gpu/bundle.sh): the cascade GPU tests on
# the planner's launch and with every 16-byte-vector call merging two vectors a lane
# (FERRINFER_CASCADE_LAYOUT=2: the `x2` entries), the page tests with every append storing
# evicted first (FERRINFER_PAGE_LAYOUT='*:*:1': the copy of the loop only appends past L2
# reach by default), memcheck over both families' sanitizer cases in each configuration,
# racecheck over cascade's. Results in run1/<configuration>/.
base=/tmp/s32r1; mkdir -p $base
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $base/gpu.txt
cat .bundle/commit >> $base/gpu.txt
check() { # check NAME ENV...: tests, memcheck and racecheck under ENV, into $base/NAME
  local name=$1; shift
  export SUITE_OUT=$base/$name; mkdir -p $SUITE_OUT
  env "$@" TESTS_FILTER=cascade_gpu TESTS_SKIP=over_2_pow_31 timeout 150 bash .bundle/suite.sh tests > /dev/null 2>&1
  echo "$name cascade tests rc=$?" >> $base/gpu.txt; mv $SUITE_OUT/tests.log $SUITE_OUT/tests-cascade.log
  env "$@" TESTS_FILTER=page_gpu TESTS_SKIP=layouts timeout 100 bash .bundle/suite.sh tests > /dev/null 2>&1
  echo "$name page tests rc=$?" >> $base/gpu.txt; mv $SUITE_OUT/tests.log $SUITE_OUT/tests-page.log
  env "$@" SANITIZER_TESTS="cascade_gpu_sanitizer\|page_gpu_sanitizer" SANITIZER_TIMEOUT=60 timeout 130 \
    bash .bundle/suite.sh memcheck > /dev/null 2>&1
  echo "$name memcheck rc=$?" >> $base/gpu.txt
  env "$@" SANITIZER_TESTS=cascade_gpu_sanitizer SANITIZER_TIMEOUT=60 timeout 70 bash .bundle/suite.sh racecheck > /dev/null 2>&1
  echo "$name racecheck rc=$?" >> $base/gpu.txt
}
check planner
check forced FERRINFER_CASCADE_LAYOUT=2 FERRINFER_PAGE_LAYOUT='*:*:1'
tar czf $OUT/s32r1.tgz -C $base .
cat $base/gpu.txt; grep -rhE "^test |test result|ERROR SUMMARY|RACECHECK SUMMARY" $base | grep -v "0 passed" | tail -30
