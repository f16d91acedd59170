// The fixtures of crates/ferrinfer-kernels/src/random.rs: cuRAND's Philox4_32_10 stream for a few
// (seed, subsequence, offset), six curand() and six curand_uniform() each. On the GPU machine:
//   nvcc -O2 -arch=sm_90 -o /tmp/draws scripts/gpu/curand_philox_draws.cu && /tmp/draws
// (output of 2026-12-01, H200: docs/perf/data/2026-12-01-v7/curand-philox-draws.txt).
#include <cstdio>
#include <cstring>
#include <curand_kernel.h>
struct Case { unsigned long long seed, subsequence, offset; };
__global__ void draw(const Case* cases, int n, unsigned* raw, float* uni) {
  int i = threadIdx.x;
  if (i >= n) return;
  curandStatePhilox4_32_10_t s;
  curand_init(cases[i].seed, cases[i].subsequence, cases[i].offset, &s);
  for (int k = 0; k < 6; ++k) raw[i * 6 + k] = curand(&s);
  curand_init(cases[i].seed, cases[i].subsequence, cases[i].offset, &s);
  for (int k = 0; k < 6; ++k) uni[i * 6 + k] = curand_uniform(&s);
}
int main() {
  Case h[] = {{0, 0, 0}, {42, 0, 0}, {42, 7, 0}, {42, 7, 5}, {0x123456789abcdefULL, 3, 4},
              {0xffffffffffffffffULL, 0xffffffffULL, 0xfffffffffffffffeULL}, {1234, 100000, 1ULL << 33}};
  int n = sizeof(h) / sizeof(h[0]);
  Case* d; unsigned* raw; float* uni;
  cudaMalloc(&d, sizeof(h)); cudaMalloc(&raw, n * 6 * 4); cudaMalloc(&uni, n * 6 * 4);
  cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice);
  draw<<<1, 32>>>(d, n, raw, uni);
  unsigned r[64 * 6]; float u[64 * 6];
  cudaMemcpy(r, raw, n * 6 * 4, cudaMemcpyDeviceToHost); cudaMemcpy(u, uni, n * 6 * 4, cudaMemcpyDeviceToHost);
  for (int i = 0; i < n; ++i) {
    printf("case seed=%#llx subsequence=%#llx offset=%#llx\n  raw", h[i].seed, h[i].subsequence, h[i].offset);
    for (int k = 0; k < 6; ++k) printf(" %#010x", r[i * 6 + k]);
    printf("\n  uniform");
    for (int k = 0; k < 6; ++k) { unsigned b; memcpy(&b, &u[i * 6 + k], 4); printf(" %.9g(%#010x)", u[i * 6 + k], b); }
    printf("\n");
  }
  return 0;
}
