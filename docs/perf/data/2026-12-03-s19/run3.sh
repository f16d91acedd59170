#!/bin/bash
# Session 19 run 3 (bundle: 7553a96 + the streaming kernel in torch.compile's two-pass shape —
# L2 evict_last reads for the statistics, evict_first re-reads for the outputs, the fused
# residual written in the last pass — and FERRINFER_NORM_LAYOUT chunks 0 forcing it):
# (1) the two-pass CUDA probe (scripts/gpu/copy_ceiling.cu twopass); (2) the streaming kernel
# against the planner's kernels at the large and L2-sized shapes; (3) the norm GPU tests and
# memcheck/racecheck of the sanitizer cases with the new kernel.
set -x
export SUITE_OUT=$OUT/r3
mkdir -p $SUITE_OUT
nvcc -O3 -std=c++17 -arch=sm_90 -o /tmp/copy_ceiling scripts/gpu/copy_ceiling.cu > $SUITE_OUT/copy-build.log 2>&1
/tmp/copy_ceiling twopass > $SUITE_OUT/twopass.csv 2> $SUITE_OUT/twopass.err
cuobjdump -res-usage /tmp/copy_ceiling 2>&1 | grep -A1 twopass | grep -o "REG:[0-9]*" | sort | uniq -c > $SUITE_OUT/twopass-regs.txt
rm -rf /tmp/ferrinfer-aot && mkdir -p /tmp/ferrinfer-aot && tar xJf .bundle/aot.tar.xz -C /tmp/ferrinfer-aot
export FERRINFER_DISABLE_JIT=1 FERRINFER_AOT_DIR=/tmp/ferrinfer-aot
point() { # as suite.sh's: point LABEL CSV ROUTINE T H ENV...
  local label=$1 csv=$2 routine=$3 t=$4 h=$5; shift 5
  timeout 30 env "$@" .bundle/ferrinfer-bench --routine "$routine" --dtype bf16 --batch-size "$t" --hidden-size "$h" \
    --warmup-seconds 0 --num-iters 9 2>/dev/null | grep "^$routine," | sed "s/^/$label,/" >> "$csv"
}
set -f
csv=$SUITE_OUT/stream.csv
echo "layout,op,dtype,T,H,impl,us,tbps" > $csv
for pass in 1 2; do
  for case in 65536:4096 16384:4096 65536:8192 4096:8192 4096:4096 1024:4096; do
    t=${case%%:*} h=${case##*:}
    for layout in "*:*:*" "0:*:1" "0:256:1" "0:1024:1" "0:*:*" "0:*:2"; do
      for routine in rmsnorm fused_add_rmsnorm; do
        point "$layout" $csv $routine $t $h FERRINFER_NORM_LAYOUT="$layout"
      done
    done
  done
done
set +f
sort -t, -k2,2 -k4,4n -k5,5n -k7,7n $csv > $SUITE_OUT/stream-sorted.csv
TESTS_FILTER=norm TESTS_SKIP=over_2_pow_31 bash .bundle/suite.sh tests
SANITIZER_TESTS=norm_gpu_sanitizer bash .bundle/suite.sh memcheck racecheck
tar czf $OUT/suite.tgz -C $SUITE_OUT .
