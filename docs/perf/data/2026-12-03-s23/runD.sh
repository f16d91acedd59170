#!/bin/bash
# (AOT_VARIANT=fusedonly: the kernels to commit, run E.)
# Session 23 run D (FlashInfer installed by run C; .bundle from run A): the standard norm grid
# in f16 beside the peers; then racecheck of every kernel path (memcheck: run E).
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages PYTHONUNBUFFERED=1
export SUITE_OUT=/tmp/s23-rD AOT_VARIANT=fusedonly
PYBENCH_DTYPES=float16 PYBENCH_FAMILIES=norm PYBENCH_EAGER=0 timeout 120 bash .bundle/suite.sh pybench > /dev/null
SANITIZER_TESTS="norm_gpu_sanitizer_every_kernel_path" SANITIZER_TIMEOUT=140 \
  timeout 150 bash .bundle/suite.sh racecheck > /dev/null
tar czf $OUT/s23-rD.tgz -C $SUITE_OUT .
grep -c . $SUITE_OUT/*.csv; grep -h "exit\|ERROR SUMMARY\|RACECHECK SUMMARY" $SUITE_OUT/*.log | head
