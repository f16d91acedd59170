#!/bin/bash
# Session 15 run 4b: top-k then top-p sampling (probabilities, logits) beside the peers
# (FlashInfer 0.7.2, torch eager and torch.compile) in one process, for one dtype ($1). FlashInfer's
# top-k-first path at 128256 JIT-builds its `topk` module, which includes CCCL headers the trimmed
# peer package lacks (run 3b: `cuda/__execution/determinism.h` not found): the wheel's own
# flashinfer/data/cccl travels as .peers/c/cccl.tar.xz (2 MB) and is unpacked into the package.
set -x
source .peers/b/install.sh
tar xJf .peers/c/cccl.tar.xz -C /tmp/site/flashinfer/data
SUITE_OUT=/tmp/s15r4b PYBENCH_FAMILIES=sampling PYBENCH_OPS=top_k_top_p_sampling_from_probs,top_k_top_p_sampling_from_logits PYBENCH_DTYPES="$1" PYBENCH_EAGER=0 bash .bundle/suite.sh pybench
mkdir -p $OUT/r4b; cp -r /tmp/s15r4b/* $OUT/r4b/ 2>/dev/null; ls -R $OUT/r4b | head -20
