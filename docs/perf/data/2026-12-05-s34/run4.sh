#!/bin/bash
# Session 34, run 4 (carry .bundle at 0453968): the cascade merge one vector a lane at a time
# (1:*:*) beside two (2:*:*), Rust bench, two passes each, over rows and head_dim.
export SUITE_OUT=/tmp/s34b; mkdir -p $SUITE_OUT; nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
for r in merge_state_in_place merge_state; do
  LAYOUT_VAR=FERRINFER_CASCADE_LAYOUT LAYOUT_ROUTINE=$r LAYOUT_CASES="32:128 128:128 512:128 1024:128 2048:128 \
    4096:128 16384:128 65536:128 32:64 4096:64 65536:64 32:256 4096:256 65536:256" LAYOUTS="1:*:* 2:*:* 1:*:* 2:*:*" \
    timeout 200 bash .bundle/suite.sh layouts > /dev/null 2>&1
  echo "$r rc=$? ${SECONDS}s" >> $OUT/gpu.txt
done
cp $SUITE_OUT/layouts.csv $OUT/; cat $OUT/gpu.txt
