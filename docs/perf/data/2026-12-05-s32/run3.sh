#!/bin/bash
# Session 32's prepared run 3 (not run; carry .peers/b and .peers/cccl, the machine of runs
# 1–2): the cascade and page families from Python beside torch eager, torch.compile and
# FlashInfer 0.7.2 (bf16, graph replay): the planner's launches — merge_states of two states
# too (`merge_states_2`: since session 32 the any-count entry where rows have heads) — then a
# second process with every 16-byte two-state merge unrolled (FERRINFER_CASCADE_LAYOUT=2; put
# run 2's best layout here). Results in run3/.
set -x
source .peers/b/install.sh
mkdir -p /tmp/site; tar xJf .peers/cccl/cccl.tar.xz -C /tmp/site
export PYBENCH_DTYPES="bfloat16" PYBENCH_EAGER=0 SUITE_OUT=/tmp/s32r3
PYBENCH_FAMILIES=page timeout 100 bash .bundle/suite.sh pybench
PYBENCH_FAMILIES=cascade PYBENCH_OPS=merge_state,merge_state_in_place,merge_states,merge_states_2 \
  timeout 200 bash .bundle/suite.sh pybench
mv /tmp/s32r3/py-cascade-bfloat16.csv /tmp/s32r3/py-cascade-bfloat16-planner.csv
PYBENCH_FAMILIES=cascade PYBENCH_OPS=merge_state,merge_state_in_place FERRINFER_CASCADE_LAYOUT=2 \
  timeout 150 bash .bundle/suite.sh pybench
tar czf $OUT/s32-r3.tgz -C /tmp/s32r3 .
