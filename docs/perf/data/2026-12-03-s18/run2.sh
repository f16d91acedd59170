#!/bin/bash
# Session 18 run 2 (bundle of the commit "cascade: one memory round trip a merge"): the cascade
# GPU tests (the grid resized to fit in memory, in place, > 2^31 elements), memcheck and
# racecheck, the Rust bench's cascade grid (bf16, f16), Nsight Compute on merge_state at seq
# 16384; then where the host's time per launch goes: Nsight Systems' CUDA API summary of
# `ferrinfer-bench --mode eager` (rmsnorm 1 x 4096), if the machine has nsys.
set -x
export SUITE_OUT=$OUT/r2
mkdir -p $SUITE_OUT
TESTS_FILTER=cascade_gpu bash .bundle/suite.sh tests
SANITIZER_TESTS=cascade_gpu_sanitizer bash .bundle/suite.sh memcheck racecheck
BENCH_ROUTINES="merge_state merge_state_in_place" bash .bundle/suite.sh bench
tar xJf .bundle/aot.tar.xz -C /tmp/ferrinfer-aot 2>/dev/null || { mkdir -p /tmp/ferrinfer-aot && tar xJf .bundle/aot.tar.xz -C /tmp/ferrinfer-aot; }
export FERRINFER_DISABLE_JIT=1 FERRINFER_AOT_DIR=/tmp/ferrinfer-aot
/usr/local/cuda/bin/ncu --clock-control none --launch-count 1 -k regex:ferrinfer --section SpeedOfLight \
  --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis --section SchedulerStats \
  .bundle/ferrinfer-bench --routine merge_state --dtype bf16 --batch-size 524288 --hidden-size 128 --num-iters 1 \
  --warmup-seconds 0 > $SUITE_OUT/ncu-merge.log 2>&1
nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems*/bin/nsys 2>/dev/null | head -1)
echo "nsys: ${nsys:-none}" > $SUITE_OUT/nsys.log
if [ -n "$nsys" ]; then
  cd /tmp && timeout 120 "$nsys" profile -t cuda -o /tmp/eager --force-overwrite true "$OLDPWD/.bundle/ferrinfer-bench" \
    --routine rmsnorm --dtype bf16 --batch-size 1 --hidden-size 4096 --mode eager --num-iters 3 --warmup-seconds 0 >> $SUITE_OUT/nsys.log 2>&1
  timeout 120 "$nsys" stats -r cuda_api_sum,cuda_gpu_kern_sum /tmp/eager.nsys-rep >> $SUITE_OUT/nsys.log 2>&1
  cd - >/dev/null
fi
tar czf $OUT/suite.tgz -C $SUITE_OUT .
