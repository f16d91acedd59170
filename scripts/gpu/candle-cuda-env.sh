# Source this file (bash): `. scripts/gpu/candle-cuda-env.sh`
#
# A CUDA 13.0 toolkit for building candle's `cuda` feature (ferrinfer-ffi's `candle-cuda`) on a
# machine without CUDA, assembled from PyPI wheels into target/cu13/cuda (git-ignored) the first
# time (~100 MB download, seconds), then reused. The recipe and its measurements:
# ../shared/candle-cuda.md. nvcc 13.0 matches the H200 machine (driver 580, toolkit 13.0).
#
# Exports CUDA_HOME, CUDA_PATH, CUDA_ROOT (that folder), PATH (its bin first),
# CUDA_COMPUTE_CAP=90 (no nvidia-smi here to ask; candle's kernels are then built for sm_90a, which
# runs on H100/H200 only), NVCC_CCBIN=gcc, LIBRARY_PATH (link-time stubs, below) and
# LD_LIBRARY_PATH (libcudart). The binaries cannot run here: they load libcuda.so.1 and cuBLAS.

ferrinfer_candle_cuda_env() {
  local root dir wheels unpacked w
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  dir=$root/target/cu13
  if [ ! -x "$dir/cuda/bin/nvcc" ]; then
    echo "candle-cuda-env: assembling CUDA 13.0 from PyPI wheels in $dir" >&2
    rm -rf "$dir"
    wheels=$dir/wheels unpacked=$dir/unpacked
    mkdir -p "$wheels" "$unpacked"
    # The cu12 nvcc wheels ship only ptxas; the 13.0 ones are a complete compiler.
    python3 -m pip download --quiet --no-deps -d "$wheels" \
      nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88 \
      nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85 || return 1
    for w in "$wheels"/*.whl; do unzip -qo "$w" -d "$unpacked" || return 1; done
    mv "$unpacked/nvidia/cu13" "$dir/cuda" && rm -rf "$unpacked" "$wheels"
    (
      cd "$dir/cuda" || exit 1
      chmod +x bin/* nvvm/bin/* # zip drops the run bits
      ln -s lib lib64
      ln -s libcudart.so.13 lib/libcudart.so
      # nvcc looks for headers and libraries under targets/<arch>.
      mkdir -p targets/x86_64-linux
      ln -s ../../include targets/x86_64-linux/include
      ln -s ../../lib targets/x86_64-linux/lib
    ) || return 1
  fi
  # candle links cudarc against libcuda, libnvrtc, libcurand, libcublas and libcublasLt (its
  # `dynamic-linking`), which no wheel above has (libcuda comes with the driver). Link against
  # stubs, as the CUDA toolkit's own lib64/stubs do: every function of cudarc's bindings of that
  # library, under the real library's soname, so the binary loads the real ones on the GPU
  # machine. cudarc searches $CUDA_HOME/lib/stubs. Never put the stubs on LD_LIBRARY_PATH.
  if [ ! -e "$dir/cuda/lib/stubs/libcuda.so" ]; then
    ferrinfer_candle_cuda_stubs "$root" "$dir/cuda/lib/stubs" || return 1
  fi
  export CUDA_HOME=$dir/cuda
  export CUDA_PATH=$CUDA_HOME CUDA_ROOT=$CUDA_HOME
  export PATH=$CUDA_HOME/bin:$PATH
  export LD_LIBRARY_PATH=$CUDA_HOME/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  # For the linker (gcc passes LIBRARY_PATH on as -L), also where cudarc's build script ran
  # before the stubs existed and so did not list them.
  export LIBRARY_PATH=$CUDA_HOME/lib/stubs${LIBRARY_PATH:+:$LIBRARY_PATH}
  export CUDA_COMPUTE_CAP=${CUDA_COMPUTE_CAP:-90}
  export NVCC_CCBIN=${NVCC_CCBIN:-gcc}
  nvcc --version | tail -2 >&2
}
# ferrinfer_candle_cuda_stubs ROOT OUT: link-time stub libraries from cudarc's bindings.
ferrinfer_candle_cuda_stubs() {
  local root=$1 out=$2 version src lib soname name
  version=$(awk '/^name = "cudarc"$/ { getline; gsub(/"/, "", $3); print $3; exit }' "$root/Cargo.lock")
  [ -n "$version" ] || { echo "candle-cuda-env: no cudarc in Cargo.lock" >&2; return 1; }
  (cd "$root" && cargo fetch --quiet) || return 1
  src=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/cudarc-"$version"/src 2>/dev/null | head -1)
  [ -d "$src" ] || { echo "candle-cuda-env: cudarc $version sources not found" >&2; return 1; }
  mkdir -p "$out"
  # binding module:soname, the sonames of CUDA 13.0 (driver 580).
  for lib in driver:libcuda.so.1 nvrtc:libnvrtc.so.13 curand:libcurand.so.10 cublas:libcublas.so.13 \
    cublaslt:libcublasLt.so.13; do
    soname=${lib#*:} name=${lib#*:}
    name=${name%%.so*}
    grep -oE '^pub unsafe fn [A-Za-z0-9_]+' "$src/${lib%%:*}/sys/mod.rs" | awk '{ print "void " $4 "(void) {}" }' | sort -u \
      > "$out/$name.c"
    gcc -shared -fPIC -o "$out/$name.so" -Wl,-soname,"$soname" "$out/$name.c" || return 1
    rm "$out/$name.c"
  done
}

ferrinfer_candle_cuda_env
