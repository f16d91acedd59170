#!/usr/bin/env bash
# Builds what the GPU suite runs into .bundle/ (git-ignored): the GPU test binaries (every
# integration test named *_gpu.rs), the benchmark, every kernel module built ahead of time
# (`cargo xtask aot`, compressed: suite.sh unpacks it and points FERRINFER_AOT_DIR at it), the
# Python wheel (its tests and benchmark travel in the working tree; with --gpu-wheel the wheel
# users get, every module embedded: `cargo xtask wheel`), and suite.sh. With
# --adapters also the candle and tch adapters' GPU tests (scripts/gpu/bundle-candle.sh and
# bundle-torch.sh, into .bundle/candle and .bundle/torch: suite.sh steps `candle`, `torch`; the
# first build of each takes 10-15 minutes on 2 cores). The GPU machine needs no Rust toolchain:
# everything is built here, .bundle is copied there with the working tree, and
# `bash .bundle/suite.sh STEP...` runs it (see docs/perf/README.md).
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
adapters=false gpu_wheel=false
for arg in "$@"; do
  case "$arg" in
    --adapters) adapters=true ;;
    --gpu-wheel) gpu_wheel=true ;;
    *) echo "usage: $0 [--adapters] [--gpu-wheel]" >&2; exit 2 ;;
  esac
done
# Small binaries: .bundle, peers included, stays small enough to copy to the GPU machine.
export CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_STRIP=symbols
rm -rf .bundle && mkdir -p .bundle/tests
aot=$(mktemp -d)
# Cubins beside the PTX (ptxas from PyPI, as .ci/run): the GPU's first call then skips the
# driver's compilation of the PTX. Required, so a missing ptxas fails here, not as a slow GPU run.
python3 -c 'import nvidia.cuda_nvcc' 2>/dev/null || python3 -m pip install --quiet nvidia-cuda-nvcc-cu12
FERRINFER_PTXAS="${FERRINFER_PTXAS:-$(python3 -c 'import nvidia.cuda_nvcc as m; print(list(m.__path__)[0])')/bin/ptxas}"
FERRINFER_PTXAS="$FERRINFER_PTXAS" FERRINFER_REQUIRE_PTXAS=1 cargo xtask aot --arch "${FERRINFER_CUDA_ARCH_LIST:-9.0}" --out "$aot"
tar cJf .bundle/aot.tar.xz -C "$aot" ptx
rm -rf "$aot"
cargo build --release -p ferrinfer-bench
cp target/release/ferrinfer-bench .bundle/
cargo test --release --workspace --no-run --message-format=json 2>/dev/null | python3 -c '
import json, shutil, sys
for line in sys.stdin:
    msg = json.loads(line)
    exe = msg.get("executable")
    # The adapters GPU tests (ferrinfer-ffi) need their features: --adapters builds them.
    gpu_test = msg.get("reason") == "compiler-artifact" and exe and msg["target"]["name"].endswith("_gpu")
    if gpu_test and "ferrinfer-ffi" not in msg["package_id"]:
        shutil.copy(exe, ".bundle/tests/" + msg["target"]["name"])
'
if $gpu_wheel; then
  # The wheel users get: every module embedded for sm_80, sm_89 and sm_90 (suite step `wheel`).
  FERRINFER_PTXAS="$FERRINFER_PTXAS" cargo xtask wheel --out .bundle/wheels
else
  python3 -c 'import maturin' 2>/dev/null || python3 -m pip install --quiet 'maturin>=1.9,<2'
  python3 -m maturin build --release -m crates/ferrinfer-py/Cargo.toml -o .bundle/wheels
fi
cp scripts/gpu/suite.sh .bundle/
if $adapters; then
  bash scripts/gpu/bundle-candle.sh
  bash scripts/gpu/bundle-torch.sh
fi
git rev-parse HEAD > .bundle/commit 2>/dev/null || echo uncommitted > .bundle/commit
du -sh .bundle
ls .bundle/tests
