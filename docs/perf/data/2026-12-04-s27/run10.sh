#!/bin/bash
# Session 27 run 10 (carry .bundle, rebuilt: 16-bit single-element lanes converted as a pair):
# the rope GPU tests, memcheck and racecheck of its case list, the Python wheel's tests on CUDA
# tensors (rope's on the device, in a CUDA graph, in place), and the Rust bench's rope grid.
export SUITE_OUT=/tmp/s27-r10
TESTS_FILTER=rope timeout 300 bash .bundle/suite.sh tests > /dev/null
SANITIZER_TESTS=rope SANITIZER_TIMEOUT=60 timeout 70 bash .bundle/suite.sh memcheck > /dev/null
SANITIZER_TESTS=rope SANITIZER_TIMEOUT=60 timeout 70 bash .bundle/suite.sh racecheck > /dev/null
timeout 90 bash .bundle/suite.sh python > /dev/null
BENCH_DTYPES=bf16 BENCH_ROUTINES="apply_rope_pos_ids apply_rope" timeout 40 bash .bundle/suite.sh bench > /dev/null
tar czf $OUT/s27-r10.tgz -C $SUITE_OUT .
sed -n '/rope_gpu rope/,/^== /p' $SUITE_OUT/tests.log | grep -v "^$"
grep -h "ERROR SUMMARY\|RACECHECK SUMMARY\|exit\|passed\|failed" $SUITE_OUT/*.log | sort | uniq -c
cat $SUITE_OUT/ferrinfer.csv
