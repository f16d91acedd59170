#!/usr/bin/env bash
# Builds the candle adapter's GPU test and benchmark for the GPU machine into .bundle/candle/
# (git-ignored): the `candle_gpu` test binary and the `candle` bench binary of ferrinfer-ffi with
# `--features candle-cuda`, libcudart.so.13 (candle's binaries need it at load time; the GPU
# machine's /usr/local/cuda/lib64 provides libcublas, libcublasLt, libcurand and libnvrtc, its
# driver libcuda), every kernel module built ahead of time (aot.tar.xz, as scripts/gpu/bundle.sh
# makes it) and run.sh. candle's `cuda` feature needs nvcc: scripts/gpu/candle-cuda-env.sh
# assembles CUDA 13.0 from PyPI wheels. Release build, no debug info, stripped; its own target
# dir (target/candle-cuda). From scratch on 2 cores: ~10 min (candle-kernels' nvcc builds most).
#
# On the GPU machine (no Rust there), from the repository root with .bundle carried:
#
#   bash .bundle/candle/run.sh            # the GPU tests, then the benchmark
#   bash .bundle/candle/run.sh tests      # or one of them
#   bash .bundle/candle/run.sh bench
#
# run.sh unpacks the binaries (xz) to /tmp/ferrinfer-candle and the AOT modules to
# /tmp/ferrinfer-aot, and runs with FERRINFER_DISABLE_JIT=1
# FERRINFER_AOT_DIR=/tmp/ferrinfer-aot (a module missing there is an error naming it) and
# LD_LIBRARY_PATH=.bundle/candle:/usr/local/cuda/lib64; logs and the CSV go to $OUT.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
# shellcheck source=scripts/gpu/candle-cuda-env.sh
source scripts/gpu/candle-cuda-env.sh
export CARGO_TARGET_DIR=$root/target/candle-cuda
export CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_STRIP=symbols
out=.bundle/candle
rm -rf "$out" && mkdir -p "$out"

aot=$(mktemp -d)
cargo xtask aot --arch "${FERRINFER_CUDA_ARCH_LIST:-9.0}" --out "$aot"
tar cJf "$out/aot.tar.xz" -C "$aot" ptx
rm -rf "$aot"

# Both binaries in one cargo call; their paths from cargo's JSON messages.
cargo test --release -p ferrinfer-ffi --features candle-cuda --test candle_gpu --bench candle --no-run \
  --message-format=json-render-diagnostics | python3 -c '
import json, shutil, sys
names = {("test", "candle_gpu"): "candle_gpu", ("bench", "candle"): "candle-bench"}
for line in sys.stdin:
    msg = json.loads(line)
    exe, target = msg.get("executable"), msg.get("target", {})
    for kind in target.get("kind", []):
        if msg.get("reason") == "compiler-artifact" and exe and (kind, target["name"]) in names:
            shutil.copy(exe, sys.argv[1] + "/" + names[(kind, target["name"])])
' "$out"
# ~40 MB each, mostly candle's kernels (.nv_fatbin); xz makes them ~5 MB.
xz -T0 -9 "$out/candle_gpu" "$out/candle-bench"
cp -L "$CUDA_HOME/lib/libcudart.so.13" "$out/"

cat > "$out/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs the candle adapter's GPU tests and/or benchmark (built by scripts/gpu/bundle-candle.sh),
# from the repository root with .bundle carried: bash .bundle/candle/run.sh [tests] [bench]
set -uo pipefail
here=.bundle/candle bin=/tmp/ferrinfer-candle
out=${OUT:-/tmp/ferrinfer-candle-out}
mkdir -p "$out" /tmp/ferrinfer-aot "$bin"
tar xJf "$here/aot.tar.xz" -C /tmp/ferrinfer-aot
for b in candle_gpu candle-bench; do xz -dc "$here/$b.xz" > "$bin/$b" && chmod +x "$bin/$b"; done
export FERRINFER_DISABLE_JIT=1 FERRINFER_AOT_DIR=/tmp/ferrinfer-aot
export LD_LIBRARY_PATH=$PWD/$here:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
status=0
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(tests bench)
for step in "${steps[@]}"; do
  case $step in
    tests) "$bin/candle_gpu" --test-threads=1 2>&1 | tee "$out/candle_gpu.log"; rc=${PIPESTATUS[0]} ;;
    bench) "$bin/candle-bench" 2> >(tee "$out/candle-bench.err" >&2) | tee "$out/candle.csv"; rc=${PIPESTATUS[0]} ;;
    *) echo "unknown step $step (tests, bench)"; exit 2 ;;
  esac
  echo "== $step: exit $rc"
  [ "$rc" = 0 ] || status=1
done
exit $status
RUN
chmod +x "$out/run.sh"
git rev-parse HEAD > "$out/commit" 2>/dev/null || echo uncommitted > "$out/commit"
du -sh "$out"
ls -la "$out"
