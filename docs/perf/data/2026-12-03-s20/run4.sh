#!/bin/bash
# Session 20 run 4 (carry .peers/b; .bundle carried earlier on the same machine: the v8 kernels):
# the Python module beside torch eager, torch.compile and FlashInfer 0.7.2 in one process per
# grid, graph replay, bf16: the standard norm grid, then the wide grid (H 64 to 16384,
# odd widths, H = 128 over 221184 rows). Rows are logged as they come (pybench.log), so a grid
# cut off by its time limit keeps what it timed.
source .peers/b/install.sh
export SUITE_OUT=/tmp/s20-r4
PYBENCH_FAMILIES=norm PYBENCH_EAGER=0 timeout 170 bash .bundle/suite.sh pybench > /dev/null
PYBENCH_GRID=wide PYBENCH_FAMILIES=norm PYBENCH_EAGER=0 timeout 245 bash .bundle/suite.sh pybench > /dev/null
rm -f $SUITE_OUT/ptxas.log
tar czf $OUT/s20-r4.tgz -C $SUITE_OUT .
grep -c . $SUITE_OUT/*.csv; grep "exit" $SUITE_OUT/pybench.log
