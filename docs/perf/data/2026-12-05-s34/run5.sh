#!/bin/bash
# Session 34, run 5 (carry .bundle built at the planner's unroll rule): the append's evicted-first
# copy under memcheck (FERRINFER_PAGE_LAYOUT='*:*:1': the sanitizer cases reach it only so), then
# the cascade planner's launch (`*:*`) beside both unrolls forced, Rust bench, two passes each.
export SUITE_OUT=/tmp/s34r5; mkdir -p $SUITE_OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $SUITE_OUT/gpu.txt; cat .bundle/commit >> $SUITE_OUT/gpu.txt
FERRINFER_PAGE_LAYOUT='*:*:1' SANITIZER_TESTS=page_gpu_sanitizer SANITIZER_TIMEOUT=60 timeout 70 \
  bash .bundle/suite.sh memcheck > /dev/null 2>&1
echo "memcheck-page-evict-first rc=$? at ${SECONDS}s" >> $SUITE_OUT/gpu.txt
for r in merge_state_in_place merge_state; do
  LAYOUT_VAR=FERRINFER_CASCADE_LAYOUT LAYOUT_ROUTINE=$r LAYOUTS="*:* 1:*:* 2:*:* *:*" \
    LAYOUT_CASES="32:128 512:128 4096:128 16384:128 65536:128 32:256 4096:256 65536:64" timeout 100 \
    bash .bundle/suite.sh layouts > /dev/null 2>&1
  echo "layouts-$r rc=$? at ${SECONDS}s" >> $SUITE_OUT/gpu.txt
done
cp $SUITE_OUT/*.log $SUITE_OUT/*.csv $SUITE_OUT/gpu.txt $OUT/ 2>/dev/null
cat $SUITE_OUT/gpu.txt; grep -hE "^test |ERROR SUMMARY" $SUITE_OUT/memcheck.log
