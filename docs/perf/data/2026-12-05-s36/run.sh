#!/bin/bash
# Session 36 on one warm machine, after the peers' two calls (docs/perf/data/2026-12-05-s34/heads.sh:
# a call carrying .peers/a copying it to /tmp/peers; a call carrying .peers/b and .peers/cccl
# running `heads.sh install`). Each step a call of its own carrying .bundle, results straight
# into $OUT/STEP (a call cut short still returns what it wrote).
#   sweep   the 16-bit top_k_renorm_probs' block between 256 and 512 threads, one block a row,
#           at 132-264 rows of 32000 (session 35's next-renorm.sh, narrowed), bf16 twice, f16,
#           f32; Rust bench, graph replay
#   guard   the filters' wide blocks against the split where they would take more waves (the
#           planner's guard of session 36: 67-131 rows of 32000 keep the split's 2 x 256 for
#           80-register entries, take 2 x 512 for the 64-register 16-bit mask); bf16, Rust bench
#   samplers the staged samplers still short on the H200 (sessions 30-31: top-p and min-p f32
#           at 32000, 0.77-0.84) under wider blocks, as f6cb638 gave the filters: f32, 64 and
#           256 rows of 32000 and 128256; Rust bench
#   variant renorm-two-vectors.patch (the 16-bit top_k_renorm_probs two vectors a step at 64
#           registers: two blocks of 512 a multiprocessor) beside the bundle's kernels, bf16,
#           each under its own planner's layout; then the sampling GPU tests on it. Needs
#           .bundle/aot-renorm2.tar.xz: after scripts/gpu/bundle.sh, `git apply` the patch,
#           `bash scripts/gpu/variant.sh renorm2 sampling`, `git checkout crates/`
#   peers   top_k_renorm_probs beside FlashInfer 0.7.2 and torch.compile at 132 and 256 rows,
#           bf16, under the planner's layout and forced 384:1 and 256:1 (FERRINFER_SAMPLING_LAYOUT)
#   check   the Rust sampling and cascade GPU tests (not > 2^31) on the filters' split (f6cb638
#           and session 36's guard against more waves) and the any-count entries' single walk
#   sanitize memcheck and racecheck over the filters' wide blocks and the cascade's any-count
#           cases (a call of its own: with the tests it could outrun a call's 600 s)
#   cascade the cascade ops beside the peers, bf16, two passes (the any-count single walk)
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages PYTHONUNBUFFERED=1 # as install.sh sets it
export SUITE_OUT=$OUT/$1; mkdir -p $SUITE_OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $SUITE_OUT/gpu.txt; cat .bundle/commit >> $SUITE_OUT/gpu.txt
# sweep ROUTINE DTYPE LAYOUTS CASES SECONDS LABEL: the suite's layout sweep of the sampling
# family, bounded, its exit status noted under LABEL.
sweep() {
  LAYOUT_VAR=FERRINFER_SAMPLING_LAYOUT LAYOUT_ROUTINE=$1 POINT_DTYPE=$2 LAYOUTS="$3" LAYOUT_CASES="$4" \
    timeout $5 bash .bundle/suite.sh layouts > /dev/null 2>&1
  echo "$6 rc=$?" >> $SUITE_OUT/gpu.txt
}
case "$1" in
  sweep)
    for pass_dtype in 1:bf16 2:bf16 1:f16 1:f32; do
      sweep top_k_renorm_probs ${pass_dtype#*:} "*:* 256:1 320:1 384:1 448:1 512:1" \
        "132:32000 200:32000 256:32000 264:32000" 100 "pass $pass_dtype"
    done
    cat $SUITE_OUT/gpu.txt; sort -t, -k3,3 -k4,4n -k1,1 $SUITE_OUT/layouts.csv | cut -d, -f1-5,7 ;;
  guard)
    for routine in top_k_renorm_probs top_k_mask_logits; do
      sweep $routine bf16 "*:* 256:2 512:2" "66:32000 67:32000 100:32000 131:32000" 100 $routine
    done
    cat $SUITE_OUT/gpu.txt; sort -t, -k2,2 -k4,4n -k1,1 $SUITE_OUT/layouts.csv | cut -d, -f1-5,7 ;;
  samplers)
    for routine in top_p_sampling_from_probs min_p_sampling_from_probs; do
      sweep $routine f32 "*:* 256:1 256:4 384:2 512:1 512:2" "64:32000 256:32000 64:128256 256:128256" 150 $routine
    done
    cat $SUITE_OUT/gpu.txt; sort -t, -k2,2 -k4,4n -k5,5n -k1,1 $SUITE_OUT/layouts.csv | cut -d, -f1-5,7 ;;
  variant)
    cases=""; for c in 1:128256 64:32000 132:32000 200:32000 256:32000 64:128256 256:128256; do
      cases="$cases top_k_renorm_probs:$c"; done
    VARIANT_CASES="$cases" VARIANT_LAYOUT_VAR=FERRINFER_SAMPLING_LAYOUT POINT_DTYPE=bf16 timeout 200 \
      bash .bundle/suite.sh variants > /dev/null 2>&1; echo "variants rc=$?" >> $SUITE_OUT/gpu.txt
    AOT_VARIANT=renorm2 TESTS_FILTER=sampling_gpu TESTS_SKIP=over_2_pow_31 timeout 200 \
      bash .bundle/suite.sh tests > /dev/null 2>&1; echo "tests renorm2 rc=$?" >> $SUITE_OUT/gpu.txt
    cat $SUITE_OUT/gpu.txt; sort -t, -k5,5n -k6,6n -k1,1 $SUITE_OUT/variants.csv | cut -d, -f1,5,6,8
    grep -hE "test result" $SUITE_OUT/tests.log ;;
  peers)
    for layout in "*:*" 384:1 256:1; do # *:* is the planner's
      FERRINFER_SAMPLING_LAYOUT=$layout PYBENCH_FAMILIES=sampling PYBENCH_DTYPES=bfloat16 PYBENCH_EAGER=0 \
        PYBENCH_OPS=top_k_renorm_probs PYBENCH_TOKENS=132,256 timeout 150 bash .bundle/suite.sh pybench > /dev/null 2>&1
      echo "pybench layout=$layout rc=$?" >> $SUITE_OUT/gpu.txt
      mv $SUITE_OUT/py-sampling-bfloat16.csv $SUITE_OUT/py-sampling-bfloat16-$(echo "$layout" | tr ":*" "xp").csv
    done
    cat $SUITE_OUT/gpu.txt; for f in $SUITE_OUT/py-sampling-*.csv; do echo $f; grep -v torch_eager $f; done ;;
  check)
    for family in sampling cascade; do
      TESTS_FILTER=${family}_gpu TESTS_SKIP=over_2_pow_31 timeout 200 bash .bundle/suite.sh tests > /dev/null 2>&1
      echo "tests $family rc=$?" >> $SUITE_OUT/gpu.txt; mv $SUITE_OUT/tests.log $SUITE_OUT/tests-$family.log
    done
    cat $SUITE_OUT/gpu.txt; grep -hE "^test |test result" $SUITE_OUT/*.log | grep -v " 0 passed" ;;
  sanitize)
    for tool in memcheck racecheck; do
      SANITIZER_TESTS="filter_wide_block_paths\|merge_states_of_any_count" SANITIZER_TIMEOUT=80 timeout 170 \
        bash .bundle/suite.sh $tool > /dev/null 2>&1
      echo "$tool rc=$?" >> $SUITE_OUT/gpu.txt
    done
    cat $SUITE_OUT/gpu.txt; grep -hE "ERROR SUMMARY|RACECHECK SUMMARY|exit" $SUITE_OUT/*.log ;;
  cascade)
    for pass in 1 2; do
      PYBENCH_FAMILIES=cascade PYBENCH_DTYPES=bfloat16 PYBENCH_EAGER=0 \
        PYBENCH_OPS=merge_state,merge_states,merge_states_2 timeout 120 bash .bundle/suite.sh pybench > /dev/null 2>&1
      echo "pybench pass $pass rc=$?" >> $SUITE_OUT/gpu.txt
      mv $SUITE_OUT/py-cascade-bfloat16.csv $SUITE_OUT/py-cascade-bfloat16-pass$pass.csv
    done
    cat $SUITE_OUT/gpu.txt; for f in $SUITE_OUT/py-cascade-*.csv; do echo $f; grep -v torch_eager $f; done ;;
  *) echo "usage: run.sh sweep | guard | samplers | variant | peers | check | sanitize | cascade" >&2; exit 2 ;;
esac
