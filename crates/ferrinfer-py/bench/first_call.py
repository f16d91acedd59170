"""First-call latency of the Python module on a CUDA tensor: `import ferrinfer`, then the first
rmsnorm (finding the kernel module, loading it onto the device, launching), then the second.
Run with FERRINFER_JIT_VERBOSE=1 to see where the module came from (`Embedded` for the GPU
wheel), and with CUDA_CACHE_DISABLE=1 for a cold driver cache (a cubin needs no PTX compilation).

    python3 crates/ferrinfer-py/bench/first_call.py
"""
import time

import torch


def synced(f):
    start = time.perf_counter()
    f()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3


def main():
    x = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.ones(4096, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    start = time.perf_counter()
    import ferrinfer

    imported = (time.perf_counter() - start) * 1e3
    first = synced(lambda: ferrinfer.rmsnorm(x, w))
    second = synced(lambda: ferrinfer.rmsnorm(x, w))
    print(f"import {imported:.1f} ms, first rmsnorm {first:.1f} ms, second {second:.3f} ms")


if __name__ == "__main__":
    main()
