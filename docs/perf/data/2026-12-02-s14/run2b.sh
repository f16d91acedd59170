#!/bin/bash
# Session 14 run 2b: the sampling ops beside the peers (FlashInfer 0.7.2, torch) in one process.
set -x
source .peers/b/install.sh
SUITE_OUT=/tmp/s14r2b PYBENCH_FAMILIES=sampling PYBENCH_OPS=sampling_from_probs,top_k_sampling_from_probs,top_p_sampling_from_probs,min_p_sampling_from_probs PYBENCH_DTYPES="float32 bfloat16" PYBENCH_EAGER=0 bash .bundle/suite.sh pybench
mkdir -p $OUT/r2b; cp -r /tmp/s14r2b/* $OUT/r2b/ 2>/dev/null; ls -R $OUT/r2b | head -20
