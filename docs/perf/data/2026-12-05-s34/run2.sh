#!/bin/bash
# Session 34, run 2 (after a call copying .peers/a to /tmp/peers; carry .peers/b and .peers/cccl;
# .bundle at 0453968 on the machine from run 1): the cascade family from Python beside the peers,
# the planner's launch, then FERRINFER_CASCADE_LAYOUT=2 (one process each), then the page family.
source .peers/b/install.sh > /tmp/inst.log 2>&1; mkdir -p /tmp/site; tar xJf .peers/cccl/cccl.tar.xz -C /tmp/site
export SUITE_OUT=/tmp/pb; mkdir -p $SUITE_OUT; nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
PYBENCH_FAMILIES=cascade PYBENCH_DTYPES=bfloat16 PYBENCH_EAGER=0 timeout 200 bash .bundle/suite.sh pybench > $OUT/pb-cascade.out 2>&1
echo "cascade rc=$? ${SECONDS}s" >> $OUT/gpu.txt; cp -r $SUITE_OUT $OUT/cascade-default; rm -rf $SUITE_OUT; mkdir -p $SUITE_OUT
FERRINFER_CASCADE_LAYOUT=2 PYBENCH_FAMILIES=cascade PYBENCH_DTYPES=bfloat16 PYBENCH_EAGER=0 timeout 150 bash .bundle/suite.sh pybench > $OUT/pb-cascade2.out 2>&1
echo "cascade2 rc=$? ${SECONDS}s" >> $OUT/gpu.txt; cp -r $SUITE_OUT $OUT/cascade-2; rm -rf $SUITE_OUT; mkdir -p $SUITE_OUT
PYBENCH_FAMILIES=page PYBENCH_DTYPES=bfloat16 PYBENCH_EAGER=0 timeout 150 bash .bundle/suite.sh pybench > $OUT/pb-page.out 2>&1
echo "page rc=$? ${SECONDS}s" >> $OUT/gpu.txt; cp -r $SUITE_OUT $OUT/page; cat $OUT/gpu.txt
