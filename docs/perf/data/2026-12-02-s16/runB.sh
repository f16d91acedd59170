#!/bin/bash
# Session 16 run B (after run A unpacked .peers/a): the activation family from Python beside torch
# eager, torch.compile and FlashInfer 0.7.2 (bf16, f16), one process a dtype, while the GPU
# machine's nvcc builds FlashInfer's `sampling` and `topk` modules in the background (CPU only:
# the timing is of CUDA graph replays). The topk module needs the wheel's CCCL headers
# (.peers/c/cccl.tar.xz, unpacked into the package); its build took > 6 min in session 15.
set -x
source .peers/b/install.sh
tar xJf .peers/c/cccl.tar.xz -C /tmp/site/flashinfer/data
mkdir -p $OUT/rB
for module in topk sampling; do
  (setsid nohup python3 -c "import flashinfer.$module as m; m.get_${module}_module(); print('built')" \
    > $OUT/rB/build-$module.log 2>&1; echo "exit $? $(date +%T)" >> $OUT/rB/build-$module.log) &
done
date +%T
SUITE_OUT=$OUT/rB PYBENCH_FAMILIES=activation PYBENCH_DTYPES="bfloat16 float16" PYBENCH_EAGER=0 bash .bundle/suite.sh pybench
date +%T
for i in $(seq 1 60); do
  grep -q "^exit" $OUT/rB/build-topk.log $OUT/rB/build-sampling.log 2>/dev/null && \
    [ "$(grep -l '^exit' $OUT/rB/build-*.log | wc -l)" = 2 ] && break
  sleep 5
done
date +%T; tail -3 $OUT/rB/build-*.log
ls -la ~/.cache/flashinfer/*/*/cached_ops/topk/ 2>/dev/null | head
