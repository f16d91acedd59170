#!/usr/bin/env bash
# Runs the GPU suite on the GPU machine, from the repository root, with .bundle carried (built by
# scripts/gpu/bundle.sh). Steps, in the order given:
#   info      GPU, driver, clocks; ptxas register/spill report of every bundled module
#   tests     every bundled GPU test binary (the correctness grid, > 2^31 elements, ...)
#   memcheck  compute-sanitizer memcheck over the GPU tests, one test at a time, all but the grids
#             and > 2^31 (too slow under the sanitizer; norm_gpu_sanitizer_every_kernel_path
#             reaches every kernel path with small sizes instead)
#   racecheck compute-sanitizer racecheck, likewise (SANITIZER_TIMEOUT seconds each, default 240)
#   bench     ferrinfer-bench --grid for every routine of the norm (rmsnorm, fused_add_rmsnorm),
#             activation (silu/gelu/gelu_tanh_and_mul) and sampling (softmax, top_k_mask_logits,
#             top_k_renorm_probs, top_p_renorm_probs and the sampling ops), cascade (merge_state,
#             merge_state_in_place), rope (apply_rope_pos_ids, in place too, apply_rope,
#             apply_llama31_rope_pos_ids) and page (append_paged_kv_cache) families, bf16 and
#             f16 (correctness: `tests`)
#   sweep     the norm planner's layouts forced one by one (FERRINFER_NORM_LAYOUT) at the points
#             that decide them, rmsnorm and fused_add_rmsnorm bf16: $out/sweep.csv; the register
#             kernels' layouts (SWEEP=register), the wide grid's losses (SWEEP=wide), rows of
#             narrow vectors (SWEEP=narrow), rmsnorm's long rows (SWEEP=long), the fused ops' chunks at 16-byte vectors
#             (SWEEP=fusedchunks) or, by default, the staged kernel's chunks and stages against
#             the register kernels (`*:*:*:0`)
#   variants  code-generation variants (scripts/gpu/variant.sh) beside the bundle's kernels
#   ceiling   the copy ceiling: torch's device-to-device copy of the large shapes (TB/s)
#   layouts   any family's layout override swept at chosen points (LAYOUT_VAR, LAYOUT_ROUTINE,
#             LAYOUTS, LAYOUT_CASES): $out/layouts.csv
#   actsweep  the activation launch's block and grid y forced one by one
#             (FERRINFER_ACTIVATION_LAYOUT=block:grid_y:stream), silu_and_mul and gelu_tanh_and_mul bf16,
#             T ∈ {128 … 16384} × d ∈ {4096, 14336}: $out/actsweep.csv (≈ 140 bench runs, ~3 min);
#             ACTSWEEP=stream: the cache policy instead, cached against streaming (ActivationParams::streams)
#   eager     ferrinfer-bench --mode eager, then --mode issue: the wall time per call of back-to-back
#             calls (T = 1), and the host's enqueue time alone (where eager exceeds it, the GPU sets the pace)
#   ncu       Nsight Compute on one launch of each of a few shapes (DRAM %, registers, occupancy,
#             issue statistics)
#   ncupeers  Nsight Compute on FlashInfer's and the Python module's kernels, same tensors, side by
#             side (crates/ferrinfer-py/bench/ncu_peers.py; needs FlashInfer: .peers/b)
#   python    the Python wheel's tests (crates/ferrinfer-py/tests) on torch CUDA tensors: every op,
#             the current-stream rule, torch.cuda.graph capture, the adapters.md CUDA snippet
#   pybench   crates/ferrinfer-py/bench/ops.py: the Python module beside torch eager, torch.compile
#             and FlashInfer in one process, norm and activation grids (PYBENCH_FAMILIES: sampling, cascade,
#             rope, page, decode too), and --eager (FlashInfer only if importable: source .peers/b/install.sh)
#   candle    the candle adapter's GPU tests and its benchmark against candle's own rms_norm
#             (needs .bundle/candle: bash scripts/gpu/bundle.sh --adapters)
#   torch     the tch adapter's GPU tests, against the machine's torch 2.11 (needs .bundle/torch)
#   wheel     the bundled wheel (the GPU wheel: bundle.sh --gpu-wheel) in a clean environment: installed
#             alone, no FERRINFER_* variable, no AOT directory, no Rust; every op's CUDA tests, then
#             its first call with the driver's PTX cache off and on
#   firstcall first-call latency (module load + launch) from the embedded AOT PTX, with the
#             driver's PTX JIT cache disabled, then enabled (cold, then warm)
# Modules come from the bundled AOT directory; FERRINFER_DISABLE_JIT=1 makes any miss an error.
# AOT_VARIANT=NAME runs every step with a code-generation variant's modules
# (.bundle/aot-NAME.tar.xz from scripts/gpu/variant.sh) in place of the bundle's: the Python
# module's benchmark, the sweeps and the tests of a kernel change without a new bundle.
# Logs and CSVs go to $SUITE_OUT (default /tmp/ferrinfer-gpu-out), one file per step, appended to
# by every call of the suite on one machine: give each run a directory of its own, or an earlier
# run's files come back beside its own. When $OUT is set, every call ends by packing that
# directory into the one file $OUT/suite.tgz.
set -uo pipefail
out=${SUITE_OUT:-/tmp/ferrinfer-gpu-out}
mkdir -p "$out"
pack() { [ -z "${OUT:-}" ] || tar czf "$OUT/suite.tgz" -C "$out" .; }
trap pack EXIT
install_aot() { # the bundle's modules in /tmp/ferrinfer-aot; AOT_VARIANT=NAME: .bundle/aot-NAME.tar.xz's
  # modules (scripts/gpu/variant.sh) in place of the bundle's of the same spec, for every step
  rm -rf /tmp/ferrinfer-aot && mkdir -p /tmp/ferrinfer-aot && tar xJf .bundle/aot.tar.xz -C /tmp/ferrinfer-aot || return 1
  [ -n "${AOT_VARIANT:-}" ] || return 0
  local variant spec manifest modules=0; variant=$(mktemp -d)
  tar xJf ".bundle/aot-$AOT_VARIANT.tar.xz" -C "$variant" || return 1
  for manifest in "$variant"/ptx/*/manifest.toml; do
    spec=$(sed -n 's/^spec = "\(.*\)"$/\1/p' "$manifest")
    grep -lx "spec = \"$spec\"" /tmp/ferrinfer-aot/ptx/*/manifest.toml | xargs -r -n1 dirname | xargs -r rm -rf
    modules=$((modules + 1))
  done
  cp -r "$variant"/ptx/. /tmp/ferrinfer-aot/ptx/ && rm -rf "$variant"
  echo "# AOT_VARIANT=$AOT_VARIANT: $modules modules from the variant" >&2
}
install_aot || { echo "could not unpack .bundle/aot.tar.xz${AOT_VARIANT:+ or .bundle/aot-$AOT_VARIANT.tar.xz}" >&2; exit 2; }
export FERRINFER_DISABLE_JIT=1 FERRINFER_AOT_DIR=/tmp/ferrinfer-aot PYTHONUNBUFFERED=1
status=0
python_path() { # installs the bundled wheel once per wheel; prints the PYTHONPATH that finds it
  # The directory is named by the wheel's hash: on a machine that ran an earlier bundle, its
  # site would otherwise run an old launcher beside new kernels.
  local site; site=/tmp/ferrinfer-site-$(cat .bundle/wheels/*.whl | sha256sum | cut -c1-16)
  [ -d "$site" ] || python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .bundle/wheels/*.whl >&2
  echo "$site${PYTHONPATH:+:$PYTHONPATH}"
}
run() { # run NAME CMD...: log to $out/NAME.log, remember failures
  local name=$1; shift
  echo "== $name: $(date +%T) $*" | tee -a "$out/$name.log"
  "$@" 2>&1 | tee -a "$out/$name.log"
  local rc=${PIPESTATUS[0]}
  echo "== $name: $(date +%T) exit $rc" | tee -a "$out/$name.log"
  [ "$rc" = 0 ] || status=1
}
point() { # point LABEL CSV ROUTINE T H ENV...: one bench point (POINT_DTYPE, default bf16) under ENV, its row prefixed by LABEL
  local label=$1 csv=$2 routine=$3 t=$4 h=$5; shift 5
  timeout 30 env "$@" .bundle/ferrinfer-bench --routine "$routine" --dtype "${POINT_DTYPE:-bf16}" --batch-size "$t" --hidden-size "$h" \
    --warmup-seconds 0 --num-iters 9 2>/dev/null | grep "^$routine," | sed "s/^/$label,/" >> "$csv"
}
sweep() { # sweep VAR CSV ROUTINE LAYOUTS CASES: ROUTINE (POINT_DTYPE) with VAR=LAYOUT, every layout at every T:H
  local var=$1 csv=$2 routine=$3 layouts=$4 cases=$5 layout case
  local -; set -f # layouts hold `*`: no file-name globbing
  for layout in $layouts; do
    for case in $cases; do
      point "$layout" "$csv" "$routine" "${case%%:*}" "${case##*:}" "$var=$layout"
    done
  done
}
for step in "$@"; do
  case $step in
    info)
      run info nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv
      run info cat .bundle/commit
      for ptx in /tmp/ferrinfer-aot/ptx/*/kernels.ptx; do
        run info ptxas -arch=sm_90 -v "$ptx" -o /dev/null
      done 2>&1 | grep -E "entry function|registers|spill" > "$out/ptxas.log" ;;
    tests)
      # TESTS_SKIP: name filters passed as --skip (e.g. "_grid over_2_pow_31" for a short run);
      # TESTS_FILTER: one name filter, the only tests run (e.g. over_2_pow_31).
      skips=(); for f in ${TESTS_SKIP:-}; do skips+=(--skip "$f"); done
      for t in .bundle/tests/*; do run tests "$t" ${TESTS_FILTER:-} --test-threads=1 "${skips[@]}"; done ;;
    memcheck|racecheck)
      # One test at a time, each with its own time limit (the all-op grid at once outran one).
      for t in .bundle/tests/*; do
        # SANITIZER_TESTS: a grep pattern picking the tests (default: all but the big ones).
        for name in $("$t" --list 2>/dev/null | sed -n 's/: test$//p' | grep -v -e over_2_pow_31 -e _grid -e layouts \
            | grep -e "${SANITIZER_TESTS:-.}"); do
          run "$step" timeout "${SANITIZER_TIMEOUT:-240}" compute-sanitizer --tool "$step" --error-exitcode 99 \
            --print-limit 20 "$t" --exact "$name" --test-threads=1
        done
      done ;;
    bench)
      # BENCH_DTYPES, BENCH_ROUTINES: narrow the grid (default: both dtypes, every routine).
      for dtype in ${BENCH_DTYPES:-bf16 f16}; do
        for routine in ${BENCH_ROUTINES:-rmsnorm fused_add_rmsnorm silu_and_mul gelu_and_mul gelu_tanh_and_mul softmax top_k_mask_logits top_k_renorm_probs top_p_renorm_probs sampling_from_probs top_k_sampling_from_probs top_p_sampling_from_probs min_p_sampling_from_probs top_k_top_p_sampling_from_probs top_k_top_p_sampling_from_logits merge_state merge_state_in_place apply_rope_pos_ids apply_rope_pos_ids_inplace apply_rope apply_llama31_rope_pos_ids apply_rope_with_cos_sin_cache append_paged_kv_cache}; do
          run bench .bundle/ferrinfer-bench --routine $routine --dtype $dtype --grid --output-path "$out/ferrinfer.csv" \
            --warmup-seconds 1
        done
      done ;;
    sweep)
      echo "layout,op,dtype,T,H,impl,us,tbps" > "$out/sweep.csv"
      norm() { sweep FERRINFER_NORM_LAYOUT "$out/sweep.csv" "$@"; }
      if [ "${SWEEP:-staged}" = mid ]; then
        # The staged kernel where its slot passes 48 KB; then staged blocks of a few rows each
        # (`*:*:ROWS:STAGES`, not a persistent grid) where rows stream from DRAM.
        norm fused_add_rmsnorm "*:*:*:0 *:*:*" "512:8192 1024:8192 2048:8192 1024:4096"
        norm rmsnorm "*:*:*:0 *:*:*" "1024:8192"
        norm rmsnorm "*:*:*:0 *:*:*:2 *:*:1:1 *:*:2:2 *:*:4:2 *:*:16:2" "65536:4096 16384:4096 4096:8192"
      elif [ "${SWEEP:-staged}" = perblock ]; then
        # Staged blocks of ROWS rows (`*:*:ROWS:STAGES`) against the persistent staged grid and
        # the register kernels, small to large batches.
        perblock="*:*:*:0 *:*:* *:*:2:2 *:*:4:2 *:*:4:4 *:*:8:2 2:*:2:2"
        norm rmsnorm "$perblock" "1024:4096 4096:4096 65536:4096 512:8192 2048:8192 16384:8192 65536:8192"
        norm fused_add_rmsnorm "$perblock" "1024:4096 4096:4096 16384:4096 65536:4096 512:8192 1024:8192 65536:8192"
      elif [ "${SWEEP:-staged}" = wide ]; then
        # The wide grid's losses (docs/perf/norm.md v8, v9): odd and non-power-of-two widths
        # and short rows at T = 4096 — register chunks and rows a group against staged.
        wide="*:*:* *:*:*:0 2:*:1:0 4:*:1:0 8:*:1:0 2:*:2:0 4:*:2:0 4:*:*:2 2:*:*:2"
        norm fused_add_rmsnorm "$wide" "4096:2048 4096:3000 4096:4095 4096:5120 4096:8192 4096:12288 16384:5120"
        norm rmsnorm "$wide" "4096:1024 4096:2048 16384:2048 4096:4095 1024:4096 4096:5120 4096:12288"
      elif [ "${SWEEP:-staged}" = narrow ]; then
        # Rows of 2-, 4- and 8-byte vectors (odd, 2-mod-4 and 4-mod-8 widths): the planner's
        # 4 chunks for the fused op (pipelined below 8-byte vectors), 8 pipelined for rmsnorm
        # (docs/perf/norm.md v9, v10), against 8 chunks with and without pipelining and fewer
        # chunks over more rows.
        norm fused_add_rmsnorm "*:*:* 8:*:1:0 8:*:2:0 4:*:2:0 2:*:2:0 4:*:4:0 4:*:1:0" \
          "128:4095 1024:4095 4096:4095 65536:4095 4096:1001 16384:1001 4096:4094 4096:4100 16384:4100 4096:8196"
        norm rmsnorm "*:*:* 8:*:1:0 8:*:2:0 8:*:4:0 4:*:2:0 4:*:4:0" \
          "1024:4095 4096:4095 65536:4095 4096:1001 16384:1001 4096:4094 4096:4100"
        # Fused 2 KB rows (4 KB of input and residual a row): the staged kernel against the
        # register kernels (docs/perf/norm.md v9: registers, since staged lost at 16384 rows).
        norm fused_add_rmsnorm "*:*:* *:*:*:0 2:*:1:0" "4096:1024 16384:1024"
      elif [ "${SWEEP:-staged}" = long ]; then
        # rmsnorm's long rows (16-32 KB) from 4096 rows up: the staged kernel up to 16 KB, 8
        # register chunks a thread past it (docs/perf/norm.md v10), against plain and pipelined
        # register chunks and 2 and 3 rows staged.
        norm rmsnorm "*:*:* 8:*:1:0 8:*:2:0 4:*:*:2 4:*:*:3 2:*:*:2" \
          "4096:8192 16384:8192 65536:8192 4096:12288 16384:12288 4096:16384 16384:16384"
      elif [ "${SWEEP:-staged}" = fusedchunks ]; then
        # The fused ops' chunks at 16-byte vectors, unpipelined, from 16384 to 65536 rows
        # (docs/perf/norm.md v9: 2 or 4 beat the planner's 8 at 4096 rows).
        norm fused_add_rmsnorm "*:*:* 2:*:1:0 4:*:1:0 8:*:1:0" \
          "16384:1024 65536:1024 16384:2048 16384:4096 65536:4096 16384:8192 65536:8192"
      elif [ "${SWEEP:-staged}" = register ]; then
        big="65536:4096 16384:4096 65536:8192 16384:8192 221184:128 4096:4096 1024:8192"
        small="1:4096 1:8192 16:4096 128:4096 128:8192"
        norm rmsnorm "*:*:* 2:*:1 2:*:2 4:*:1 4:*:2 4:*:4 8:*:1 8:*:2 1:*:2 1:*:4" "$big"
        norm rmsnorm "*:*:* 1:*:1 2:*:1 4:*:1 8:*:1 1:1024:1 1:256:1" "$small"
        norm fused_add_rmsnorm "*:*:* 1:*:2 2:*:1 2:*:2 4:*:1 4:*:2 8:*:1" "65536:4096 16384:4096 65536:8192 1024:8192"
        norm fused_add_rmsnorm "*:*:* 1:*:1 2:*:1 4:*:1" "1:4096 1:8192 128:4096"
      else
        staged="*:*:*:0 *:*:* 4:*:*:2 4:*:*:4 2:*:*:2 2:*:*:4"
        norm rmsnorm "$staged" "65536:4096 16384:4096 4096:4096 2048:4096 65536:8192 16384:8192 2048:8192"
        norm fused_add_rmsnorm "$staged" "65536:4096 16384:4096 4096:4096 65536:8192"
      fi
      sort -t, -k2,2 -k4,4n -k5,5n -k7,7n "$out/sweep.csv" ;;
    layouts)
      # Any family's layout override swept (LAYOUT_VAR, e.g. FERRINFER_ROPE_LAYOUT): LAYOUT_ROUTINE
      # (POINT_DTYPE) with every value of LAYOUTS at every T:H of LAYOUT_CASES: $out/layouts.csv.
      [ -f "$out/layouts.csv" ] || echo "layout,op,dtype,T,H,impl,us,tbps" > "$out/layouts.csv"
      sweep "$LAYOUT_VAR" "$out/layouts.csv" "$LAYOUT_ROUTINE" "$LAYOUTS" "$LAYOUT_CASES"
      sort -t, -k2,2 -k4,4n -k5,5n -k7,7n "$out/layouts.csv" ;;
    actsweep)
      # block:grid_y; `*` the planner's. Grid y = T is a row a thread; T/4 and T/8 rows a step (4 a step).
      echo "layout,op,dtype,T,H,impl,us,tbps" > "$out/actsweep.csv"
      if [ "${ACTSWEEP:-}" = stream ]; then # cached (`*:*:0`) or streaming (`*:*:1`) loads and stores
        for case in 128:4096 1024:4096 4096:4096 16384:4096 1024:11008 4096:11008 1024:14336 2048:14336 4096:14336 16384:14336; do
          sweep FERRINFER_ACTIVATION_LAYOUT "$out/actsweep.csv" silu_and_mul "*:*:0 *:*:1 *:*:*" "$case"
        done
      fi
      for routine in $([ "${ACTSWEEP:-}" = stream ] || echo silu_and_mul gelu_tanh_and_mul); do
        for case in 128:4096 1024:4096 4096:4096 16384:4096 128:14336 1024:14336 16384:14336; do
          t=${case%%:*}
          sweep FERRINFER_ACTIVATION_LAYOUT "$out/actsweep.csv" $routine \
            "*:* 128:* 256:* 512:* 64:* *:$t 128:$((t / 4)) 256:$((t / 4)) 128:$((t / 8)) 256:$((t / 8))" "$case"
        done
      done
      sort -t, -k2,2 -k4,4n -k5,5n -k7,7n "$out/actsweep.csv" ;;
    variants)
      # Each code-generation variant (.bundle/aot-NAME.tar.xz, scripts/gpu/variant.sh) beside the
      # bundle's own kernels (`base`), interleaved per case, twice: $out/variants.csv.
      # VARIANT_CASES: routine:T:H[:LAYOUT] ..., LAYOUT set as VARIANT_LAYOUT_VAR (default
      # FERRINFER_NORM_LAYOUT; FERRINFER_SAMPLING_LAYOUT for the sampling family); POINT_DTYPE.
      variant_names=(base)
      for tarball in .bundle/aot-*.tar.xz; do
        [ -e "$tarball" ] || continue
        v=${tarball#.bundle/aot-}; v=${v%.tar.xz}; variant_names+=("$v")
        mkdir -p "/tmp/ferrinfer-aot-$v" && tar xJf "$tarball" -C "/tmp/ferrinfer-aot-$v"
      done
      echo "variant,layout,op,dtype,T,H,impl,us,tbps" > "$out/variants.csv"
      set -f
      for case in ${VARIANT_CASES:-rmsnorm:65536:4096 rmsnorm:16384:4096 rmsnorm:4096:8192 fused_add_rmsnorm:65536:4096 \
          fused_add_rmsnorm:1024:4096 silu_and_mul:1024:4096 silu_and_mul:16384:14336}; do
        IFS=: read -r routine t h layout <<< "$case"
        for pass in 1 2; do
          for v in "${variant_names[@]}"; do
            dir=/tmp/ferrinfer-aot; [ "$v" = base ] || dir=/tmp/ferrinfer-aot-$v
            point "$v,${layout:-*}" "$out/variants.csv" "$routine" "$t" "$h" FERRINFER_AOT_DIR="$dir" \
              "${VARIANT_LAYOUT_VAR:-FERRINFER_NORM_LAYOUT}=${layout:-}"
          done
        done
      done
      set +f
      sort -t, -k3,3 -k5,5n -k6,6n -k2,2 -k1,1 "$out/variants.csv" ;;
    ceiling)
      run ceiling python3 scripts/gpu/ceiling.py ;;
    eager)
      for routine in rmsnorm fused_add_rmsnorm silu_and_mul; do
        for h in 4096 8192; do
          for mode in eager issue; do
            run eager .bundle/ferrinfer-bench --routine $routine --dtype bf16 --batch-size 1 --hidden-size $h --mode $mode \
              --num-iters 7 --warmup-seconds 0 --output-path "$out/eager.csv"
          done
        done
      done ;;
    ncu)
      # NCU_CASES: routine:T:H[:FERRINFER_NORM_LAYOUT] ... (default below; its last two: the
      # register and the staged norm kernel at a DRAM-bound size), with the memory sections
      # (DRAM reads vs writes).
      set -f # layouts hold `*`
      for case in ${NCU_CASES:-rmsnorm:65536:4096 rmsnorm:221184:128 rmsnorm:1:4096 fused_add_rmsnorm:65536:4096 \
          silu_and_mul:16384:14336 rmsnorm:65536:4096:*:*:*:0 rmsnorm:65536:4096:*:*:*:2}; do
        IFS=: read -r routine t h layout <<< "$case"
        run ncu env FERRINFER_NORM_LAYOUT="${layout:-}" /usr/local/cuda/bin/ncu --clock-control none --launch-count 1 \
          -k regex:ferrinfer --section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats \
          ${layout:+--section MemoryWorkloadAnalysis} \
          .bundle/ferrinfer-bench --routine "$routine" --dtype bf16 --batch-size "$t" --hidden-size "$h" \
          --num-iters 1 --warmup-seconds 0
      done
      set +f ;;
    ncupeers)
      # FlashInfer and the Python module on the same tensors, one call each (NVTX range `prof`),
      # with the memory and warp-state sections: where the two kernels differ. Needs FlashInfer
      # (source .peers/b/install.sh). NCU_CASES: op:T:H ...
      # Caches are not flushed before the profiled call (`--cache-control none`): after the warm-up
      # calls L2 holds what it holds in a graph replay, which decides L2-sized calls.
      run ncupeers env PYTHONPATH="$(python_path)" /usr/local/cuda/bin/ncu --clock-control none --cache-control none --nvtx \
        --nvtx-include prof/ --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
        --section LaunchStats --section SchedulerStats --section WarpStateStats \
        --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,smsp__inst_executed.sum \
        python3 crates/ferrinfer-py/bench/ncu_peers.py ${NCU_CASES:-rmsnorm:65536:4096 rmsnorm:16384:4096 \
        rmsnorm:4096:8192 fused_add_rmsnorm:1024:4096 fused_add_rmsnorm:65536:4096 silu_and_mul:1024:4096} ;;
    python)
      run python env PYTHONPATH="$(python_path)" python3 -m pytest -q -rs -p no:cacheprovider crates/ferrinfer-py/tests ;;
    pybench)
      # PYBENCH_FAMILIES, PYBENCH_DTYPES, PYBENCH_TOKENS (T values, comma-separated), PYBENCH_OPS
      # (ops, comma-separated): narrow or widen the grid (default: both families, bfloat16, every
      # T, every op); PYBENCH_GRID=wide: the norm family's own grid (H 64 to 16384, odd widths);
      # PYBENCH_EAGER=0 skips --eager.
      for dtype in ${PYBENCH_DTYPES:-bfloat16}; do
        for family in ${PYBENCH_FAMILIES:-norm activation}; do
          run pybench env PYTHONPATH="$(python_path)" python3 crates/ferrinfer-py/bench/ops.py --family $family \
            --dtype $dtype ${PYBENCH_TOKENS:+--tokens $PYBENCH_TOKENS} ${PYBENCH_OPS:+--ops $PYBENCH_OPS} \
            ${PYBENCH_GRID:+$([ $family = norm ] && echo "--grid $PYBENCH_GRID")} \
            --out "$out/py-$family-$dtype${PYBENCH_GRID:+$([ $family = norm ] && echo "-$PYBENCH_GRID")}${AOT_VARIANT:+-$AOT_VARIANT}.csv"
          [ "${PYBENCH_EAGER:-1}" = 0 ] || run pybench env PYTHONPATH="$(python_path)" python3 \
            crates/ferrinfer-py/bench/ops.py --family $family --dtype $dtype --eager --out "$out/py-$family-$dtype-eager.csv"
        done
      done ;;
    candle)
      run candle env OUT="$out" bash .bundle/candle/run.sh tests bench ;;
    torch)
      torch_lib=$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
      run torch env LD_LIBRARY_PATH="$torch_lib" .bundle/torch/torch_gpu --test-threads=1 ;;
    wheel)
      rm -rf /tmp/ferrinfer-wheel
      run wheel python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/ferrinfer-wheel .bundle/wheels/*.whl
      run wheel ls -l .bundle/wheels
      clean=(env -i PATH="$PATH" HOME="$HOME" ${LD_LIBRARY_PATH:+LD_LIBRARY_PATH="$LD_LIBRARY_PATH"} PYTHONPATH=/tmp/ferrinfer-wheel)
      run wheel "${clean[@]}" python3 -m pytest -q -rs -p no:cacheprovider crates/ferrinfer-py/tests
      for cache in CUDA_CACHE_DISABLE=1 CUDA_CACHE_DISABLE=1 CUDA_CACHE_PATH=/tmp/ferrinfer-nv-cache-wheel; do
        run wheel "${clean[@]}" "$cache" FERRINFER_JIT_VERBOSE=1 python3 crates/ferrinfer-py/bench/first_call.py
      done ;;
    firstcall)
      first=(.bundle/ferrinfer-bench --routine rmsnorm --batch-size 1 --hidden-size 4096 --num-iters 1 --warmup-seconds 0)
      rm -rf /tmp/ferrinfer-nv-cache
      for i in 1 2; do run firstcall env CUDA_CACHE_DISABLE=1 "${first[@]}"; done
      for i in 1 2; do run firstcall env CUDA_CACHE_PATH=/tmp/ferrinfer-nv-cache "${first[@]}"; done ;;
    *) echo "unknown step $step (info, tests, memcheck, racecheck, bench, sweep, layouts, variants, ceiling, actsweep, eager, ncu, ncupeers, python, pybench, candle, torch, wheel, firstcall)"; exit 2 ;;
  esac
done
exit $status
