#!/bin/bash
# Session 19 run 1 (bundle c7dc4bf: the kernels of 7553a96): where the 1:1 read/write ceiling
# lies on this H200 and why torch.compile's fused_add_rmsnorm streams at 4.29 TB/s where ours
# reaches 4.1. (1) scripts/gpu/copy_ceiling.cu: hand-written copies and a-block-a-row norms over
# load/store policies, vectors in flight, grids, in place or not; (2) torch's copy (the old
# ceiling) and the Rust bench's norm grid on the same machine; (3) ncu of torch.compile's and our
# kernels on the same tensors, with inductor's generated source (TORCH_LOGS=output_code).
set -x
export SUITE_OUT=$OUT/r1
mkdir -p $SUITE_OUT
cp scripts/gpu/suite.sh .bundle/suite.sh
nvcc -O3 -std=c++17 -arch=sm_90 -o /tmp/copy_ceiling scripts/gpu/copy_ceiling.cu > $SUITE_OUT/copy-build.log 2>&1
/tmp/copy_ceiling > $SUITE_OUT/copy-ceiling.csv 2> $SUITE_OUT/copy-ceiling.err
bash .bundle/suite.sh info ceiling
BENCH_ROUTINES="rmsnorm fused_add_rmsnorm" BENCH_DTYPES=bf16 bash .bundle/suite.sh bench
TORCH_LOGS=output_code NCU_CASES="fused_add_rmsnorm:65536:4096 rmsnorm:65536:4096" bash .bundle/suite.sh ncupeers
tar czf $OUT/suite.tgz -C $SUITE_OUT .
