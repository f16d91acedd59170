#!/bin/bash
# Session 32's prepared run 2 (not run; the machine of run 1, carrying .peers/a for run 3):
# the cascade launch swept in the Rust bench (bf16, graph replay) with
# FERRINFER_CASCADE_LAYOUT=unroll:lanes:block — merge_state and merge_state_in_place with one
# or two vectors a lane, lanes and blocks; merge_states (three states stacked: never unrolled)
# lanes and blocks only — at 1 to 16384 positions of 32 heads × head_dim 128 (T = rows).
# Session 32's prediction (docs/perf/cascade.md): `2` cuts the two-state merge's instructions a
# value by ~35 %, so the in-place merge at seq 2048 (T = 65536), bound by instructions, gains
# most. Results in run2/.
mkdir -p /tmp/peers && cp -r .peers/a/* /tmp/peers/
export SUITE_OUT=/tmp/s32r2
cases="32:128 4096:128 65536:128 524288:128"
for routine in merge_state_in_place merge_state; do
  LAYOUT_VAR=FERRINFER_CASCADE_LAYOUT LAYOUT_ROUTINE=$routine LAYOUT_CASES="$cases" \
    LAYOUTS="*:* 2:*:* 1:*:256 2:*:256 2:*:64 2:4:* 1:8:*" timeout 170 bash .bundle/suite.sh layouts > /dev/null
done
LAYOUT_VAR=FERRINFER_CASCADE_LAYOUT LAYOUT_ROUTINE=merge_states LAYOUT_CASES="$cases" \
  LAYOUTS="*:* *:*:256 *:*:64 *:8:*" timeout 120 bash .bundle/suite.sh layouts > /dev/null
tar czf $OUT/s32r2.tgz -C $SUITE_OUT .
sort -t, -k2,2 -k4,4n -k7,7n $SUITE_OUT/layouts.csv
