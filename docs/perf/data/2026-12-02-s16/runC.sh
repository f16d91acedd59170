#!/bin/bash
# Session 16 run C (the machine of run B, warm: FlashInfer's modules built there): top-k then top-p
# sampling, from probabilities and from logits, beside the peers at V = 32000 and 128256 (f32,
# bf16): scalar thresholds (FlashInfer's radix top-k path at 128256) and per-row tensors (its
# general path), the kernels of session 15's run 4 (only top-k's entries weighed from logits).
set -x
source .peers/b/install.sh
[ -d /tmp/site/flashinfer/data/cccl ] || tar xJf .peers/c/cccl.tar.xz -C /tmp/site/flashinfer/data
SUITE_OUT=$OUT/rC PYBENCH_FAMILIES=sampling PYBENCH_OPS=top_k_top_p_sampling_from_probs,top_k_top_p_sampling_from_logits \
  PYBENCH_DTYPES="float32 bfloat16" PYBENCH_EAGER=0 bash .bundle/suite.sh pybench
