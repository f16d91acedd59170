#!/bin/bash
# Session 34, run 6 (after a call carrying .peers/a that copied it to /tmp/peers; this one carries
# .peers/b and .peers/cccl; .bundle already on the machine): the cascade family from Python beside
# torch eager, torch.compile and FlashInfer 0.7.2 at the planner's unroll rule, merge_states_2
# included, twice (two processes) to see the run-to-run spread.
source .peers/b/install.sh > /tmp/install.log 2>&1; mkdir -p /tmp/site; tar xJf .peers/cccl/cccl.tar.xz -C /tmp/site
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt; cat .bundle/commit >> $OUT/gpu.txt
for pass in 1 2; do
  export SUITE_OUT=/tmp/s34r6-$pass; mkdir -p $SUITE_OUT
  PYBENCH_FAMILIES=cascade PYBENCH_DTYPES=bfloat16 PYBENCH_EAGER=0 \
    PYBENCH_OPS=merge_state,merge_state_in_place,merge_states,merge_states_2 timeout 120 \
    bash .bundle/suite.sh pybench > /dev/null 2>&1
  echo "pybench-cascade pass $pass rc=$? at ${SECONDS}s" >> $OUT/gpu.txt
  cp $SUITE_OUT/py-cascade-bfloat16.csv $OUT/py-cascade-bfloat16-pass$pass.csv
done
cat $OUT/gpu.txt; tail -3 /tmp/install.log
