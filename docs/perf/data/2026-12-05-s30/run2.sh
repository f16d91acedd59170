#!/bin/bash
# Session 30 run 2 (made, H200; results in run2/) — the sampling ops beside the peers (FlashInfer 0.7.2, torch) in one process,
# the new weighing and, as a variant in a second process, session 29's (build it here first:
# `git show 5157de4:crates/ferrinfer-kernels/src/sampling.rs > crates/ferrinfer-kernels/src/sampling.rs`,
# the same for math.rs, `bash scripts/gpu/variant.sh s29weigh sampling`, then
# `git checkout crates/ferrinfer-kernels/src`). Carry .peers/b and .bundle (aot-s29weigh.tar.xz
# included) on a machine that has /tmp/peers from a call before (docs/perf/README.md).
set -x
source .peers/b/install.sh
mkdir -p /tmp/site; tar xJf .peers/cccl/cccl.tar.xz -C /tmp/site
export PYBENCH_FAMILIES=sampling PYBENCH_DTYPES="float32 bfloat16" PYBENCH_EAGER=0
export PYBENCH_OPS=sampling_from_probs,top_p_sampling_from_probs,min_p_sampling_from_probs
SUITE_OUT=/tmp/s30r2 timeout 290 bash .bundle/suite.sh pybench
SUITE_OUT=/tmp/s30r2 AOT_VARIANT=s29weigh timeout 270 bash .bundle/suite.sh pybench
tar czf $OUT/s30-r2.tgz -C /tmp/s30r2 .
