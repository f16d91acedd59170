#!/bin/bash
# Session 18 run 4 (after run 3 copied .peers/a to /tmp/peers, on the same machine, run 2's
# bundle still there): the Python module beside torch eager, torch.compile and FlashInfer 0.7.2
# (its cascade module built by this machine's nvcc at first use), bf16, one process a family:
# activation (the committed kernel — two rows a step — from Python for the first time) and
# cascade (merge_state, merge_state_in_place at the shapes); then the norm family's
# host path from Python (--eager, T = 1).
set -x
source .peers/b/install.sh
SUITE_OUT=$OUT/r4 PYBENCH_FAMILIES="cascade activation" PYBENCH_EAGER=0 bash .bundle/suite.sh pybench
SUITE_OUT=$OUT/r4 PYBENCH_FAMILIES=norm PYBENCH_TOKENS=1 bash .bundle/suite.sh pybench
