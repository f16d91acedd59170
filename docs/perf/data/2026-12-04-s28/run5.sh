#!/bin/bash
# Session 28 run 5 (carry .bundle of runs 1–3): forced rope layouts (`block:tokens`) at the
# small-token points, where FlashInfer's cos/sin-cache kernel (1.65 µs at one token, a block a
# head) led ours (1.90): blocks large enough for one step of units, Rust bench, bf16.
export SUITE_OUT=/tmp/s28-r5
for routine in apply_rope_with_cos_sin_cache apply_rope_pos_ids; do
  LAYOUT_VAR=FERRINFER_ROPE_LAYOUT LAYOUT_ROUTINE=$routine LAYOUTS="*:* 320:* 384:* 512:* 640:* 1024:*" \
    LAYOUT_CASES="1:128 2:128 8:128" timeout 100 bash .bundle/suite.sh layouts > /dev/null
  LAYOUT_VAR=FERRINFER_ROPE_LAYOUT LAYOUT_ROUTINE=$routine LAYOUTS="*:* 320:1 640:1 1024:1 640:2 1024:2" \
    LAYOUT_CASES="128:128 512:128" timeout 100 bash .bundle/suite.sh layouts > /dev/null
done
tar czf $OUT/s28-r5.tgz -C $SUITE_OUT .
sort -t, -k2,2 -k4,4n -k8,8n $SUITE_OUT/layouts.csv
