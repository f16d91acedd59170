#!/bin/bash
# Session 26 run 5 (carry .bundle, built from the tree with the two register caps: rmsnorm's
# staged 4-chunk entries at 80, its unpipelined 16-byte 8-chunk entries at 112): every norm GPU
# test (grid and > 2^31 included), memcheck and racecheck of every kernel path, the staged
# kernel's racecheck case list; then the staged kernel's rows a block at the one point the cap
# slowed (1024 × 8192: the planner's 3 rows a block where it took 4 before) and beside it; at 4096 and 16384 × 8192 the staged kernel's other shapes (2 chunks × 512
# threads, 3 stages) under the cap.
export SUITE_OUT=/tmp/s26-r5
TESTS_FILTER=norm timeout 300 bash .bundle/suite.sh tests > /dev/null
SANITIZER_TESTS='norm_gpu_sanitizer_every\|narrow_vectors\|norm_staged_gpu_sanitizer\|norm_peeled_gpu_sanitizer' SANITIZER_TIMEOUT=60 \
  timeout 150 bash .bundle/suite.sh memcheck > /dev/null
FERRINFER_NORM_LAYOUT='*:*:*:0' SANITIZER_TESTS='norm_gpu_sanitizer_every\|norm_peeled_gpu_sanitizer' SANITIZER_TIMEOUT=60 \
  timeout 100 bash .bundle/suite.sh racecheck > /dev/null
SANITIZER_TESTS='norm_staged_gpu_racecheck' SANITIZER_TIMEOUT=60 timeout 65 bash .bundle/suite.sh racecheck > /dev/null
set -f
cases=""
for c in 1024:8192 2048:8192 768:8192 1536:4096; do
  for l in '*' 4:256:2:2 4:256:3:2 4:256:4:2; do cases="$cases rmsnorm:$c:$l"; done
done
for c in 4096:8192 16384:8192; do
  for l in '*' 2:512:*:2 2:512:*:3 4:256:*:3 4:256:4:2; do cases="$cases rmsnorm:$c:$l"; done
done
set +f
VARIANT_CASES="$cases" timeout 150 bash .bundle/suite.sh variants > /dev/null
tar czf $OUT/s26-r5.tgz -C $SUITE_OUT .
grep -h "exit\|ERROR SUMMARY\|RACECHECK SUMMARY\|test result\|FAILED\|panicked" $SUITE_OUT/*.log | sort | uniq -c
sort -t, -k3,3 -k5,5n -k6,6n -k2,2 -k1,1 $SUITE_OUT/variants.csv | awk -F, '{print $1","$2","$3","$5","$6","$8}'
