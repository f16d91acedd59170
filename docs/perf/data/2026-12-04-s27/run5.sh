#!/bin/bash
# Session 27 run 5 (carry .bundle, rebuilt: angles once a (token, pair) in shared memory): the
# rope GPU tests, the Rust bench's rope grid (bf16, f16), and the rope layout swept.
export SUITE_OUT=/tmp/s27-r5
TESTS_FILTER=rope timeout 380 bash .bundle/suite.sh tests > /dev/null
BENCH_DTYPES="bf16 f16" BENCH_ROUTINES="apply_rope_pos_ids apply_rope_pos_ids_inplace" timeout 60 bash .bundle/suite.sh bench > /dev/null
LAYOUT_VAR=FERRINFER_ROPE_LAYOUT LAYOUT_ROUTINE=apply_rope_pos_ids LAYOUTS="*:* 128:* 512:* 1024:* 256:1 256:2 256:4 256:8 512:2" \
  LAYOUT_CASES="1:128 128:128 2048:128 16384:128" timeout 120 bash .bundle/suite.sh layouts > /dev/null
tar czf $OUT/s27-r5.tgz -C $SUITE_OUT .
sed -n '/rope_gpu rope/,/^== /p' $SUITE_OUT/tests.log | grep -v "^$"
grep -h "exit" $SUITE_OUT/*.log | sort | uniq -c
cat $SUITE_OUT/ferrinfer.csv; sort -t, -k4,4n -k7,7n $SUITE_OUT/layouts.csv
