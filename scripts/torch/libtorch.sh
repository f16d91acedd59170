# Source this (`source scripts/torch/libtorch.sh`) before building ferrinfer-ffi's `torch`
# feature: it provides libtorch 2.11.0 — the version tch 0.24 is written against — and exports
# what torch-sys's build script and the test binaries need:
#   LIBTORCH            target/libtorch/2.11.0: include/ and lib/ (torch-sys reads both)
#   LIBTORCH_CXX11_ABI  1: the PyPI wheels are built with the C++11 std::string ABI
#   LD_LIBRARY_PATH     + $LIBTORCH/lib (the binaries get no rpath; this is how they load)
#
# Where from: PyPI's torch==2.11.0 wheel (its default build is CUDA 13.0, the same build as the
# GPU machine's torch 2.11.0+cu130), downloaded once (~506 MiB, then deleted) and cut down to a
# CPU-only view (~0.5 GiB): the headers and libtorch_cpu, libc10, libtorch, libgomp — not
# libtorch_cuda, which would drag in cuBLAS, cuDNN, NCCL, … (gigabytes of wheels) just to link.
# libtorch_cpu itself needs libcudart.so.13 and libcupti.so.13 to load (readelf -d), so the view
# adds those two from their small NVIDIA wheels (2 + 10 MiB); neither needs a GPU or a driver.
# A binary linked against the view runs CPU tensors here; on a GPU machine it gets CUDA by
# loading that machine's libtorch_cuda.so at run time (see crates/ferrinfer-ffi/tests/torch_gpu.rs
# and scripts/gpu/bundle-torch.sh).
#
# Needs python3 with pip and unzip. Sourced, so no `set -e` here: the work runs in a subshell.

ferrinfer_libtorch() (
  set -euo pipefail
  local version=2.11.0 view=$1
  [ -f "$view/.complete" ] && exit 0
  local stage="$view.partial"
  rm -rf "$view" "$stage" && mkdir -p "$stage"
  # Exact pins: torch, and the cudart/cupti releases its cuda-toolkit==13.0.2 requirement names.
  # --platform/--python-version pick the same files whatever python runs pip.
  python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$stage/wheels" \
    --python-version 3.12 --platform manylinux_2_28_x86_64 --platform manylinux_2_25_x86_64 \
    --platform manylinux_2_17_x86_64 \
    "torch==$version" nvidia-cuda-runtime==13.0.96 nvidia-cuda-cupti==13.0.85
  local wheels="$stage/wheels" into="$stage/unzipped"
  unzip -q "$wheels"/torch-*.whl -d "$into" 'torch/include/*' torch/version.py \
    torch/lib/libtorch_cpu.so torch/lib/libtorch.so torch/lib/libc10.so torch/lib/libgomp.so.1
  unzip -q "$wheels"/nvidia_cuda_runtime-*.whl -d "$into" nvidia/cu13/lib/libcudart.so.13
  unzip -q "$wheels"/nvidia_cuda_cupti-*.whl -d "$into" nvidia/cu13/lib/libcupti.so.13
  mkdir -p "$stage/lib"
  mv "$into/torch/include" "$stage/include"
  mv "$into"/torch/lib/* "$into"/nvidia/cu13/lib/* "$stage/lib/"
  # torch-sys checks this file against the version its tch release expects.
  sed -n "s/^__version__ = '\(.*\)'$/\1/p" "$into/torch/version.py" > "$stage/build-version"
  grep -q "^$version+" "$stage/build-version"
  rm -rf "$wheels" "$into"
  touch "$stage/.complete"
  mv "$stage" "$view"
)

# In target/ (git-ignored, and `cargo clean` starts over).
if ferrinfer_libtorch "$(git rev-parse --show-toplevel)/target/libtorch/2.11.0"; then
  export LIBTORCH="$(git rev-parse --show-toplevel)/target/libtorch/2.11.0"
  export LIBTORCH_CXX11_ABI=1
  export LD_LIBRARY_PATH="$LIBTORCH/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "libtorch: LIBTORCH=$LIBTORCH ($(cat "$LIBTORCH/build-version"))"
else
  echo "libtorch: preparing target/libtorch/2.11.0 failed (see above)" >&2
  false
fi
