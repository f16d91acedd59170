#!/bin/bash
# Session 21 run 6 (carry .peers/b; .bundle from run 4): the Python module beside torch eager,
# torch.compile and FlashInfer 0.7.2, graph replay, bf16 — the standard norm grid, then the
# issue's wide grid; then memcheck of the norm tests' sanitizer cases (every kernel path, row
# groups of 3 and 5 warps among them; the staged kernel's cases).
source .peers/b/install.sh
export SUITE_OUT=/tmp/s21-r6
PYBENCH_FAMILIES=norm PYBENCH_EAGER=0 timeout 170 bash .bundle/suite.sh pybench > /dev/null
PYBENCH_GRID=wide PYBENCH_FAMILIES=norm PYBENCH_EAGER=0 timeout 245 bash .bundle/suite.sh pybench > /dev/null
SANITIZER_TESTS="norm_gpu_sanitizer_every_kernel_path\|norm_staged_gpu_sanitizer" SANITIZER_TIMEOUT=100 \
  timeout 150 bash .bundle/suite.sh memcheck > /dev/null
tar czf $OUT/s21-r6.tgz -C $SUITE_OUT .
grep -c . $SUITE_OUT/*.csv; grep -h "exit" $SUITE_OUT/*.log
