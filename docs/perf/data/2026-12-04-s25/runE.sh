#!/bin/bash
# Session 25 run E (carry .peers/b; .bundle from run D; racecheck appended, below): the Python module beside torch eager,
# torch.compile and FlashInfer 0.7.2, graph replay — the wide grid (bf16), the standard grid
# (bf16, f16).
source .peers/b/install.sh
export SUITE_OUT=/tmp/s25-rE
PYBENCH_GRID=wide PYBENCH_FAMILIES=norm PYBENCH_EAGER=0 timeout 150 bash .bundle/suite.sh pybench > /dev/null
PYBENCH_FAMILIES=norm PYBENCH_EAGER=0 timeout 120 bash .bundle/suite.sh pybench > /dev/null
PYBENCH_DTYPES=float16 PYBENCH_FAMILIES=norm PYBENCH_EAGER=0 timeout 120 bash .bundle/suite.sh pybench > /dev/null
tar czf $OUT/s25-rE.tgz -C $SUITE_OUT .
grep -c . $SUITE_OUT/*.csv; grep -h "exit" $SUITE_OUT/*.log | sort | uniq -c
# Appended in the same device call (after the script above): racecheck of every register-kernel path.
# FERRINFER_NORM_LAYOUT='*:*:*:0' SANITIZER_TESTS='norm_gpu_sanitizer_every' SANITIZER_TIMEOUT=240 \
#   timeout 245 bash .bundle/suite.sh racecheck > /dev/null
