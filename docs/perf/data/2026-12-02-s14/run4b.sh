#!/bin/bash
# Session 14 run 4b: top-p / min-p sampling with the row's first read kept in L2 (evict_last
# policy) beside the peers in one process (the GPU tests planned here were dropped: the
# carry would have passed 64 MiB).
set -x
source .peers/b/install.sh
SUITE_OUT=/tmp/s14r4b PYBENCH_FAMILIES=sampling PYBENCH_OPS=sampling_from_probs,top_p_sampling_from_probs,min_p_sampling_from_probs PYBENCH_DTYPES="float32 bfloat16" PYBENCH_EAGER=0 bash .bundle/suite.sh pybench
mkdir -p $OUT/r4b; cp /tmp/s14r4b/*.csv $OUT/r4b/
