#!/bin/bash
# Session 14 run 5: ncu of top-p and min-p sampling (f32 128256 x 256 and 32000 x 256, softmax
# rows), the third call of each (the first two load the module and warm up).
set -x
R=$OUT/r5; mkdir -p $R
site=/tmp/ferrinfer-site-s14; python3 -m pip install -q --no-deps --target $site .bundle/wheels/*.whl > $R/pip.log 2>&1
mkdir -p /tmp/ferrinfer-aot && tar -xJf .bundle/aot.tar.xz -C /tmp/ferrinfer-aot
export FERRINFER_DISABLE_JIT=1 FERRINFER_AOT_DIR=/tmp/ferrinfer-aot PYTHONPATH=$site
NCU=/usr/local/cuda/bin/ncu
for op in top_p_sampling_from_probs min_p_sampling_from_probs; do
  for shape in "128256 256" "32000 256"; do
    set -- $shape
    timeout 150 $NCU --clock-control none -k regex:ferrinfer --launch-skip 2 --launch-count 1 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section WarpStateStats \
      python3 .bundle/prof.py $op $1 $2 > $R/ncu-$op-$1x$2.txt 2>&1
  done
done
ls -la $R
