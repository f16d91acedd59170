#!/bin/bash
# Session 14 run 6b: top-p sampling with f32 batches of 8 steps (128 registers) beside the peers.
set -x
source .peers/b/install.sh
SUITE_OUT=/tmp/s14r6b PYBENCH_FAMILIES=sampling PYBENCH_OPS=top_p_sampling_from_probs,sampling_from_probs PYBENCH_DTYPES="float32 bfloat16" PYBENCH_EAGER=0 bash .bundle/suite.sh pybench
mkdir -p $OUT/r6b; cp /tmp/s14r6b/*.csv $OUT/r6b/
