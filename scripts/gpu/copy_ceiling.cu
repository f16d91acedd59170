// The H200's bandwidth ceiling for the memory-bound families, by hand-written kernels (torch's
// copy, scripts/gpu/ceiling.py, is one kernel of unknown shape): every combination of
//   tensors   1 (a copy: a norm's read once, write once) or 2 (two in, two out: the fused add)
//   place     out of place, or in place (written where read, as fused_add_rmsnorm)
//   vectors   16-byte vectors a thread loads before it stores any (1, 2, 4, 8)
//   load      ld.global | .nc | .nc.L1::no_allocate | L2 evict_first (createpolicy, as Triton)
//   store     st.global | .cs
//   grid      a tile a block (as many blocks as tiles) | persistent (8 blocks an SM, striding)
// and a row kernel shaped like the simplest rmsnorm (a block a row, the row in registers, a
// block reduction of the squares, then the scaled row written): the cost of the reduction
// between a row's loads and its stores, against the copy of the same bytes; and that norm in two
// passes over the row as torch.compile's Triton kernel runs fused_add_rmsnorm (the row read with
// L2 evict_last for the sum of squares, then read again, from L2, with evict_first for the
// outputs: 30 registers, a 512-thread block a row).
// Each kernel: a CUDA graph of 20 launches, CUDA events, median of 7 replays.
// Build and run on the GPU machine: nvcc -O3 -std=c++17 -arch=sm_90 -o /tmp/copy_ceiling
// scripts/gpu/copy_ceiling.cu && /tmp/copy_ceiling [KIND...] > copy-ceiling.csv (KIND: copy,
// rownorm, twopass; default all).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#define CHECK(call)                                                                      \
  do {                                                                                   \
    cudaError_t e = (call);                                                              \
    if (e != cudaSuccess) {                                                              \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e)); \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)

enum LoadKind { kPlain, kNc, kNoAlloc, kEvictFirst, kEvictLast };
enum StoreKind { kStore, kStreaming };
static const char* kLoadNames[] = {"plain", "nc", "nc_noalloc", "evict_first", "evict_last"};
static const char* kStoreNames[] = {"plain", "cs"};

template <int LOAD>
__device__ __forceinline__ uint4 load(const uint4* p) {
  uint4 v;
  if constexpr (LOAD == kPlain) {
    asm volatile("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  } else if constexpr (LOAD == kNc) {
    asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  } else if constexpr (LOAD == kNoAlloc) {
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  } else if constexpr (LOAD == kEvictFirst) {
    asm volatile(
        "{ .reg .b64 policy; createpolicy.fractional.L2::evict_first.b64 policy, 1.0;\n"
        "ld.global.L1::evict_first.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], policy; }"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  } else {
    asm volatile(
        "{ .reg .b64 policy; createpolicy.fractional.L2::evict_last.b64 policy, 1.0;\n"
        "ld.global.L1::evict_last.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], policy; }"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  }
  return v;
}

template <int STORE>
__device__ __forceinline__ void store(uint4* p, uint4 v) {
  if constexpr (STORE == kStore) {
    asm volatile("st.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
  } else {
    asm volatile("st.global.cs.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
  }
}

// Tile t of a block covers vectors [t * blockDim * U, (t + 1) * blockDim * U): vector u of a
// thread is u * blockDim + threadIdx (coalesced per u). All loads before any store.
template <int U, int LOAD, int STORE, int TENSORS>
__global__ void copy_kernel(const uint4* in0, const uint4* in1, uint4* out0, uint4* out1, size_t vectors,
                            bool persistent) {
  const size_t tile_vectors = (size_t)blockDim.x * U;
  for (size_t tile = blockIdx.x; tile * tile_vectors < vectors; tile += persistent ? gridDim.x : vectors) {
    const size_t base = tile * tile_vectors + threadIdx.x;
    uint4 a[U], b[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      size_t i = base + (size_t)u * blockDim.x;
      if (i < vectors) {
        a[u] = load<LOAD>(in0 + i);
        if constexpr (TENSORS == 2) b[u] = load<LOAD>(in1 + i);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      size_t i = base + (size_t)u * blockDim.x;
      if (i < vectors) {
        store<STORE>(out0 + i, a[u]);
        if constexpr (TENSORS == 2) store<STORE>(out1 + i, b[u]);
      }
    }
  }
}

__device__ __forceinline__ float2 bf2(uint32_t w) {
  return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&w));
}
__device__ __forceinline__ uint32_t pack(float a, float b) {
  __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<uint32_t*>(&h);
}

// The squares of a vector's 8 bf16 values added to 4 partial sums.
__device__ __forceinline__ void add_squares(uint4 v, float (&ss)[4]) {
  const uint32_t* w = &v.x;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    float2 a = bf2(w[k]);
    ss[k] = fmaf(a.x, a.x, fmaf(a.y, a.y, ss[k]));
  }
}

// 1 / rms of the row whose squares the block's threads hold in `ss`: shuffles, then the warps'
// sums through shared memory.
__device__ __forceinline__ float row_scale(const float (&ss)[4], int hidden) {
  float s = (ss[0] + ss[1]) + (ss[2] + ss[3]);
  for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffff, s, o);
  __shared__ float partial[32];
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x / 32] = s;
  __syncthreads();
  s = threadIdx.x < blockDim.x / 32 ? partial[threadIdx.x] : 0.f;
  for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffff, s, o);
  return rsqrtf(s / hidden + 1e-6f);
}

// rmsnorm of bf16 rows of `hidden` elements (hidden = blockDim * U * 8): a block a row; with
// TENSORS == 2 the fused add (residual += x; x = norm(residual), both written in place). Weights
// ≈ 0.75 (bytes 0x3f), read from memory as a norm does.
template <int U, int LOAD, int STORE, int TENSORS>
__global__ void row_kernel(uint4* x, uint4* residual, uint4* out, const uint4* weight, int hidden) {
  const size_t row = blockIdx.x, row_vectors = hidden / 8;
  uint4 v[U];
  float ss[4] = {0, 0, 0, 0};
#pragma unroll
  for (int u = 0; u < U; ++u) {
    size_t i = row * row_vectors + u * blockDim.x + threadIdx.x;
    v[u] = load<LOAD>(x + i);
    if constexpr (TENSORS == 2) {
      uint4 r = load<LOAD>(residual + i);
      uint32_t* vw = &v[u].x;
      uint32_t* rw = &r.x;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        float2 a = bf2(vw[k]), b = bf2(rw[k]);
        vw[k] = pack(a.x + b.x, a.y + b.y);
      }
    }
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    add_squares(v[u], ss);
  }
  const float scale = row_scale(ss, hidden);
#pragma unroll
  for (int u = 0; u < U; ++u) {
    size_t col = u * blockDim.x + threadIdx.x, i = row * row_vectors + col;
    uint4 wv = __ldg(weight + col), y;
    uint32_t *vw = &v[u].x, *ww = &wv.x, *yw = &y.x;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      float2 a = bf2(vw[k]), g = bf2(ww[k]);
      yw[k] = pack(a.x * scale * g.x, a.y * scale * g.y);
    }
    if constexpr (TENSORS == 2) {
      store<STORE>(residual + i, v[u]);
      store<STORE>(x + i, y);
    } else {
      store<STORE>(out + i, y);
    }
  }
}

// The norm of row_kernel in two passes over the row (torch.compile's shape): pass 1 reads with
// FIRST (L2 evict_last) and only sums the squares, pass 2 reads the row again with SECOND and
// writes. TENSORS == 2, IN_PLACE: the fused add in place (x, residual); else out of place (the
// outputs in out and out1, as torch.compile writes new tensors).
template <int U, int FIRST, int SECOND, int TENSORS, bool IN_PLACE>
__global__ void twopass_kernel(uint4* x, uint4* residual, uint4* out, uint4* out1, const uint4* weight, int hidden) {
  const size_t row = blockIdx.x, row_vectors = hidden / 8;
  float ss[4] = {0, 0, 0, 0};
  auto row_value = [&](int u, auto loader) {
    size_t i = row * row_vectors + u * blockDim.x + threadIdx.x;
    uint4 v = loader(x + i);
    if constexpr (TENSORS == 2) {
      uint4 r = loader(residual + i);
      uint32_t *vw = &v.x, *rw = &r.x;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        float2 a = bf2(vw[k]), b = bf2(rw[k]);
        vw[k] = pack(a.x + b.x, a.y + b.y);
      }
    }
    return v;
  };
#pragma unroll
  for (int u = 0; u < U; ++u) {
    uint4 v = row_value(u, [](const uint4* p) { return load<FIRST>(p); });
    add_squares(v, ss);
  }
  const float scale = row_scale(ss, hidden);
#pragma unroll
  for (int u = 0; u < U; ++u) {
    uint4 v = row_value(u, [](const uint4* p) { return load<SECOND>(p); });
    size_t col = u * blockDim.x + threadIdx.x, i = row * row_vectors + col;
    uint4 wv = __ldg(weight + col), y;
    uint32_t *vw = &v.x, *ww = &wv.x, *yw = &y.x;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      float2 a = bf2(vw[k]), g = bf2(ww[k]);
      yw[k] = pack(a.x * scale * g.x, a.y * scale * g.y);
    }
    if constexpr (TENSORS == 2) {
      store<kStore>((IN_PLACE ? residual : out1) + i, v);
      store<kStore>((IN_PLACE ? x : out) + i, y);
    } else {
      store<kStore>(out + i, y);
    }
  }
}

struct Buffers {
  uint4 *a, *b, *c, *d, *w;
};

template <typename Launch>
static float time_graph(Launch launch) {
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (int i = 0; i < 3; ++i) launch(stream);
  CHECK(cudaStreamSynchronize(stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  const int per_graph = 20;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < per_graph; ++i) launch(stream);
  CHECK(cudaStreamEndCapture(stream, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphLaunch(exec, stream));
  CHECK(cudaStreamSynchronize(stream));
  std::vector<float> us;
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  for (int r = 0; r < 7; ++r) {
    CHECK(cudaEventRecord(start, stream));
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaEventRecord(stop, stream));
    CHECK(cudaEventSynchronize(stop));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    us.push_back(ms * 1e3f / per_graph);
  }
  CHECK(cudaGetLastError());
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaStreamDestroy(stream));
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

static int sms;

static void report(const char* kind, size_t rows, int hidden, int tensors, bool in_place, int vectors,
                   int load, int store, const char* grid, int block, float us) {
  double bytes = 2.0 * tensors * rows * hidden * 2;
  printf("%s,%zu,%d,%d,%s,%d,%s,%s,%s,%d,%.2f,%.3f\n", kind, rows, hidden, tensors, in_place ? "in_place" : "out",
         vectors, kLoadNames[load], kStoreNames[store], grid, block, us, bytes / us / 1e6);
  fflush(stdout);
}

template <int U, int LOAD, int STORE, int TENSORS>
static void copies(const Buffers& m, size_t rows, int hidden) {
  const size_t vectors = rows * hidden / 8;
  const int block = 256;
  const size_t tiles = (vectors + block * U - 1) / (block * U);
  for (int in_place = 0; in_place < 2; ++in_place) {
    uint4 *o0 = in_place ? m.a : m.c, *o1 = in_place ? m.b : m.d;
    for (int persistent = 0; persistent < 2; ++persistent) {
      unsigned grid = persistent ? std::min<size_t>(tiles, (size_t)sms * 8) : (unsigned)tiles;
      float us = time_graph([&](cudaStream_t s) {
        copy_kernel<U, LOAD, STORE, TENSORS><<<grid, block, 0, s>>>(m.a, m.b, o0, o1, vectors, persistent);
      });
      report("copy", rows, hidden, TENSORS, in_place, U, LOAD, STORE, persistent ? "persistent" : "tiles", block, us);
    }
  }
}

template <int U, int LOAD, int STORE, int TENSORS>
static void rows_norm(const Buffers& m, size_t rows, int hidden) {
  const int block = hidden / 8 / U;
  float us = time_graph([&](cudaStream_t s) {
    row_kernel<U, LOAD, STORE, TENSORS><<<(unsigned)rows, block, 0, s>>>(m.a, m.b, m.c, m.w, hidden);
  });
  report("rownorm", rows, hidden, TENSORS, TENSORS == 2, U, LOAD, STORE, "rows", block, us);
}

template <int U, int FIRST, int SECOND, int TENSORS, bool IN_PLACE>
static void two_pass(const Buffers& m, size_t rows, int hidden) {
  const int block = hidden / 8 / U;
  float us = time_graph([&](cudaStream_t s) {
    twopass_kernel<U, FIRST, SECOND, TENSORS, IN_PLACE><<<(unsigned)rows, block, 0, s>>>(m.a, m.b, m.c, m.d, m.w, hidden);
  });
  char kind[64];
  snprintf(kind, sizeof kind, "twopass_%s", kLoadNames[FIRST]);
  report(kind, rows, hidden, TENSORS, IN_PLACE, U, SECOND, kStore, "rows", block, us);
}

template <int U, int TENSORS, bool IN_PLACE>
static void two_pass_policies(const Buffers& m, size_t rows, int hidden) {
  if (hidden / 8 / U < 64 || hidden / 8 / U > 1024) return;
  two_pass<U, kEvictLast, kEvictFirst, TENSORS, IN_PLACE>(m, rows, hidden);
  two_pass<U, kEvictLast, kPlain, TENSORS, IN_PLACE>(m, rows, hidden);
  two_pass<U, kPlain, kPlain, TENSORS, IN_PLACE>(m, rows, hidden);
  two_pass<U, kPlain, kEvictFirst, TENSORS, IN_PLACE>(m, rows, hidden);
}

template <int U, int TENSORS>
static void every_policy(const Buffers& m, size_t rows, int hidden) {
  copies<U, kPlain, kStore, TENSORS>(m, rows, hidden);
  copies<U, kNc, kStore, TENSORS>(m, rows, hidden);
  copies<U, kNoAlloc, kStore, TENSORS>(m, rows, hidden);
  copies<U, kEvictFirst, kStore, TENSORS>(m, rows, hidden);
  copies<U, kPlain, kStreaming, TENSORS>(m, rows, hidden);
  copies<U, kNc, kStreaming, TENSORS>(m, rows, hidden);
  copies<U, kEvictFirst, kStreaming, TENSORS>(m, rows, hidden);
  if (hidden / 8 / U >= 64) {
    rows_norm<U, kPlain, kStore, TENSORS>(m, rows, hidden);
    rows_norm<U, kNc, kStore, TENSORS>(m, rows, hidden);
    rows_norm<U, kEvictFirst, kStore, TENSORS>(m, rows, hidden);
    rows_norm<U, kPlain, kStreaming, TENSORS>(m, rows, hidden);
    rows_norm<U, kEvictFirst, kStreaming, TENSORS>(m, rows, hidden);
  }
}

static bool wanted(int argc, char** argv, const char* kind) {
  if (argc < 2) return true;
  for (int i = 1; i < argc; ++i)
    if (!strcmp(argv[i], kind)) return true;
  return false;
}

int main(int argc, char** argv) {
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t most = (size_t)65536 * 8192 * 2;  // bytes of the largest tensor
  Buffers m;
  for (uint4** p : {&m.a, &m.b, &m.c, &m.d}) {
    CHECK(cudaMalloc(p, most));
    CHECK(cudaMemset(*p, 0x3c, most));  // bf16 ≈ 0.0115: finite, no NaN in the norms
  }
  CHECK(cudaMalloc(&m.w, 16384 * 2));
  CHECK(cudaMemset(m.w, 0x3f, 16384 * 2));
  printf("kind,rows,hidden,tensors,place,vectors,load,store,grid,block,us,tbps\n");
  const struct { size_t rows; int hidden; } shapes[] = {{65536, 4096}, {16384, 4096}, {65536, 8192}, {4096, 8192}, {4096, 4096}};
  for (auto shape : shapes) {
    if (wanted(argc, argv, "twopass")) {
      two_pass_policies<1, 2, true>(m, shape.rows, shape.hidden);
      two_pass_policies<1, 2, false>(m, shape.rows, shape.hidden);
      two_pass_policies<2, 2, true>(m, shape.rows, shape.hidden);
      two_pass_policies<2, 2, false>(m, shape.rows, shape.hidden);
      two_pass_policies<1, 1, false>(m, shape.rows, shape.hidden);
      two_pass_policies<2, 1, false>(m, shape.rows, shape.hidden);
    }
    if (!wanted(argc, argv, "copy") && !wanted(argc, argv, "rownorm")) continue;
    every_policy<1, 1>(m, shape.rows, shape.hidden);
    every_policy<2, 1>(m, shape.rows, shape.hidden);
    every_policy<4, 1>(m, shape.rows, shape.hidden);
    every_policy<8, 1>(m, shape.rows, shape.hidden);
    every_policy<1, 2>(m, shape.rows, shape.hidden);
    every_policy<2, 2>(m, shape.rows, shape.hidden);
    every_policy<4, 2>(m, shape.rows, shape.hidden);
  }
  return 0;
}
