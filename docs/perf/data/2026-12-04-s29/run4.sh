#!/bin/bash
# Session 29 run 4 (carry .bundle: v1 + FERRINFER_PAGE_LAYOUT, and kernel variants from
# scripts/gpu/variant.sh): append_paged_kv_cache bf16 at the points (Rust bench, graph
# replay) — the launch layout swept (block 64–512 threads × grid of 1, 2, 4 waves or a vector a
# thread), then the kernel variants beside the bundle's (reused: the rows' loads through L2 as
# usual, ld.global.nc, not no_allocate; cs: streaming stores; s4: four vectors a step).
export SUITE_OUT=/tmp/s29-r4
LAYOUT_VAR=FERRINFER_PAGE_LAYOUT LAYOUT_ROUTINE=append_paged_kv_cache \
  LAYOUTS="64:1 128:1 256:1 512:1 128:2 256:2 128:4 256:4 128:0 256:0 512:0 *:*" \
  LAYOUT_CASES="64:128 8192:128 131072:128" timeout 250 bash .bundle/suite.sh layouts > /dev/null
VARIANT_CASES="append_paged_kv_cache:64:128 append_paged_kv_cache:8192:128 append_paged_kv_cache:131072:128" \
  timeout 200 bash .bundle/suite.sh variants > /dev/null
tar czf $OUT/s29-r4.tgz -C $SUITE_OUT .
cat $SUITE_OUT/layouts.csv | sort -t, -k4,4n -k7,7n
sort -t, -k5,5n -k8,8n $SUITE_OUT/variants.csv
