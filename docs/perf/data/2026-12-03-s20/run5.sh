#!/bin/bash
# Session 20 run 5 (the same machine as runs A, 3 and 4: bundle b9de3f3, FlashInfer installed):
# f16 — the Python module beside the peers on the standard norm grid (graph replay, then --eager,
# T = 1), and the Rust bench's norm grid. Run as one command line through the device tool.
source .peers/b/install.sh; export SUITE_OUT=/tmp/s20-r5
PYBENCH_DTYPES=float16 PYBENCH_FAMILIES=norm timeout 110 bash .bundle/suite.sh pybench > /dev/null
BENCH_ROUTINES="rmsnorm fused_add_rmsnorm" BENCH_DTYPES=f16 timeout 60 bash .bundle/suite.sh bench > /dev/null
tar czf $OUT/s20-r5.tgz -C $SUITE_OUT .
