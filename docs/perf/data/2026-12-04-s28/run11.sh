#!/bin/bash
# Session 28 run 11 (carry .peers/b and .peers/cccl after .peers/a; .bundle of run 10): the cascade
# family from Python beside torch eager, torch.compile and FlashInfer 0.7.2 (its cascade module
# built by nvcc at first use), graph replay, bf16: merge_states (three states a position) with
# its any-count entry four states a step, merge_state and merge_state_in_place again.
source .peers/b/install.sh > /dev/null 2>&1
tar xJf .peers/cccl/cccl.tar.xz -C /tmp/site
export SUITE_OUT=/tmp/s28-r11
PYBENCH_FAMILIES=cascade PYBENCH_EAGER=0 timeout 380 bash .bundle/suite.sh pybench > /dev/null
tar czf $OUT/s28-r11.tgz -C $SUITE_OUT .
grep -h "exit\|flashinfer.*fail\|unavailable" $SUITE_OUT/*.log | cut -c1-300 | sort | uniq -c | head -20
cat $SUITE_OUT/*.csv
