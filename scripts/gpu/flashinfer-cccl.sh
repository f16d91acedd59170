#!/usr/bin/env bash
# The CCCL headers FlashInfer 0.7.2's wheel ships (cub, thrust, libcudacxx), for the peers' JIT
# builds that need them (rope: `cuda::fast_mod_div`, newer than the GPU machine's CUDA has). The
# team's peer package (../shared/peers/prepare.sh) trims them away; this packs them apart, into
# .peers/cccl/cccl.tar.xz (~3 MB, git-ignored with .peers/), carried beside .peers/b. On the GPU
# machine, after `source .peers/b/install.sh`: tar xJf .peers/cccl/cccl.tar.xz -C /tmp/site
set -euo pipefail
root=$(git rev-parse --show-toplevel)
tmp=$(mktemp -d)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform any -d "$tmp" flashinfer-python==0.7.2.post1
(cd "$tmp" && python3 - <<'PY'
import glob, zipfile
wheel = zipfile.ZipFile(glob.glob("flashinfer_python-*.whl")[0])
keep = ("cub/cub/", "thrust/thrust/", "libcudacxx/include/")
for name in wheel.namelist():
    if name.startswith("flashinfer/data/cccl/") and name[len("flashinfer/data/cccl/"):].startswith(keep):
        wheel.extract(name, "out")
PY
)
mkdir -p "$root/.peers/cccl"
tar cJf "$root/.peers/cccl/cccl.tar.xz" -C "$tmp/out" flashinfer
rm -rf "$tmp"
du -sh "$root/.peers/cccl/cccl.tar.xz"
