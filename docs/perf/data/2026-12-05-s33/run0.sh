#!/bin/bash
# Session 33's one-call plan (device time left after failed starts: ~600 s for a single call;
# carry .bundle: main at 0453968, plus .bundle/aot-floor.tar.xz — the sampling family of the
# working tree, the top-k filters' floor from the threads' maxima, built by
# scripts/gpu/variant.sh floor sampling). In order of what decides most, each step bounded,
# its results copied to $OUT as it ends (a run cut at its limit still returns them):
# 1. the committed cascade and page kernels (session 32's two-state entries and append walk,
#    never run on a GPU): their GPU tests (not the > 2^31 case, not the page layouts sweep);
# 2. `floor` beside the bundle's kernels (`base`), Rust bench, interleaved, twice, bf16 top-k;
# 3. the variant `floor`: the sampling GPU tests (not > 2^31, the million draws, softmax);
# 4. merge_state_in_place with the two-state merge unrolled (FERRINFER_CASCADE_LAYOUT=2)
#    against the planner's launch, after its own tests under that layout;
# 5. memcheck over the cascade, page and filter-cluster sanitizer cases.
tar xJOf .bundle/aot.tar.xz | grep -aq ferrinfer_merge_bf16_v8x2_s2 \
  || { echo "the .bundle predates the unrolled cascade entries: rebuild it (scripts/gpu/bundle.sh)" >&2; exit 2; }
[ -f .bundle/aot-floor.tar.xz ] || { echo "no .bundle/aot-floor.tar.xz (scripts/gpu/variant.sh floor sampling)" >&2; exit 2; }
export SUITE_OUT=/tmp/s33; mkdir -p $SUITE_OUT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $SUITE_OUT/gpu.txt
cat .bundle/commit >> $SUITE_OUT/gpu.txt
save() { # log name, label, exit status
  [ -f $SUITE_OUT/$1.log ] && mv $SUITE_OUT/$1.log $SUITE_OUT/$2.log
  echo "$2 rc=$3 at ${SECONDS}s" >> $SUITE_OUT/gpu.txt
  cp $SUITE_OUT/* $OUT/ 2>/dev/null
}
TESTS_FILTER=cascade_gpu TESTS_SKIP=over_2_pow_31 timeout 100 bash .bundle/suite.sh tests > /dev/null 2>&1
save tests tests-cascade $?
TESTS_FILTER=page_gpu TESTS_SKIP=layouts timeout 60 bash .bundle/suite.sh tests > /dev/null 2>&1
save tests tests-page $?
VARIANT_CASES="top_k_mask_logits:64:128256 top_k_mask_logits:256:32000 top_k_mask_logits:1:128256 \
  top_k_renorm_probs:256:32000 top_k_renorm_probs:64:128256 top_k_mask_logits:256:128256" \
  VARIANT_LAYOUT_VAR=FERRINFER_SAMPLING_LAYOUT POINT_DTYPE=bf16 timeout 90 bash .bundle/suite.sh variants > /dev/null 2>&1
save variants variants-bf16 $?
AOT_VARIANT=floor TESTS_FILTER=sampling_gpu TESTS_SKIP="over_2_pow_31 million_draws softmax" timeout 200 \
  bash .bundle/suite.sh tests > /dev/null 2>&1
save tests tests-sampling-floor $?
FERRINFER_CASCADE_LAYOUT=2 TESTS_FILTER=cascade_gpu TESTS_SKIP="over_2_pow_31 grid" timeout 40 \
  bash .bundle/suite.sh tests > /dev/null 2>&1
save tests tests-cascade-unrolled $?
LAYOUT_VAR=FERRINFER_CASCADE_LAYOUT LAYOUT_ROUTINE=merge_state_in_place LAYOUT_CASES="4096:128 65536:128 524288:128" \
  LAYOUTS="*:* 2:*:*" timeout 40 bash .bundle/suite.sh layouts > /dev/null 2>&1
save layouts layouts-cascade $?
SANITIZER_TESTS="cascade_gpu_sanitizer\|page_gpu_sanitizer" SANITIZER_TIMEOUT=40 timeout 80 \
  bash .bundle/suite.sh memcheck > /dev/null 2>&1
save memcheck memcheck-cascade-page $?
AOT_VARIANT=floor SANITIZER_TESTS=sampling_gpu_sanitizer_filter_cluster_paths SANITIZER_TIMEOUT=50 timeout 55 \
  bash .bundle/suite.sh memcheck > /dev/null 2>&1
save memcheck memcheck-sampling-floor $?
cat $SUITE_OUT/gpu.txt; grep -hE "^test |test result|ERROR SUMMARY" $SUITE_OUT/*.log | grep -v " 0 passed" | tail -40
sort -t, -k3,3 -k5,5n -k6,6n -k1,1 $SUITE_OUT/variants.csv 2>/dev/null; sort -t, -k4,4n -k1,1 $SUITE_OUT/layouts.csv 2>/dev/null
