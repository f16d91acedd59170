#!/bin/bash
# Session 15 run 3b: top-k then top-p sampling (probabilities, logits) beside the peers
# (FlashInfer 0.7.2, torch eager and torch.compile) in one process, f32 and bf16.
set -x
source .peers/b/install.sh
SUITE_OUT=/tmp/s15r3b PYBENCH_FAMILIES=sampling PYBENCH_OPS=top_k_top_p_sampling_from_probs,top_k_top_p_sampling_from_logits PYBENCH_DTYPES="float32 bfloat16" PYBENCH_EAGER=0 bash .bundle/suite.sh pybench
mkdir -p $OUT/r3b; cp -r /tmp/s15r3b/* $OUT/r3b/ 2>/dev/null; ls -R $OUT/r3b | head -20
