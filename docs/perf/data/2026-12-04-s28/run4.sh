#!/bin/bash
# Session 28 run 4 (carry .bundle of runs 1–3 with .bundle/aot-hoist.tar.xz): the rope kernel's
# variant `hoist` (each thread's first two units' q/k loads issued before the angle phase, so
# their round trip overlaps it) beside the bundle's kernel, Rust bench, bf16, two passes.
export SUITE_OUT=/tmp/s28-r4
VARIANT_CASES="apply_rope_with_cos_sin_cache:1:128 apply_rope_with_cos_sin_cache:128:128 apply_rope_with_cos_sin_cache:2048:128 apply_rope_with_cos_sin_cache:16384:128 apply_rope_pos_ids:1:128 apply_rope_pos_ids:128:128 apply_rope_pos_ids:2048:128 apply_rope_pos_ids:16384:128 apply_rope:2048:128 apply_rope:16384:128" \
  timeout 300 bash .bundle/suite.sh variants > /dev/null
tar czf $OUT/s28-r4.tgz -C $SUITE_OUT .
sort -t, -k3,3 -k5,5n -k1,1 $SUITE_OUT/variants.csv
