#!/bin/bash
# Session 18 run 5 (bundle of "cascade: merge_state's own entries; loads the compiler cannot
# sink"): the cascade GPU tests (with the fixed > 2^31 check), memcheck and racecheck, the Rust
# bench's cascade grid and ncu at seq 16384; then the activation family's cache policy (cached
# against streaming loads and stores, `ACTSWEEP=stream`) at the points still short of FlashInfer
# from Python (run 4: T = 1024 at d >= 11008, 4096 x 4096, 16384 x 4096).
set -x
export SUITE_OUT=$OUT/r5
mkdir -p $SUITE_OUT
TESTS_FILTER=cascade_gpu bash .bundle/suite.sh tests
SANITIZER_TESTS=cascade_gpu_sanitizer bash .bundle/suite.sh memcheck racecheck
BENCH_ROUTINES="merge_state merge_state_in_place" bash .bundle/suite.sh bench
FERRINFER_DISABLE_JIT=1 FERRINFER_AOT_DIR=/tmp/ferrinfer-aot /usr/local/cuda/bin/ncu --clock-control none --launch-count 1 \
  -k regex:ferrinfer --section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis \
  --section SchedulerStats .bundle/ferrinfer-bench --routine merge_state --dtype bf16 --batch-size 524288 \
  --hidden-size 128 --num-iters 1 --warmup-seconds 0 > $SUITE_OUT/ncu-merge.log 2>&1
ACTSWEEP=stream bash .bundle/suite.sh actsweep
# The floor under the host path: a do-nothing kernel's launch, three ways (scripts/gpu/launch_floor.cu).
nvcc -O2 -arch=sm_90 -o /tmp/floor scripts/gpu/launch_floor.cu && /tmp/floor > $SUITE_OUT/launch-floor.csv 2>&1
bash .bundle/suite.sh eager
tar czf $OUT/suite.tgz -C $SUITE_OUT .
