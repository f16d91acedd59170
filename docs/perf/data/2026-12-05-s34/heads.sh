#!/bin/bash
# Prepared in session 34 for branch s34-two-state-heads (not run): `merge_states` of two states
# with heads through the two-state entry (its own walk for heads > 1), against main's any-count
# entry. One warm machine, same GPU for both: (1) a call carrying .peers/a that copies it to
# /tmp/peers; (2) a call carrying .peers/b and .peers/cccl that runs `install` below; (3) a call
# carrying .bundle built on the branch (scripts/gpu/bundle.sh) running `measure heads`; then move
# that .bundle out of the repository, put main's in its place, (4) a call carrying it running
# `measure main`. Results under $OUT/NAME/ (NAME: heads or main). Session 35 split the branch's
# checks into their own call (`check`, before `measure heads`): together they could outrun a
# call's 600 s.
# The peers' path, as .peers/b/install.sh sets it (a call's exports end with it; session 35's
# first `measure main` ran without FlashInfer for want of this line):
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages PYTHONUNBUFFERED=1
case "$1" in
  install)
    source .peers/b/install.sh > /tmp/install.log 2>&1; mkdir -p /tmp/site; tar xJf .peers/cccl/cccl.tar.xz -C /tmp/site
    tail -3 /tmp/install.log ;;
  check) # the branch's new device path, two states of rows with heads: the GPU tests on the
    # planner's launch and with every two-state call unrolled (layout 2); the sanitizers over
    # the cases with heads (merge_states of 1-9 states, 1 and 3 heads) and the sanitizer case;
    # the Python CUDA tests (two states with heads in f32/f16/bf16, both walks, bitwise against
    # merge_state).
    export SUITE_OUT=/tmp/heads-check; mkdir -p $SUITE_OUT
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $SUITE_OUT/gpu.txt; cat .bundle/commit >> $SUITE_OUT/gpu.txt
    for layout in "" 2; do
      FERRINFER_CASCADE_LAYOUT=$layout TESTS_FILTER=cascade_gpu TESTS_SKIP=over_2_pow_31 timeout 120 \
        bash .bundle/suite.sh tests > /dev/null 2>&1
      echo "tests layout=$layout rc=$?" >> $SUITE_OUT/gpu.txt; mv $SUITE_OUT/tests.log $SUITE_OUT/tests-layout$layout.log
    done
    for tool in memcheck racecheck; do
      SANITIZER_TESTS="cascade_gpu_sanitizer\|merge_states_of_any_count" SANITIZER_TIMEOUT=60 timeout 130 \
        bash .bundle/suite.sh $tool > /dev/null 2>&1
      echo "$tool rc=$?" >> $SUITE_OUT/gpu.txt
    done
    timeout 150 bash .bundle/suite.sh python > /dev/null 2>&1; echo "python rc=$?" >> $SUITE_OUT/gpu.txt
    mkdir -p $OUT/check; cp $SUITE_OUT/*.log $SUITE_OUT/gpu.txt $OUT/check/ 2>/dev/null
    cat $SUITE_OUT/gpu.txt; grep -hE "^test |test result|ERROR SUMMARY|RACECHECK SUMMARY|passed|failed" $SUITE_OUT/*.log 2>/dev/null | grep -v " 0 passed" ;;
  measure)
    export SUITE_OUT=/tmp/heads-$2; mkdir -p $SUITE_OUT
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $SUITE_OUT/gpu.txt; cat .bundle/commit >> $SUITE_OUT/gpu.txt
    for pass in 1 2; do
      PYBENCH_FAMILIES=cascade PYBENCH_DTYPES=bfloat16 PYBENCH_EAGER=0 \
        PYBENCH_OPS=merge_state,merge_state_in_place,merge_states,merge_states_2 timeout 120 \
        bash .bundle/suite.sh pybench > /dev/null 2>&1
      echo "pybench pass $pass rc=$?" >> $SUITE_OUT/gpu.txt
      mv $SUITE_OUT/py-cascade-bfloat16.csv $SUITE_OUT/py-cascade-bfloat16-pass$pass.csv
    done
    mkdir -p $OUT/$2; cp $SUITE_OUT/*.csv $SUITE_OUT/*.log $SUITE_OUT/gpu.txt $OUT/$2/ 2>/dev/null
    cat $SUITE_OUT/gpu.txt; grep -hE "^test |test result|ERROR SUMMARY|RACECHECK SUMMARY" $SUITE_OUT/*.log 2>/dev/null | grep -v " 0 passed" ;;
  *) echo "usage: heads.sh install | check | measure heads|main" >&2; exit 2 ;;
esac
