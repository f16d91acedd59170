#!/bin/bash
# Session 34, run 7 (as run 6: after a call copying .peers/a to /tmp/peers; carry .peers/b and
# .peers/cccl; .bundle at 4bf8a58 on the machine): merge_state and merge_state_in_place from Python
# beside FlashInfer at 32, 4096 and 65536 rows, the planner's launch (a) and both states' unrolled
# entries forced (b, FERRINFER_CASCADE_LAYOUT=2), interleaved a b a b, one process each.
source .peers/b/install.sh > /tmp/install.log 2>&1; mkdir -p /tmp/site; tar xJf .peers/cccl/cccl.tar.xz -C /tmp/site
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
for pass in a1 b1 a2 b2; do
  export SUITE_OUT=/tmp/r7-$pass; mkdir -p $SUITE_OUT; L=; [ ${pass:0:1} = b ] && L=2
  FERRINFER_CASCADE_LAYOUT=$L PYBENCH_FAMILIES=cascade PYBENCH_DTYPES=bfloat16 PYBENCH_EAGER=0 PYBENCH_TOKENS=32,4096,65536 \
    PYBENCH_OPS=merge_state,merge_state_in_place timeout 60 bash .bundle/suite.sh pybench > /dev/null 2>&1
  echo "$pass layout=$L rc=$? ${SECONDS}s" >> $OUT/gpu.txt; cp $SUITE_OUT/py-cascade-bfloat16.csv $OUT/py-cascade-$pass.csv
done
cat $OUT/gpu.txt
