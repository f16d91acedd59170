#!/bin/bash
# Session 30, still to make (not run): the layouts of top-p, min-p and sampling_from_probs swept
# through the Python module with seeded rows (run from the repository root, carrying .bundle),
# since a cheaper weighing may move the planner's best split.
set -x
R=$OUT/sweep; mkdir -p $R
wheel=$(ls .bundle/wheels/*.whl | head -1)
site=/tmp/ferrinfer-site-s30
python3 -m pip install -q --no-deps --target $site $wheel > $R/pip.log 2>&1
export FERRINFER_DISABLE_JIT=1 FERRINFER_AOT_DIR=/tmp/ferrinfer-aot
mkdir -p /tmp/ferrinfer-aot && tar -xJf .bundle/aot.tar.xz -C /tmp/ferrinfer-aot
for layout in "*:*" "256:1" "512:1" "1024:1" "256:2" "512:2" "128:2" "128:4" "256:4"; do
  FERRINFER_SAMPLING_LAYOUT=$layout PYTHONPATH=$site timeout 45 python3 docs/perf/data/2026-12-05-s30/sweep.py \
    top_p_sampling_from_probs,min_p_sampling_from_probs,sampling_from_probs >> $R/sweep.csv 2>> $R/sweep.err
done
tail -5 $R/sweep.err
