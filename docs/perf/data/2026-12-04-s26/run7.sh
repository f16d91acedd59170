#!/bin/bash
# Session 26 run 7 (carry .bundle, run 5's): racecheck of single bench calls through the capped
# entries (rmsnorm's staged 4-chunk kernel: 4096 and 1024 × 8192, 4096 × 4096, gemma; the
# unpipelined 8-chunk kernel: 64 × 12288 and 4096 × 12288, f16 and bf16, and with the staged
# kernel off at 8192), then racecheck of every kernel path again with a longer limit (run 5's
# stopped at 60 s, run 2's finished in 6.6 s: the same test).
export SUITE_OUT=/tmp/s26-r7 FERRINFER_AOT_DIR=/tmp/ferrinfer-aot FERRINFER_DISABLE_JIT=1
mkdir -p $SUITE_OUT/x && rm -rf /tmp/ferrinfer-aot && mkdir -p /tmp/ferrinfer-aot && tar xJf .bundle/aot.tar.xz -C /tmp/ferrinfer-aot
for c in rmsnorm:bf16:4096:8192: rmsnorm:f16:1024:8192: gemma_rmsnorm:bf16:4096:4096: rmsnorm:bf16:64:12288: \
    rmsnorm:f16:4096:12288: rmsnorm:bf16:300:8192:*:*:*:0 gemma_rmsnorm:bf16:4096:16384:; do
  IFS=: read -r r d t h layout <<< "$c"
  s=$(date +%s)
  FERRINFER_NORM_LAYOUT="$layout" timeout 40 compute-sanitizer --tool racecheck --print-limit 5 .bundle/ferrinfer-bench \
    --routine $r --dtype $d --batch-size $t --hidden-size $h --num-iters 1 --warmup-seconds 0 > $SUITE_OUT/x/$r-$d-$t-$h.log 2>&1
  echo "$r $d $t × $h ${layout:-planner} rc=$? $(( $(date +%s) - s )) s: $(grep -h 'RACECHECK SUMMARY' $SUITE_OUT/x/$r-$d-$t-$h.log)"
done | tee $SUITE_OUT/bench-racecheck.txt
FERRINFER_NORM_LAYOUT='*:*:*:0' SANITIZER_TESTS='norm_gpu_sanitizer_every' SANITIZER_TIMEOUT=170 \
  timeout 175 bash .bundle/suite.sh racecheck > /dev/null
tar czf $OUT/s26-r7.tgz -C $SUITE_OUT .
grep -h "exit\|RACECHECK SUMMARY\|test result" $SUITE_OUT/racecheck.log
