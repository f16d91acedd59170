#!/bin/bash
# Session 18 run 8 (bundle c7dc4bf: merge_states): the cascade GPU tests (their grid and
# sanitizer cases walk every op of the family, merge_states' three stacked states included),
# memcheck and racecheck, the Rust bench's merge_states grid (bf16), every Python CUDA test.
set -x
export SUITE_OUT=$OUT/r8
mkdir -p $SUITE_OUT
TESTS_FILTER=cascade_gpu bash .bundle/suite.sh tests
SANITIZER_TESTS=cascade_gpu_sanitizer bash .bundle/suite.sh memcheck racecheck
BENCH_ROUTINES=merge_states BENCH_DTYPES=bf16 bash .bundle/suite.sh bench
bash .bundle/suite.sh python
tar czf $OUT/suite.tgz -C $SUITE_OUT .
