#!/bin/bash
# Session 26 run 4 (carry .bundle: run 1's plus two code-generation variants,
# scripts/gpu/variant.sh): `s4cap80` — rmsnorm's (and Gemma's) staged entries of 4 vectors a
# thread capped at 80 registers on sm_90 (ptxas: 89 uncapped, no spills at 80; three 256-thread
# blocks an SM instead of two — ncu, run 3: ours 2 blocks, 25 % occupancy at 4096 × 8192 where
# FlashInfer's rmsnorm has 9 blocks of 128, 50 %); `c8cap112` — rmsnorm's unpipelined 8-chunk
# entries capped at 112 (125 uncapped; no spills — 104 spilled f16; three 192-thread blocks an SM at 12288
# instead of two). The Rust bench, bf16, two passes, interleaved.
export SUITE_OUT=/tmp/s26-r4
cases=""
for c in 4096:8192 16384:8192 65536:8192 1024:8192 128:8192 4096:4096 16384:4096 65536:4096 2048:4096 \
    4096:12288 16384:12288 4096:16384 4096:3000 4096:5120; do
  cases="$cases rmsnorm:$c"
done
VARIANT_CASES="$cases fused_add_rmsnorm:1024:4096" timeout 280 bash .bundle/suite.sh variants > /dev/null
POINT_DTYPE=f16 VARIANT_CASES="rmsnorm:4096:8192 rmsnorm:16384:8192 rmsnorm:4096:12288" SUITE_OUT=/tmp/s26-r4/f16 \
  timeout 60 bash .bundle/suite.sh variants > /dev/null
tar czf $OUT/s26-r4.tgz -C $SUITE_OUT .
sort -t, -k3,3 -k5,5n -k6,6n -k2,2 -k1,1 $SUITE_OUT/variants.csv $SUITE_OUT/f16/variants.csv | awk -F, '{print $1","$3","$4","$5","$6","$8","$9}'
