#!/bin/bash
# Session 35: the filters' new split (Plan::filter_split, crates/ferrinfer-launch/src/sampling.rs)
# from Python beside torch.compile and FlashInfer 0.7.2, then the sampling CUDA tests under it.
# Needs the peers installed on the warm machine (docs/perf/data/2026-12-05-s34/heads.sh install)
# and the bundle of this change carried. Results straight into $OUT/verify (a call cut short by
# the session's device time still returns what it wrote): bf16 first (issue 13's short points),
# then the Python CUDA tests of the sampling family, then f32. B = 1 is not run: its split is
# unchanged.
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages PYTHONUNBUFFERED=1 # as install.sh sets it
export SUITE_OUT=$OUT/verify; mkdir -p $SUITE_OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $SUITE_OUT/gpu.txt; cat .bundle/commit >> $SUITE_OUT/gpu.txt
ops=top_k_mask_logits,top_k_renorm_probs,top_p_renorm_probs
PYBENCH_FAMILIES=sampling PYBENCH_DTYPES=bfloat16 PYBENCH_EAGER=0 PYBENCH_OPS=$ops PYBENCH_TOKENS=64,256 \
  timeout 200 bash .bundle/suite.sh pybench > /dev/null 2>&1; echo "pybench bf16 rc=$?" >> $SUITE_OUT/gpu.txt
# As run, this step called pytest on test_cuda.py without the bundle's FERRINFER_AOT_DIR: every
# test failed with "kernel module unavailable" (verify/pytest-sampling.log); the next call ran
# the suite's python step instead (verify/python.log), as here.
timeout 100 bash .bundle/suite.sh python > /dev/null 2>&1; echo "python rc=$?" >> $SUITE_OUT/gpu.txt
PYBENCH_FAMILIES=sampling PYBENCH_DTYPES=float32 PYBENCH_EAGER=0 PYBENCH_OPS=$ops PYBENCH_TOKENS=64,256 \
  timeout 150 bash .bundle/suite.sh pybench > /dev/null 2>&1; echo "pybench f32 rc=$?" >> $SUITE_OUT/gpu.txt
cat $SUITE_OUT/gpu.txt; tail -2 $SUITE_OUT/python.log
for f in $SUITE_OUT/py-sampling-*.csv; do grep -v torch_eager $f; done
