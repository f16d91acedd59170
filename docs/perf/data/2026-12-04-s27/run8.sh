#!/bin/bash
# Session 27 run 8 (carry .bundle, rebuilt with apply_rope / apply_llama31_rope over ragged
# batches): the rope GPU tests, memcheck and racecheck of the rope sanitizer case list, the Rust
# bench's rope routines (bf16, f16).
export SUITE_OUT=/tmp/s27-r8
TESTS_FILTER=rope timeout 330 bash .bundle/suite.sh tests > /dev/null
SANITIZER_TESTS=rope SANITIZER_TIMEOUT=90 timeout 100 bash .bundle/suite.sh memcheck > /dev/null
SANITIZER_TESTS=rope SANITIZER_TIMEOUT=90 timeout 100 bash .bundle/suite.sh racecheck > /dev/null
BENCH_DTYPES="bf16 f16" BENCH_ROUTINES="apply_rope_pos_ids apply_rope apply_llama31_rope_pos_ids" timeout 60 bash .bundle/suite.sh bench > /dev/null
tar czf $OUT/s27-r8.tgz -C $SUITE_OUT .
sed -n '/rope_gpu rope/,/^== /p' $SUITE_OUT/tests.log | grep -v "^$"
grep -h "ERROR SUMMARY\|RACECHECK SUMMARY\|exit" $SUITE_OUT/*.log | sort | uniq -c
cat $SUITE_OUT/ferrinfer.csv
