#!/bin/bash
# Session 14 run 1: sampling GPU tests (top-p rejection rounds, min-p one-read), then a layout
# sweep of top-p / min-p sampling through the Python module.
# (.bundle/sweep.py was docs/perf/data/2026-12-02-s13/sweep.py, copied in by hand.)
set -x
R=$OUT/r1; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $R/gpu.txt
SUITE_OUT=/tmp/r1t TESTS_FILTER=sampling_gpu TESTS_SKIP=over_2_pow_31 timeout 300 bash .bundle/suite.sh tests > $R/tests.log 2>&1
echo "tests rc=$?" >> $R/tests.log
wheel=$(ls .bundle/wheels/*.whl | head -1)
site=/tmp/ferrinfer-site-s14
python3 -m pip install -q --no-deps --target $site $wheel > $R/pip.log 2>&1
export FERRINFER_DISABLE_JIT=1 FERRINFER_AOT_DIR=/tmp/ferrinfer-aot
mkdir -p /tmp/ferrinfer-aot && tar -xJf .bundle/aot.tar.xz -C /tmp/ferrinfer-aot
for layout in "*:*" "256:1" "512:1" "1024:1" "256:2" "512:2" "1024:2" "256:4" "512:4" "1024:4" "256:8" "512:8"; do
  FERRINFER_SAMPLING_LAYOUT=$layout PYTHONPATH=$site timeout 100 python3 .bundle/sweep.py top_p_sampling_from_probs,min_p_sampling_from_probs >> $R/sweep.csv 2>> $R/sweep.err
done
tail -5 $R/sweep.err
