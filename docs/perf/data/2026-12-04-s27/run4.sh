#!/bin/bash
# Session 27 run 4 (carry .peers/b; .bundle from run 2): the Python module's rope beside torch
# eager, torch.compile and FlashInfer 0.7.2 (its rope module built by the machine's nvcc), graph
# replay, bf16 then f16.
source .peers/b/install.sh > /dev/null 2>&1
export SUITE_OUT=/tmp/s27-r4
PYBENCH_FAMILIES=rope PYBENCH_EAGER=0 timeout 400 bash .bundle/suite.sh pybench > /dev/null
PYBENCH_DTYPES=float16 PYBENCH_FAMILIES=rope PYBENCH_EAGER=0 timeout 120 bash .bundle/suite.sh pybench > /dev/null
tar czf $OUT/s27-r4.tgz -C $SUITE_OUT .
grep -h "exit\|flashinfer\|Error" $SUITE_OUT/*.log | sort | uniq -c | head -20
cat $SUITE_OUT/*.csv
