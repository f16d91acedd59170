#!/usr/bin/env bash
# Builds what the GPU suite runs into .bundle/ (git-ignored): the GPU test binaries (every
# integration test named *_gpu.rs), the benchmark, every kernel module built ahead of time
# (`cargo xtask aot`, compressed: suite.sh unpacks it and points FERRINFER_AOT_DIR at it), the
# Python wheel (its tests and benchmark travel in the working tree), and suite.sh. The GPU machine has no Rust toolchain, so everything is built here; the device tool
# then carries .bundle and runs `bash .bundle/suite.sh STEP...` there (see docs/perf/README.md).
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
# Small binaries: the device tool carries at most 64 MiB per run, peers included.
export CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_STRIP=symbols
rm -rf .bundle && mkdir -p .bundle/tests
aot=$(mktemp -d)
cargo xtask aot --arch "${FERRINFER_CUDA_ARCH_LIST:-9.0}" --out "$aot"
tar cJf .bundle/aot.tar.xz -C "$aot" ptx
rm -rf "$aot"
cargo build --release -p ferrinfer-bench
cp target/release/ferrinfer-bench .bundle/
cargo test --release --workspace --no-run --message-format=json 2>/dev/null | python3 -c '
import json, shutil, sys
for line in sys.stdin:
    msg = json.loads(line)
    exe = msg.get("executable")
    if msg.get("reason") == "compiler-artifact" and exe and msg["target"]["name"].endswith("_gpu"):
        shutil.copy(exe, ".bundle/tests/" + msg["target"]["name"])
'
python3 -c 'import maturin' 2>/dev/null || python3 -m pip install --quiet 'maturin>=1.9,<2'
python3 -m maturin build --release -m crates/ferrinfer-py/Cargo.toml -o .bundle/wheels
cp scripts/gpu/suite.sh .bundle/
git rev-parse HEAD > .bundle/commit 2>/dev/null || echo uncommitted > .bundle/commit
du -sh .bundle
ls .bundle/tests
