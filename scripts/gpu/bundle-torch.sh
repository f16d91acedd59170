#!/usr/bin/env bash
# Builds the tch adapter's GPU test (crates/ferrinfer-ffi/tests/torch_gpu.rs, `torch` feature)
# into .bundle/torch/ (git-ignored) for the GPU machine, which has no Rust toolchain: the test
# binary (release, stripped), linked against the CPU-only libtorch of scripts/torch/libtorch.sh,
# and every kernel module built ahead of time (aot.tar.xz, as scripts/gpu/bundle.sh makes it).
# It runs whatever CARGO_TARGET_DIR says (the first release build of torch-sys takes minutes).
#
# Run it there from the repository root, with .bundle/torch carried (torch 2.11.0+cu130 lives
# in /opt/torch/.venv; its torch/lib holds libtorch_cpu, libc10 and libtorch_cuda — the binary
# has no rpath, and the test loads libtorch_cuda.so itself; torch's libraries find CUDA's, under
# site-packages/nvidia, through their own rpath):
#
#   mkdir -p /tmp/ferrinfer-aot && tar xJf .bundle/torch/aot.tar.xz -C /tmp/ferrinfer-aot &&
#   LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/torch/lib \
#   FERRINFER_DISABLE_JIT=1 FERRINFER_AOT_DIR=/tmp/ferrinfer-aot .bundle/torch/torch_gpu --test-threads=1
#
# FERRINFER_DISABLE_JIT=1: a module missing from the AOT directory is an error, not a JIT build.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
source scripts/torch/libtorch.sh
# Small binaries: .bundle stays small enough to copy to the GPU machine.
export CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_STRIP=symbols
rm -rf .bundle/torch && mkdir -p .bundle/torch
aot=$(mktemp -d)
cargo xtask aot --arch "${FERRINFER_CUDA_ARCH_LIST:-9.0}" --out "$aot"
tar cJf .bundle/torch/aot.tar.xz -C "$aot" ptx
rm -rf "$aot"
cargo test --release -p ferrinfer-ffi --features torch --test torch_gpu --no-run --message-format=json |
  python3 -c '
import json, shutil, sys
for line in sys.stdin:
    msg = json.loads(line)
    if msg.get("reason") == "compiler-artifact" and msg.get("executable") and msg["target"]["name"] == "torch_gpu":
        shutil.copy(msg["executable"], ".bundle/torch/torch_gpu")
'
test -x .bundle/torch/torch_gpu
git rev-parse HEAD > .bundle/torch/commit 2>/dev/null || echo uncommitted > .bundle/torch/commit
ls -l .bundle/torch
