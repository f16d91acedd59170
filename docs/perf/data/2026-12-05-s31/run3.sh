#!/bin/bash
# Session 31 run 3 (H200; carry .peers/b and .peers/cccl, the machine of runs 1–2): the
# filters and the top-k sampler beside torch.compile and FlashInfer 0.7.2 on the batched pass
# (session 30's run 3 timed it as a variant; this is the bundle's own). Results in run3/.
set -x
source .peers/b/install.sh
mkdir -p /tmp/site; tar xJf .peers/cccl/cccl.tar.xz -C /tmp/site
export PYBENCH_FAMILIES=sampling PYBENCH_DTYPES="float32 bfloat16" PYBENCH_EAGER=0
export PYBENCH_OPS=top_k_mask_logits,top_k_renorm_probs,top_p_renorm_probs,top_k_sampling_from_probs
SUITE_OUT=/tmp/s31r3 timeout 290 bash .bundle/suite.sh pybench
tar czf $OUT/s31-r3.tgz -C /tmp/s31r3 .
