#!/bin/bash
# Session 22 run 2 (carry .bundle of run 1; the working tree's suite.sh for its new sweep):
# SWEEP=fusedchunks — the fused op at 16-byte vectors, 2, 4 or 8 chunks unpipelined against the
# planner, 16384 and 65536 rows (run 1 and session 21: 2 or 4 chunks win at 1024-16384 rows).
export SUITE_OUT=/tmp/s22-r2
SWEEP=fusedchunks timeout 150 bash scripts/gpu/suite.sh sweep > /dev/null
tar czf $OUT/s22-r2.tgz -C $SUITE_OUT .
sort -t, -k5,5n -k4,4n -k7,7n $SUITE_OUT/sweep.csv
