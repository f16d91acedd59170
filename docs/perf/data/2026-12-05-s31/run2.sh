#!/bin/bash
# Session 31 run 2 (H200; carry .peers/a, the machine of run 1 with its .bundle): session 29's
# run 4 (docs/perf/data/2026-12-04-s29/run4.sh), append_paged_kv_cache bf16 in the Rust bench
# (graph replay) — the launch layout swept, then the kernel variants beside the bundle's, built
# by `bash scripts/gpu/variant.sh NAME page` from crates/ferrinfer-kernels/src/page.rs edited:
# reused (the rows' loads `Reused`, ld.global.nc, in place of `Once`'s L1::no_allocate), cs
# (stores `Evicted`, st.global.cs), s4 (STEP 4), reused_cs, reused_s4. Results in run2/.
mkdir -p /tmp/peers && cp -r .peers/a/* /tmp/peers/
export SUITE_OUT=/tmp/s31r2
LAYOUT_VAR=FERRINFER_PAGE_LAYOUT LAYOUT_ROUTINE=append_paged_kv_cache \
  LAYOUTS="64:1 128:1 256:1 512:1 128:2 256:2 128:4 256:4 128:0 256:0 512:0 *:*" \
  LAYOUT_CASES="64:128 8192:128 131072:128" timeout 250 bash .bundle/suite.sh layouts > /dev/null
VARIANT_CASES="append_paged_kv_cache:64:128 append_paged_kv_cache:8192:128 append_paged_kv_cache:131072:128" \
  timeout 200 bash .bundle/suite.sh variants > /dev/null
tar czf $OUT/s31r2.tgz -C $SUITE_OUT .
sort -t, -k4,4n -k7,7n $SUITE_OUT/layouts.csv
sort -t, -k5,5n -k8,8n $SUITE_OUT/variants.csv
