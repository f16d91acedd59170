#!/bin/bash
# Session 21 run 3 (carry .peers/b; .bundle from run 1 on the same machine): Nsight Compute on
# FlashInfer's and the Python module's kernels side by side at the wide grid's losses — what
# FlashInfer does differently at odd (4095) and non-power-of-two (5120, 12288) widths and at
# rmsnorm 1024 x 4096 (threads, registers, occupancy, DRAM and L2 bytes, instructions).
source .peers/b/install.sh
export SUITE_OUT=/tmp/s21-r3
NCU_CASES="fused_add_rmsnorm:4096:4095 rmsnorm:4096:4095 fused_add_rmsnorm:4096:5120 rmsnorm:4096:12288 rmsnorm:1024:4096" \
  timeout 240 bash .bundle/suite.sh ncupeers > /dev/null
tar czf $OUT/s21-r3.tgz -C $SUITE_OUT .
grep -h "exit" $SUITE_OUT/*.log
