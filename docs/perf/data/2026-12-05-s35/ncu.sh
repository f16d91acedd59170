#!/bin/bash
# Session 35: Nsight Compute on the bf16 top-k filters still short of FlashInfer (issue 13: mask
# 128256 x 64 0.89, renorm 32000 x 256 0.86 and 128256 x 64 0.95 on the H200), ours beside
# FlashInfer 0.7.2 on the same tensors (crates/ferrinfer-py/bench/ncu_peers.py, k = 50), one
# call each after warm-ups, caches not flushed. Needs FlashInfer installed on the warm machine
# (docs/perf/data/2026-12-05-s34/heads.sh install) and main's .bundle carried.
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages PYTHONUNBUFFERED=1 # as install.sh sets it
export SUITE_OUT=/tmp/s35-ncu; mkdir -p $SUITE_OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $SUITE_OUT/gpu.txt; cat .bundle/commit >> $SUITE_OUT/gpu.txt
NCU_CASES="top_k_mask_logits:64:128256 top_k_mask_logits:256:32000 top_k_renorm_probs:256:32000 top_k_renorm_probs:64:128256" \
  timeout 420 bash .bundle/suite.sh ncupeers > /dev/null 2>&1
echo "ncupeers rc=$?" >> $SUITE_OUT/gpu.txt
mkdir -p $OUT/ncu; cp $SUITE_OUT/ncupeers.log $SUITE_OUT/gpu.txt $OUT/ncu/
cat $SUITE_OUT/gpu.txt; grep -E "^# |==PROF==|  [a-z_]+.*\(|Duration|Registers Per|Achieved Occupancy|Block Size|Grid Size|Executed Ipc A|Memory Throughput|DRAM Throughput" $SUITE_OUT/ncupeers.log | head -150
