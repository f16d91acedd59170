#!/bin/bash
# Session 28 run 6 (carry .bundle of runs 1–3): the rope ops at few tokens with programmatic
# dependent launch on and off (FlashInfer's cos/sin-cache kernel launches without it), Rust
# bench, bf16, graph replay, two passes.
rm -rf /tmp/ferrinfer-aot && mkdir -p /tmp/ferrinfer-aot && tar xJf .bundle/aot.tar.xz -C /tmp/ferrinfer-aot
export FERRINFER_DISABLE_JIT=1 FERRINFER_AOT_DIR=/tmp/ferrinfer-aot
mkdir -p $OUT/r6 && csv=$OUT/r6/pdl.csv && echo "pdl,op,dtype,T,H,impl,us,tbps" > $csv
for pass in 1 2; do
  for routine in apply_rope_with_cos_sin_cache apply_rope_pos_ids; do
    for t in 1 8 128; do
      for pdl in on off; do
        timeout 30 .bundle/ferrinfer-bench --routine $routine --dtype bf16 --batch-size $t --hidden-size 128 \
          --warmup-seconds 0 --num-iters 9 --pdl $pdl 2>/dev/null | grep "^$routine," | sed "s/^/$pdl,/" >> $csv
      done
    done
  done
done
sort -t, -k2,2 -k4,4n -k1,1 $csv
