#!/bin/bash
# Session 31 run 7 (H200; the machine of run 6, peers installed there): the page append from
# Python again, separating run 6's two changes — the variant `new` (streaming stores) with the
# planner's layout, and the bundle's kernel with 256-thread blocks in one wave. Results in run7/.
set -x
source .peers/b/install.sh
export PYBENCH_FAMILIES=page PYBENCH_DTYPES=bfloat16 PYBENCH_EAGER=0
SUITE_OUT=/tmp/s31r7 AOT_VARIANT=new timeout 120 bash .bundle/suite.sh pybench
mv /tmp/s31r7/py-page-bfloat16-new.csv /tmp/s31r7/py-page-bfloat16-cs.csv
SUITE_OUT=/tmp/s31r7 FERRINFER_PAGE_LAYOUT=256:1 timeout 120 bash .bundle/suite.sh pybench
mv /tmp/s31r7/py-page-bfloat16.csv /tmp/s31r7/py-page-bfloat16-256.csv
SUITE_OUT=/tmp/s31r7 timeout 120 bash .bundle/suite.sh pybench
tar czf $OUT/s31-r7.tgz -C /tmp/s31r7 .
