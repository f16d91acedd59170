#!/bin/bash
# Session 27 run 9 (carry .peers/b and .peers/cccl; .bundle from run 8): the Python module's rope
# ops beside torch eager, torch.compile and FlashInfer 0.7.2, graph replay, bf16 then f16.
source .peers/b/install.sh > /dev/null 2>&1
tar xJf .peers/cccl/cccl.tar.xz -C /tmp/site
export SUITE_OUT=/tmp/s27-r9
PYBENCH_FAMILIES=rope PYBENCH_EAGER=0 timeout 300 bash .bundle/suite.sh pybench > /dev/null
PYBENCH_DTYPES=float16 PYBENCH_FAMILIES=rope PYBENCH_EAGER=0 timeout 150 bash .bundle/suite.sh pybench > /dev/null
tar czf $OUT/s27-r9.tgz -C $SUITE_OUT .
grep -h "exit\|flashinfer.*fail\|unavailable" $SUITE_OUT/*.log | cut -c1-300 | sort | uniq -c | head -20
cat $SUITE_OUT/*.csv
