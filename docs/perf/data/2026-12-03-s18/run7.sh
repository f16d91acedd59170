#!/bin/bash
# Session 18 run 7 (after run 6 copied .peers/a, the same machine, run 5's bundle): merge_state
# and merge_state_in_place from Python beside torch and FlashInfer 0.7.2 (bf16, f16); then the
# activation points still short of FlashInfer (silu, gelu_tanh; T = 1024, 4096, 16384) under
# each cache policy forced (FERRINFER_ACTIVATION_LAYOUT=*:*:0 cached, *:*:1 streaming) and the
# planner's, one process each.
set -x
source .peers/b/install.sh
SUITE_OUT=$OUT/r7 PYBENCH_FAMILIES=cascade PYBENCH_DTYPES="bfloat16 float16" PYBENCH_EAGER=0 bash .bundle/suite.sh pybench
for policy in 0 1 '*'; do
  FERRINFER_ACTIVATION_LAYOUT="*:*:$policy" SUITE_OUT=$OUT/r7 PYBENCH_FAMILIES=activation PYBENCH_EAGER=0 \
    PYBENCH_OPS=silu_and_mul,gelu_tanh_and_mul PYBENCH_TOKENS=1024,4096,16384 bash .bundle/suite.sh pybench
  mv $OUT/r7/py-activation-bfloat16.csv "$OUT/r7/py-activation-bfloat16-policy-${policy/\*/planner}.csv"
done
tar czf $OUT/suite.tgz -C $OUT/r7 .
