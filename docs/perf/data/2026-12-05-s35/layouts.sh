#!/bin/bash
# Session 35: the bf16 top-k filters' launch layouts swept again on today's kernels (session 12
# swept them before the caps, the batched pass and the branch-free pieces). The ncu run beside
# FlashInfer (ncu.sh) found our 128256 x 64 launches (4 blocks of 256 a row, clusters of 4,
# 256 blocks, 0.65 waves) with their multiprocessors active 71 % of the kernel's cycles where
# FlashInfer's are 88 %. Rust bench, graph replay, FERRINFER_SAMPLING_LAYOUT=block:slices, one
# pass; carry main's .bundle. Results: $OUT/layouts/layouts.csv.
export SUITE_OUT=/tmp/s35-layouts; mkdir -p $SUITE_OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $SUITE_OUT/gpu.txt; cat .bundle/commit >> $SUITE_OUT/gpu.txt
for routine in top_k_mask_logits top_k_renorm_probs; do
  LAYOUT_VAR=FERRINFER_SAMPLING_LAYOUT LAYOUT_ROUTINE=$routine POINT_DTYPE=bf16 \
    LAYOUTS="*:* 256:1 256:2 256:4 256:8 128:4 128:8 512:1 512:2 512:4 1024:1 1024:2" \
    LAYOUT_CASES="64:128256 256:128256 64:32000 256:32000" timeout 280 bash .bundle/suite.sh layouts > /dev/null 2>&1
  echo "$routine rc=$?" >> $SUITE_OUT/gpu.txt
done
mkdir -p $OUT/layouts; cp $SUITE_OUT/layouts.csv $SUITE_OUT/gpu.txt $OUT/layouts/
cat $SUITE_OUT/gpu.txt; sort -t, -k2,2 -k4,4n -k5,5n -k7,7n $SUITE_OUT/layouts.csv | cut -d, -f1-5,7
