#!/bin/bash
# Session 18 run 10 (after run 9 copied .peers/a; run 8's bundle): why merge_state_in_place
# trails FlashInfer where the states fit in L2 (seq 2048 x 32 heads x 128, bf16; v3: 10.7 vs
# 7.8 us). Nsight Compute on one call of each (`ncupeers`, L2 left as the warm-up calls leave it),
# in place and not; then the Python module beside FlashInfer at seq 128 and 2048 with the
# dependent launch off (FERRINFER_ENABLE_PDL=0) and on.
set -x
source .peers/b/install.sh
export SUITE_OUT=$OUT/r10
NCU_CASES="merge_state_in_place:65536:128 merge_state:65536:128" bash .bundle/suite.sh ncupeers
for pdl in 0 1; do
  FERRINFER_ENABLE_PDL=$pdl PYBENCH_FAMILIES=cascade PYBENCH_TOKENS=4096,65536 PYBENCH_EAGER=0 bash .bundle/suite.sh pybench
  mv $SUITE_OUT/py-cascade-bfloat16.csv $SUITE_OUT/py-cascade-bfloat16-pdl$pdl.csv
done
tar czf $OUT/suite.tgz -C $SUITE_OUT .
