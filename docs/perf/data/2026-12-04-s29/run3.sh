#!/bin/bash
# Session 29 run 3 (carry .peers/b and .peers/cccl after .peers/a; .bundle from run 1):
# append_paged_kv_cache from Python beside torch eager, torch.compile and FlashInfer 0.7.2 (its
# page module built by nvcc at first use), graph replay, bf16 then f16.
source .peers/b/install.sh > /dev/null 2>&1
tar xJf .peers/cccl/cccl.tar.xz -C /tmp/site
export SUITE_OUT=/tmp/s29-r3
PYBENCH_FAMILIES=page PYBENCH_EAGER=0 timeout 300 bash .bundle/suite.sh pybench > /dev/null
PYBENCH_DTYPES=float16 PYBENCH_FAMILIES=page PYBENCH_EAGER=0 timeout 150 bash .bundle/suite.sh pybench > /dev/null
tar czf $OUT/s29-r3.tgz -C $SUITE_OUT .
grep -h "exit\|flashinfer.*fail\|unavailable\|not timed" $SUITE_OUT/*.log | cut -c1-300 | sort | uniq -c | head -20
cat $SUITE_OUT/*.csv
