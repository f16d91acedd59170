#!/bin/bash
# Prepared in session 35, not run (no device time left): the one filter still short beside
# FlashInfer on the H100, bf16 top_k_renorm_probs 32000 x 256 (0.944; verify.sh). Its planner's
# block of 512 a row takes 79 registers: one block a multiprocessor (FlashInfer keeps 1024
# threads there). ptxas 12.9 (sm_90) on its PTX: at a cap of 72 no spill but still one block of
# 512; at 64, 20-24 bytes spilled. A block of 384 at 80 registers fits twice (61440 of 65536).
# Sweep the widths between, Rust bench, two passes; carry the bundle. $OUT/renorm/layouts.csv.
export SUITE_OUT=/tmp/s35-renorm; mkdir -p $SUITE_OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $SUITE_OUT/gpu.txt; cat .bundle/commit >> $SUITE_OUT/gpu.txt
for pass in 1 2; do
  for dtype in bf16 f16; do
    LAYOUT_VAR=FERRINFER_SAMPLING_LAYOUT LAYOUT_ROUTINE=top_k_renorm_probs POINT_DTYPE=$dtype \
      LAYOUTS="*:* 256:1 320:1 384:1 448:1 512:1 384:2 256:2" LAYOUT_CASES="132:32000 200:32000 256:32000 264:32000" \
      timeout 120 bash .bundle/suite.sh layouts > /dev/null 2>&1
    echo "pass $pass $dtype rc=$?" >> $SUITE_OUT/gpu.txt
  done
done
mkdir -p $OUT/renorm; cp $SUITE_OUT/layouts.csv $SUITE_OUT/gpu.txt $OUT/renorm/
cat $SUITE_OUT/gpu.txt; sort -t, -k3,3 -k4,4n -k7,7n $SUITE_OUT/layouts.csv | cut -d, -f1-5,7
