#!/bin/bash
# Session 20 run 1 (bundle c508f11; variants built by variants.py + scripts/gpu/variant.sh):
# the register kernels with session 19's L2 policy — `linger` (rows read with evict_last),
# `reread` (then read again with evict_first for the outputs) — beside the bundle's kernels,
# at the planner's layouts and at the CUDA probe's best (device tool, carry .bundle).
export SUITE_OUT=/tmp/s20-r1
export VARIANT_CASES="fused_add_rmsnorm:65536:4096:1:512:1:0 fused_add_rmsnorm:65536:4096 fused_add_rmsnorm:16384:4096:1:512:1:0 fused_add_rmsnorm:16384:4096 fused_add_rmsnorm:4096:4096:1:512:1:0 fused_add_rmsnorm:4096:4096 fused_add_rmsnorm:65536:8192:2:512:1:0 fused_add_rmsnorm:65536:8192 rmsnorm:65536:4096:2:256:1:0 rmsnorm:65536:4096 rmsnorm:16384:4096:2:256:1:0 rmsnorm:16384:4096 rmsnorm:65536:8192:2:512:1:0 rmsnorm:65536:8192"
timeout 560 bash .bundle/suite.sh info variants
