#!/bin/bash
# Session 23 run C (carry .peers/b; .bundle from run A): the Python module beside torch eager,
# torch.compile and FlashInfer 0.7.2, graph replay, bf16 — the standard norm grid, then the
# issue's wide grid (odd widths among them); the kernels to commit (AOT_VARIANT=fusedonly, run E).
source .peers/b/install.sh
export SUITE_OUT=/tmp/s23-rC AOT_VARIANT=fusedonly
PYBENCH_FAMILIES=norm PYBENCH_EAGER=0 timeout 180 bash .bundle/suite.sh pybench > /dev/null
PYBENCH_GRID=wide PYBENCH_FAMILIES=norm PYBENCH_EAGER=0 timeout 250 bash .bundle/suite.sh pybench > /dev/null
tar czf $OUT/s23-rC.tgz -C $SUITE_OUT .
grep -c . $SUITE_OUT/*.csv; grep -h "exit" $SUITE_OUT/*.log
