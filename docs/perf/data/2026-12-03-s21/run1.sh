#!/bin/bash
# Session 21 run 1 (carry .bundle: 24662e7's kernels plus two code-generation variants,
# scripts/gpu/variant.sh: `nohint` — the staged kernel's bulk copies without the L2 evict_last
# hint (`in_place = false` in norm_staged_of); `nolinger` — that, and the register kernels' fused
# rows read as plain coherent loads instead of `Lingering`).
# 1. Session 20's run 6: fused_add_rmsnorm 1024/4096 x 4096 from Python, base and nohint alternately
#    (is the staged hint the 31.7 -> 34.4 us regression at 4096 x 4096?).
# 2. SWEEP=wide: the norm layouts forced one by one at the wide grid's losses (T = 4096, H 1001,
#    3000, 4095, 5120, 12288; rmsnorm 1024 x 4096), Rust bench, bf16.
# 3. variants: base / nohint / nolinger at the fused op's odd and DRAM-sized rows.
# 4. ncu of our kernel at fused and rmsnorm 4096 x 4095 (memory sections).
export SUITE_OUT=/tmp/s21-r1
mkdir -p $SUITE_OUT
for v in base nohint base nohint; do
  AOT_VARIANT=${v#base} PYBENCH_FAMILIES=norm PYBENCH_EAGER=0 PYBENCH_TOKENS=1024,4096 PYBENCH_OPS=fused_add_rmsnorm \
    timeout 40 bash .bundle/suite.sh pybench > /dev/null
  for f in $SUITE_OUT/py-norm-bfloat16*.csv; do mv "$f" "$SUITE_OUT/py-$v-$RANDOM.csv"; done
done
SWEEP=wide timeout 250 bash .bundle/suite.sh sweep > /dev/null
VARIANT_CASES="fused_add_rmsnorm:4096:4096 fused_add_rmsnorm:4096:4095 fused_add_rmsnorm:4096:5120 \
  fused_add_rmsnorm:65536:4096 rmsnorm:4096:4095" timeout 90 bash .bundle/suite.sh variants > /dev/null
NCU_CASES="fused_add_rmsnorm:4096:4095:*:*:* rmsnorm:4096:4095:*:*:* fused_add_rmsnorm:4096:4096:*:*:*" \
  timeout 60 bash .bundle/suite.sh ncu > /dev/null
tar czf $OUT/s21-r1.tgz -C $SUITE_OUT .
grep "ferrinfer-py" $SUITE_OUT/py-*.csv | cut -c1-160; wc -l $SUITE_OUT/*.csv; grep -h "exit" $SUITE_OUT/*.log | sort | uniq -c
