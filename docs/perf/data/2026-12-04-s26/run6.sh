#!/bin/bash
# Session 26 run 6 (carry .peers/b; .bundle from run 5): the Python module beside torch eager,
# torch.compile and FlashInfer 0.7.2, graph replay, one process per grid — the standard grid
# (bf16, f16) and the issue's own wide grid (bf16).
source .peers/b/install.sh > /dev/null 2>&1
export SUITE_OUT=/tmp/s26-r6
PYBENCH_FAMILIES=norm PYBENCH_EAGER=0 timeout 120 bash .bundle/suite.sh pybench > /dev/null
PYBENCH_DTYPES=float16 PYBENCH_FAMILIES=norm PYBENCH_EAGER=0 timeout 120 bash .bundle/suite.sh pybench > /dev/null
PYBENCH_GRID=wide PYBENCH_FAMILIES=norm PYBENCH_EAGER=0 timeout 150 bash .bundle/suite.sh pybench > /dev/null
tar czf $OUT/s26-r6.tgz -C $SUITE_OUT .
grep -c . $SUITE_OUT/*.csv; grep -h "exit" $SUITE_OUT/*.log | sort | uniq -c
