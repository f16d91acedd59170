#!/bin/bash
# Session 32's prepared run 1 (not run: no device was lent in session 32). For the next GPU
# session: carry a .bundle built from main by scripts/gpu/bundle.sh, then one device command
# per configuration (each well under the 10-minute limit):
#   bash docs/perf/data/2026-12-05-s32/run1.sh planner   # the planner's launches
#   bash docs/perf/data/2026-12-05-s32/run1.sh forced    # FERRINFER_CASCADE_LAYOUT=2 (every
#     16-byte two-state merge through the unrolled `x2_s2` entries) and
#     FERRINFER_PAGE_LAYOUT='*:*:1' (every append through its evicted-first copy, which the
#     sanitizer cases, all below L2, reach only so)
# Each: the cascade GPU tests (the > 2^31-element one in `forced`: the unrolled entries'
# offsets), the page GPU tests, memcheck over both families' sanitizer cases, racecheck over
# cascade's. Results in run1/<configuration>/.
config=${1:?planner or forced}
case $config in
  planner) forced=(); skip=over_2_pow_31 ;;
  forced) forced=(FERRINFER_CASCADE_LAYOUT=2 "FERRINFER_PAGE_LAYOUT=*:*:1"); skip="" ;;
  *) echo "planner or forced" >&2; exit 2 ;;
esac
# A bundle older than the unrolled entries would ignore the knob and pass on the planner's path.
tar xJOf .bundle/aot.tar.xz | grep -aq ferrinfer_merge_bf16_v8x2_s2 \
  || { echo "the .bundle predates the unrolled cascade entries: rebuild it (scripts/gpu/bundle.sh)" >&2; exit 2; }
export SUITE_OUT=/tmp/s32r1/$config; mkdir -p $SUITE_OUT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $SUITE_OUT/gpu.txt
cat .bundle/commit >> $SUITE_OUT/gpu.txt
env "${forced[@]}" TESTS_FILTER=cascade_gpu TESTS_SKIP=$skip timeout 170 bash .bundle/suite.sh tests > /dev/null 2>&1
echo "cascade tests rc=$?" >> $SUITE_OUT/gpu.txt; mv $SUITE_OUT/tests.log $SUITE_OUT/tests-cascade.log
env "${forced[@]}" TESTS_FILTER=page_gpu TESTS_SKIP=layouts timeout 100 bash .bundle/suite.sh tests > /dev/null 2>&1
echo "page tests rc=$?" >> $SUITE_OUT/gpu.txt; mv $SUITE_OUT/tests.log $SUITE_OUT/tests-page.log
env "${forced[@]}" SANITIZER_TESTS="cascade_gpu_sanitizer\|page_gpu_sanitizer" SANITIZER_TIMEOUT=60 timeout 130 \
  bash .bundle/suite.sh memcheck > /dev/null 2>&1
echo "memcheck rc=$?" >> $SUITE_OUT/gpu.txt
env "${forced[@]}" SANITIZER_TESTS=cascade_gpu_sanitizer SANITIZER_TIMEOUT=60 timeout 70 \
  bash .bundle/suite.sh racecheck > /dev/null 2>&1
echo "racecheck rc=$?" >> $SUITE_OUT/gpu.txt
tar czf $OUT/s32r1-$config.tgz -C $SUITE_OUT .
cat $SUITE_OUT/gpu.txt; grep -hE "^test |test result|ERROR SUMMARY|RACECHECK SUMMARY" $SUITE_OUT/*.log | grep -v "0 passed" | tail -30
