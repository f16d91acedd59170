#!/bin/bash
# Session 31 run 5 (H200; carry .peers/a, the machine of run 4): Rust bench (graph replay),
# the bundle's kernels beside the variant `new` of run 4, twice each — the cascade ops at seq
# 128 / 2048 / 16384 × 32 heads × 128 (T = 32 · seq rows), bf16; the page append with the
# planner's layout and with 256-thread blocks in one wave (FERRINFER_PAGE_LAYOUT=256:1).
# Results in run5/.
mkdir -p /tmp/peers && cp -r .peers/a/* /tmp/peers/
export SUITE_OUT=/tmp/s31r5; mkdir -p $SUITE_OUT
VARIANT_LAYOUT_VAR=FERRINFER_PAGE_LAYOUT VARIANT_CASES="append_paged_kv_cache:64:128 \
  append_paged_kv_cache:8192:128 append_paged_kv_cache:8192:128:256:1 append_paged_kv_cache:131072:128 \
  append_paged_kv_cache:131072:128:256:1" timeout 150 bash .bundle/suite.sh variants > /dev/null
mv $SUITE_OUT/variants.csv $SUITE_OUT/variants-page.csv
VARIANT_CASES="merge_state_in_place:4096:128 merge_state_in_place:65536:128 merge_state_in_place:524288:128 \
  merge_state:4096:128 merge_state:65536:128 merge_state:524288:128 merge_states:4096:128 \
  merge_states:65536:128 merge_states:524288:128" timeout 200 bash .bundle/suite.sh variants > /dev/null
mv $SUITE_OUT/variants.csv $SUITE_OUT/variants-cascade.csv
tar czf $OUT/s31r5.tgz -C $SUITE_OUT .
sort -t, -k3,3 -k5,5n -k2,2 -k1,1 $SUITE_OUT/variants-page.csv $SUITE_OUT/variants-cascade.csv
