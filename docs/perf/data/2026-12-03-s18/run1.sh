#!/bin/bash
# Session 18 run 1 (bundle 92cb24f): the cascade family's first GPU run — its GPU tests (the grid,
# in place, > 2^31 elements), memcheck and racecheck, the Rust bench's grid (the shapes,
# bf16 and f16), Nsight Compute on merge_state at seq 16384 — then every Python CUDA test (the
# launch path changed in 8473830: one context query a launch) and the host path per call
# (`eager`: back-to-back calls, then `issue`: the enqueue time alone).
set -x
export SUITE_OUT=$OUT/r1
bash .bundle/suite.sh info
TESTS_FILTER=cascade_gpu bash .bundle/suite.sh tests
SANITIZER_TESTS=cascade_gpu_sanitizer bash .bundle/suite.sh memcheck racecheck
BENCH_ROUTINES="merge_state merge_state_in_place" bash .bundle/suite.sh bench
FERRINFER_DISABLE_JIT=1 FERRINFER_AOT_DIR=/tmp/ferrinfer-aot /usr/local/cuda/bin/ncu --clock-control none --launch-count 1 \
  -k regex:ferrinfer --section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis \
  .bundle/ferrinfer-bench --routine merge_state --dtype bf16 --batch-size 524288 --hidden-size 128 --num-iters 1 \
  --warmup-seconds 0 > $OUT/r1/ncu-merge.log 2>&1
bash .bundle/suite.sh python eager
