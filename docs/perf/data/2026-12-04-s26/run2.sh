#!/bin/bash
# Session 26 run 2 (carry .bundle, run 1's): the staged kernel forced onto rows past its 16 KB
# limit with one stage (FlashInfer's CuTe rmsnorm stages one row a 128-thread block in shared
# memory at these widths and reaches 4.07 TB/s at 4096 × 12288, where every register layout of
# run 1 gave 3.66), and at 8192 with one stage; then racecheck of every register-kernel path to
# the end (run 1 traced it: ~0.2 s a case under racecheck, 675 cases — slow, not stuck).
export SUITE_OUT=/tmp/s26-r2
set -f
cases=""
for l in '*' 4:384:1:1 4:384:2:1 4:384:4:1 4:384:2:2 2:768:2:1; do cases="$cases rmsnorm:4096:12288:$l"; done
for l in '*' 4:512:1:1 4:512:2:1 4:512:4:1 2:1024:2:1; do cases="$cases rmsnorm:4096:16384:$l"; done
for l in '*' 4:256:1:1 4:256:2:1 4:256:4:1 4:256:2:3; do cases="$cases rmsnorm:4096:8192:$l rmsnorm:16384:8192:$l"; done
for l in '*' 4:384:2:1 4:384:4:1; do cases="$cases fused_add_rmsnorm:4096:12288:$l"; done
set +f
VARIANT_CASES="$cases" timeout 150 bash .bundle/suite.sh variants > /dev/null
FERRINFER_NORM_LAYOUT='*:*:*:0' SANITIZER_TESTS='norm_gpu_sanitizer_every' SANITIZER_TIMEOUT=360 \
  timeout 365 bash .bundle/suite.sh racecheck > /dev/null
tar czf $OUT/s26-r2.tgz -C $SUITE_OUT .
grep -h "exit\|ERROR SUMMARY\|RACECHECK SUMMARY\|test result\|FAILED\|panicked" $SUITE_OUT/*.log | sort | uniq -c
sort -t, -k3,3 -k5,5n -k6,6n -k2,2 -k1,1 $SUITE_OUT/variants.csv
