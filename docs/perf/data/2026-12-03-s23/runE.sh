#!/bin/bash
# Session 23 run E (carry .bundle: run A's bundle plus two norm variants, scripts/gpu/variant.sh):
# `base` = the bundle (run A: every norm kernel's rows of narrow vectors predicated),
# `fusedonly` = predication only in the fused ops' kernels (rmsnorm's branch again; run A showed
# rmsnorm 4096 x 4095 at 43.6 us against v9's 31.0, its c8p entry at 72 registers, 64 before),
# `v9` = HEAD 934a747's norm kernels, for a same-sitting before/after.
# 1. the variants interleaved, twice each, at the narrow-vector points and a few standard ones;
# 2. with `fusedonly` (the kernels to commit): every norm GPU test, then memcheck of the norm
#    tests' sanitizer cases (predicated accesses compute addresses past the row's end).
export SUITE_OUT=/tmp/s23-rE
VARIANT_CASES="rmsnorm:4096:4095 rmsnorm:65536:4095 rmsnorm:4096:1001 rmsnorm:4096:4094 \
fused_add_rmsnorm:4096:4095 fused_add_rmsnorm:65536:4095 fused_add_rmsnorm:4096:1001 fused_add_rmsnorm:16384:1001 \
fused_add_rmsnorm:4096:4094 fused_add_rmsnorm:4096:4100 fused_add_rmsnorm:4096:3000 \
rmsnorm:65536:4096 fused_add_rmsnorm:65536:4096 rmsnorm:1:4096" timeout 230 bash .bundle/suite.sh variants > /dev/null
AOT_VARIANT=fusedonly TESTS_FILTER=norm timeout 220 bash .bundle/suite.sh tests > /dev/null
AOT_VARIANT=fusedonly SANITIZER_TESTS="norm_gpu_sanitizer_every_kernel_path" SANITIZER_TIMEOUT=100 \
  timeout 120 bash .bundle/suite.sh memcheck > /dev/null
tar czf $OUT/s23-rE.tgz -C $SUITE_OUT .
grep -h "exit\|ERROR SUMMARY" $SUITE_OUT/*.log | sort | uniq -c | head -20
grep -h "test result" $SUITE_OUT/*.log
sort -t, -k3,3 -k5,5n -k6,6n -k1,1 $SUITE_OUT/variants.csv
