#!/bin/bash
# Session 20 run A (carry .bundle, b9de3f3: the v8 kernels — in-place rows read with L2
# evict_last in the register kernels and the staged kernel's copies): the norm GPU tests, memcheck
# of the norm sanitizer cases (staged included), and the Rust bench's norm grid (bf16).
# Runs 3 and 4 follow on the same machine.
export SUITE_OUT=/tmp/s20-rA
TESTS_FILTER=norm TESTS_SKIP=over_2_pow_31 timeout 150 bash .bundle/suite.sh info tests > /dev/null
SANITIZER_TESTS=norm_.*sanitizer SANITIZER_TIMEOUT=40 timeout 90 bash .bundle/suite.sh memcheck > /dev/null
BENCH_ROUTINES="rmsnorm fused_add_rmsnorm" BENCH_DTYPES=bf16 timeout 90 bash .bundle/suite.sh bench > /dev/null
rm -f $SUITE_OUT/ptxas.log
tar czf $OUT/s20-rA.tgz -C $SUITE_OUT .
grep -h "test result\|ERROR SUMMARY\|exit [1-9]" $SUITE_OUT/tests.log $SUITE_OUT/memcheck.log $SUITE_OUT/bench.log; cat $SUITE_OUT/ferrinfer.csv
