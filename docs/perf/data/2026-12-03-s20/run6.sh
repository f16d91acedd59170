#!/bin/bash
# NOT RUN in session 20 (no device time left to start a machine): prepared for the next session;
# rebuild the bundle and the `nohint` variant first (scripts/gpu/bundle.sh, then the edit below and
# scripts/gpu/variant.sh nohint norm).
# Session 20 run 6 (carry .bundle: b9de3f3's kernels, plus the variant `nohint` — the staged
# kernel's bulk copies without the L2 evict_last hint, i.e. b9de3f3 with `in_place = false` in
# norm_staged_of): run 4 showed fused_add_rmsnorm 4096 x 4096 from Python at 34.4 us where
# v7/s8 measured 31.7; is it the copy hint? The Python module alone (no FlashInfer on this
# machine), the two kernels alternately.
export SUITE_OUT=/tmp/s20-r6
for v in base nohint base nohint; do
  AOT_VARIANT=${v#base} PYBENCH_FAMILIES=norm PYBENCH_EAGER=0 PYBENCH_TOKENS=1024,4096 PYBENCH_OPS=fused_add_rmsnorm \
    timeout 45 bash .bundle/suite.sh pybench > /dev/null
  mv $SUITE_OUT/py-norm-bfloat16*.csv $SUITE_OUT/py-$v-$RANDOM.csv
done
tar czf $OUT/s20-r6.tgz -C $SUITE_OUT .
grep "ferrinfer-py" $SUITE_OUT/py-*.csv; ls $SUITE_OUT
