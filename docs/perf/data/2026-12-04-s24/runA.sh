#!/bin/bash
# Session 24 run A (carry .bundle: HEAD 3b93e49's bundle plus one norm variant built by
# scripts/gpu/variant.sh): `base` = the bundle (the new planner: rmsnorm rows past 16 KB on 8
# register chunks, fused 8-byte rows at 4 chunks); `rmspred` = rmsnorm's rows of 2- and 4-byte
# vectors predicated like the fused ops' (v10), its 8-chunk pipelined entry capped at 64
# registers (.maxnreg; v10's all-predicated build took 72 and ran 40 % slower).
# Every case runs both, interleaved, twice; LAYOUT `*` = the planner, others forced
# (FERRINFER_NORM_LAYOUT): `4:*:*:2` = the old planner's staged choice for long rmsnorm rows,
# `8:*:1:0` the old planner's choice for fused 8-byte rows.
export SUITE_OUT=/tmp/s24-rA
VARIANT_CASES="rmsnorm:4096:4095 rmsnorm:4096:4095:8:*:4:0 rmsnorm:4096:4095:4:*:4:0 rmsnorm:4096:4095:8:*:1:0 \
rmsnorm:65536:4095 rmsnorm:4096:1001 rmsnorm:4096:1001:8:*:4:0 rmsnorm:16384:1001 rmsnorm:4096:4094 \
fused_add_rmsnorm:4096:4100 fused_add_rmsnorm:4096:4100:8:*:1:0 fused_add_rmsnorm:16384:4100 \
fused_add_rmsnorm:16384:4100:8:*:1:0 fused_add_rmsnorm:4096:8196 fused_add_rmsnorm:4096:8196:8:*:1:0 \
rmsnorm:4096:12288 rmsnorm:4096:12288:4:*:*:2 rmsnorm:16384:12288 rmsnorm:16384:12288:4:*:*:2 \
rmsnorm:4096:16384 rmsnorm:4096:16384:4:*:*:2 rmsnorm:16384:16384 rmsnorm:16384:16384:4:*:*:2 \
rmsnorm:4096:8192 rmsnorm:65536:4096 rmsnorm:4096:4096" timeout 420 bash .bundle/suite.sh variants > /dev/null
TESTS_FILTER=cascade timeout 100 bash .bundle/suite.sh tests > /dev/null
tar czf $OUT/s24-rA.tgz -C $SUITE_OUT .
grep -h "exit\|test result" $SUITE_OUT/*.log | sort | uniq -c | head -20
sort -t, -k3,3 -k5,5n -k6,6n -k2,2 -k1,1 $SUITE_OUT/variants.csv
