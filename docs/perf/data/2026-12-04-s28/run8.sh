#!/bin/bash
# Session 28 run 8 (carry .peers/b and .peers/cccl after .peers/a; .bundle from run 7): the rope family from
# Python beside torch eager, torch.compile and FlashInfer 0.7.2 (its rope module built by nvcc at
# first use), graph replay, bf16 then f16: apply_rope_with_cos_sin_cache (+ in place) and the
# session-27 ops, on the committed kernel.
source .peers/b/install.sh > /dev/null 2>&1
tar xJf .peers/cccl/cccl.tar.xz -C /tmp/site
export SUITE_OUT=/tmp/s28-r8
PYBENCH_FAMILIES=rope PYBENCH_EAGER=0 timeout 330 bash .bundle/suite.sh pybench > /dev/null
PYBENCH_DTYPES=float16 PYBENCH_FAMILIES=rope PYBENCH_EAGER=0 timeout 200 bash .bundle/suite.sh pybench > /dev/null
tar czf $OUT/s28-r8.tgz -C $SUITE_OUT .
grep -h "exit\|flashinfer.*fail\|unavailable" $SUITE_OUT/*.log | cut -c1-300 | sort | uniq -c | head -20
cat $SUITE_OUT/*.csv
