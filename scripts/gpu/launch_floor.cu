// The driver's share of a launch: the host time of launching a do-nothing kernel, the floor
// under `ferrinfer-bench --mode eager` / `--mode issue` (docs/perf/norm.md, host path). The
// kernel takes a 160-byte struct by value, as ferrinfer's do, and waits on and releases its
// dependents as they do (griddepcontrol); launched three ways: <<<>>>, cudaLaunchKernelEx with no
// attribute, and with programmatic stream serialization (PDL, ferrinfer's default on sm_90).
// Modes as the bench's: `issue` = 256 launches on an idle stream, the enqueue alone, per call;
// `eager` = 2000 back-to-back launches then one sync, wall time per call. Median of 7. On the
// GPU machine: nvcc -O2 -arch=sm_90 -o /tmp/floor scripts/gpu/launch_floor.cu && /tmp/floor
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>

struct Params { unsigned long long words[20]; };

__global__ void chained(Params p) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;");
  if (p.words[0] == 42 && threadIdx.x == 1000) p.words[1] = 0;  // never: keeps p live
}

enum Way { CHEVRONS, EX_PLAIN, EX_PDL };

static void launch(Way way, cudaStream_t stream, const Params& p) {
  if (way == CHEVRONS) { chained<<<1, 128, 0, stream>>>(p); return; }
  cudaLaunchAttribute pdl{};
  pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  pdl.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(1); config.blockDim = dim3(128); config.stream = stream;
  config.attrs = &pdl; config.numAttrs = way == EX_PDL ? 1 : 0;
  cudaLaunchKernelEx(&config, chained, p);
}

static double per_call_us(Way way, cudaStream_t stream, int calls, bool issue_only) {
  Params p{};
  std::vector<double> times;
  for (int rep = 0; rep < 7; ++rep) {
    cudaStreamSynchronize(stream);
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) launch(way, stream, p);
    if (!issue_only) cudaStreamSynchronize(stream);
    auto end = std::chrono::steady_clock::now();
    times.push_back(std::chrono::duration<double, std::micro>(end - start).count() / calls);
  }
  cudaStreamSynchronize(stream);
  std::sort(times.begin(), times.end());
  return times[3];
}

int main() {
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  const char* names[] = {"chevrons", "launch_ex", "launch_ex_pdl"};
  for (int way = 0; way < 3; ++way) per_call_us(Way(way), stream, 2000, false);  // warm-up
  printf("way,mode,us_per_call\n");
  for (int way = 0; way < 3; ++way) {
    printf("%s,issue,%.3f\n", names[way], per_call_us(Way(way), stream, 256, true));
    printf("%s,eager,%.3f\n", names[way], per_call_us(Way(way), stream, 2000, false));
  }
  cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) { printf("error: %s\n", cudaGetErrorString(error)); return 1; }
  return 0;
}
