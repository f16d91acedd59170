#!/bin/bash
# Session 15 run 1: bounded probes of the new top-k-then-top-p kernels, every sampling GPU test,
# then the unstaged and staged top-p kernels timed side by side (staged_top_p.py).
set -x
R=$OUT/r1; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $R/gpu.txt
export FERRINFER_DISABLE_JIT=1 FERRINFER_AOT_DIR=/tmp/ferrinfer-aot
mkdir -p /tmp/ferrinfer-aot && tar -xJf .bundle/aot.tar.xz -C /tmp/ferrinfer-aot
for routine in top_k_top_p_sampling_from_probs top_k_top_p_sampling_from_logits; do
  for dtype in f32 bf16; do
    timeout 25 .bundle/ferrinfer-bench --routine $routine --batch-size 64 --hidden-size 128256 --dtype $dtype --refcheck >> $R/probe.log 2>&1
    echo "$routine $dtype rc=$?" >> $R/probe.log
  done
done
SUITE_OUT=/tmp/s15r1 TESTS_FILTER=sampling_gpu TESTS_SKIP=over_2_pow_31 timeout 330 bash .bundle/suite.sh tests > $R/tests.log 2>&1
echo "tests rc=$?" >> $R/tests.log
cp -r /tmp/s15r1/* $R/ 2>/dev/null
wheel=$(ls .bundle/wheels/*.whl | head -1)
site=/tmp/ferrinfer-site-s15
python3 -m pip install -q --no-deps --target $site $wheel > $R/pip.log 2>&1
PYTHONPATH=$site timeout 150 python3 .bundle/staged_top_p.py --out $R/staged.csv > $R/staged.log 2>&1
echo "staged rc=$?" >> $R/staged.log
