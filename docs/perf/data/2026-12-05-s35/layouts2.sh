#!/bin/bash
# Session 35, after layouts.sh: the same sweep wider, to fit a planner rule — the three filters
# (top-k mask, top-k renorm, top-p renorm), bf16 and f32, 32 to 1024 rows of 32000 and 128256
# entries, the layouts that won or lost there and 1024:4. Rust bench, graph replay, one pass;
# carry main's .bundle. Results: $OUT/layouts2/layouts.csv.
export SUITE_OUT=/tmp/s35-layouts2; mkdir -p $SUITE_OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $SUITE_OUT/gpu.txt; cat .bundle/commit >> $SUITE_OUT/gpu.txt
for dtype in bf16 f32; do
  for routine in top_k_mask_logits top_k_renorm_probs top_p_renorm_probs; do
    LAYOUT_VAR=FERRINFER_SAMPLING_LAYOUT LAYOUT_ROUTINE=$routine POINT_DTYPE=$dtype \
      LAYOUTS="*:* 256:4 512:1 512:2 512:4 1024:1 1024:2 1024:4" \
      LAYOUT_CASES="32:32000 64:32000 256:32000 1024:32000 32:128256 64:128256 256:128256 1024:128256" \
      timeout 90 bash .bundle/suite.sh layouts > /dev/null 2>&1
    echo "$dtype $routine rc=$?" >> $SUITE_OUT/gpu.txt
  done
done
mkdir -p $OUT/layouts2; cp $SUITE_OUT/layouts.csv $SUITE_OUT/gpu.txt $OUT/layouts2/
cat $SUITE_OUT/gpu.txt; wc -l $SUITE_OUT/layouts.csv
