#!/bin/bash
# Session 26 run 3 (carry .peers/b after .peers/a; .bundle from run 1): ncu beside FlashInfer and
# torch.compile, one call each on the same tensors (suite step `ncupeers`), at the standard
# grid's short points and the wide grid's rmsnorm 12288.
source .peers/b/install.sh > /dev/null 2>&1
export SUITE_OUT=/tmp/s26-r3
NCU_CASES='rmsnorm:4096:8192 rmsnorm:4096:12288 fused_add_rmsnorm:1024:4096 fused_add_rmsnorm:4096:3000' \
  timeout 200 bash .bundle/suite.sh ncupeers > /dev/null
tar czf $OUT/s26-r3.tgz -C $SUITE_OUT .
