#!/bin/bash
# Session 26 run 1 (carry .bundle, built from c668cc0 + the host-path mend of rows_aligned_alike
# and the harness's FERRINFER_TEST_TRACE): the peeled kernels forced onto every batch
# (norm_peeled_gpu: layouts and sanitizer list) — tests, memcheck, racecheck; then the every-path
# racecheck that ran past 240 s in session 25, traced a case at a time to find where it stalls.
export SUITE_OUT=/tmp/s26-r1
TESTS_FILTER=norm_peeled timeout 120 bash .bundle/suite.sh tests > /dev/null
SANITIZER_TESTS='norm_peeled_gpu_sanitizer' SANITIZER_TIMEOUT=60 timeout 65 bash .bundle/suite.sh memcheck > /dev/null
SANITIZER_TESTS='norm_peeled_gpu_sanitizer' SANITIZER_TIMEOUT=60 timeout 65 bash .bundle/suite.sh racecheck > /dev/null
# The traced every-path racecheck: suite.sh's environment (AOT modules unpacked by the steps above).
t=.bundle/tests/norm_gpu
FERRINFER_DISABLE_JIT=1 FERRINFER_AOT_DIR=/tmp/ferrinfer-aot FERRINFER_TEST_TRACE=1 FERRINFER_NORM_LAYOUT='*:*:*:0' \
  timeout 80 compute-sanitizer --tool racecheck --print-limit 20 "$t" --exact norm_gpu_sanitizer_every_kernel_path \
  --test-threads=1 --nocapture > $SUITE_OUT/racecheck-traced.log 2>&1
echo "traced racecheck exit $?" >> $SUITE_OUT/racecheck-traced.log
# Layouts at the standard grid's short points and rmsnorm 12288 (FlashInfer's CuTe rmsnorm at
# 8192: a row a 128-thread block, 8 vectors a thread, `8:128:1:0` here), and layernorm's peeled
# rows against the same rows read narrow (never timed): the Rust bench, two passes.
set -f
cases=""
for l in '*' 8:128:1:0 8:128:2:0 4:256:1:0 8:256:1:0 '*:*:*:0'; do
  cases="$cases rmsnorm:4096:8192:$l rmsnorm:16384:8192:$l"
done
for l in '*' 4:128:1:0 2:256:1:0 4:128:2:0 8:64:1:0 4:64:2:0 '*:*:*:0'; do
  cases="$cases fused_add_rmsnorm:1024:4096:$l"
done
for l in '*' 8:192:1:0 8:256:1:0 4:384:1:0 4:512:1:0 '*:*:*:0'; do
  cases="$cases rmsnorm:4096:12288:$l"
done
for c in layernorm:4096:4095 layernorm:65536:1001 layernorm:16384:4095; do
  cases="$cases $c $c:*:*:*:*:0"
done
set +f
VARIANT_CASES="$cases" timeout 150 bash .bundle/suite.sh variants > /dev/null
# ncu: peeled rmsnorm 4096 × 4095 (3.2 TB/s) beside the aligned 4096 × 4096 rows (3.6–3.9).
NCU_CASES='rmsnorm:4096:4095:* rmsnorm:4096:4096:*' timeout 60 bash .bundle/suite.sh ncu > /dev/null
tar czf $OUT/s26-r1.tgz -C $SUITE_OUT .
grep -h "exit\|ERROR SUMMARY\|RACECHECK SUMMARY\|test result\|FAILED\|panicked" $SUITE_OUT/*.log | sort | uniq -c
grep "case ran" $SUITE_OUT/racecheck-traced.log | sort -t' ' -k4,4gr | head -15
grep "case start" $SUITE_OUT/racecheck-traced.log | tail -3; grep -c "case start" $SUITE_OUT/racecheck-traced.log
tail -3 $SUITE_OUT/racecheck-traced.log
sort -t, -k3,3 -k5,5n -k6,6n -k2,2 -k1,1 $SUITE_OUT/variants.csv
