#!/bin/bash
# Session 31 run 6 (H200; carry .peers/b and .peers/cccl, the machine of runs 4–5): the
# cascade and page families from Python beside torch eager, torch.compile and FlashInfer 0.7.2
# (bf16, graph replay), the bundle's kernels, then the variant `new` of run 4 in a second
# process with the append forced to 256-thread blocks in one wave (FERRINFER_PAGE_LAYOUT=256:1).
# Results in run6/
set -x
source .peers/b/install.sh
mkdir -p /tmp/site; tar xJf .peers/cccl/cccl.tar.xz -C /tmp/site
export PYBENCH_FAMILIES="cascade page" PYBENCH_DTYPES="bfloat16" PYBENCH_EAGER=0
SUITE_OUT=/tmp/s31r6 timeout 250 bash .bundle/suite.sh pybench
SUITE_OUT=/tmp/s31r6 AOT_VARIANT=new FERRINFER_PAGE_LAYOUT=256:1 timeout 250 bash .bundle/suite.sh pybench
tar czf $OUT/s31-r6.tgz -C /tmp/s31r6 .
