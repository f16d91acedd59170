#!/bin/bash
# Session 27 run 7 (carry .peers/b and .peers/cccl; .bundle from run 5): the Python module's rope
# beside torch eager, torch.compile and FlashInfer 0.7.2 (its rope module built by the machine's
# nvcc with the wheel's own CCCL headers: scripts/gpu/flashinfer-cccl.sh), graph replay, bf16
# then f16.
source .peers/b/install.sh > /dev/null 2>&1
tar xJf .peers/cccl/cccl.tar.xz -C /tmp/site
export SUITE_OUT=/tmp/s27-r7
PYBENCH_FAMILIES=rope PYBENCH_EAGER=0 timeout 400 bash .bundle/suite.sh pybench > /dev/null
PYBENCH_DTYPES=float16 PYBENCH_FAMILIES=rope PYBENCH_EAGER=0 timeout 120 bash .bundle/suite.sh pybench > /dev/null
tar czf $OUT/s27-r7.tgz -C $SUITE_OUT .
grep -h "exit\|flashinfer.*fail\|unavailable" $SUITE_OUT/*.log | cut -c1-300 | sort | uniq -c | head -20
cat $SUITE_OUT/*.csv
