"""ferrinfer's Python module beside torch eager, torch.compile and FlashInfer, in one process on one
GPU, timed exactly as the team's peer benchmark (shared/peers/peers.py) times the peers.

Method (identical for every implementation, and to ferrinfer-bench's): 3 s of clock warm-up; per
case a CUDA graph of 50 calls, replayed 3 times untimed and 15 times timed; the figure is the
median replay time / 50, in µs. Bytes: every input read once, every output written once. Inputs
are random normal. ferrinfer runs on torch's current stream (the capture stream) through DLPack.

Output: CSV op,dtype,T,H,impl,us,tbps — the peers' columns, so scripts/perf/compare.py joins it
with any other run. impl is `ferrinfer-py` for this module (compare.py counts every impl starting
with "ferrinfer" as ours, and takes its ratio against the `ferrinfer` column when present).

Usage (GPU machine, wheel installed; FlashInfer optional — see docs/perf/README.md):
    python3 crates/ferrinfer-py/bench/norm.py --dtype bfloat16 --out norm-py.csv
"""
import argparse
import os
import statistics
import sys
import time

import torch

import ferrinfer

EPS = 1e-6


def graph_us(fn, n=50, reps=15):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(n):
            fn()
    for _ in range(3):
        graph.replay()
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e3 / n)
    return statistics.median(times)


def flashinfer_norm():
    """FlashInfer 0.7.2's norm module with its CuTe-DSL kernels, as the peer benchmark loads it."""
    try:
        import flashinfer.norm as norm
        import flashinfer.norm.kernels as kernels  # undo 0.7.2's fallback on a circular import

        for name in ("rmsnorm_cute", "qk_rmsnorm_cute", "rmsnorm_quant_cute", "fused_add_rmsnorm_cute",
                     "fused_add_rmsnorm_quant_cute", "layernorm_cute"):
            setattr(norm, name, getattr(kernels, name))
        norm._USE_CUDA_NORM = os.environ.get("FLASHINFER_USE_CUDA_NORM", "0") == "1"
        return norm
    except Exception as error:  # the peer is optional; say so
        print(f"# flashinfer unavailable: {error!r}", file=sys.stderr)
        return None


def rms(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * w.float()).to(x.dtype)


def fused_add(x, r, w):
    s = x.float() + r.float()
    return rms(s, w).to(x.dtype), s.to(x.dtype)


def warm_up_clocks(dtype):
    x = torch.randn(1 << 28, device="cuda", dtype=dtype)
    y = torch.empty_like(x)
    start = time.time()
    while time.time() - start < 3:
        y.copy_(x)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="also write the CSV here")
    parser.add_argument("--ops", default="rmsnorm,fused_add_rmsnorm")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    args = parser.parse_args()
    dtype, ops = getattr(torch, args.dtype), args.ops.split(",")
    torch.manual_seed(0)
    warm_up_clocks(dtype)
    fi = flashinfer_norm()
    compiled_rms, compiled_fused = torch.compile(rms), torch.compile(fused_add)
    size = torch.tensor([], dtype=dtype).element_size()
    rows = []

    def record(op, T, H, nbytes, impl, us):
        rows.append(f"{op},{args.dtype},{T},{H},{impl},{us:.3f},{nbytes / us / 1e6:.3f}")
        print(rows[-1], flush=True)

    for H in (4096, 8192):
        for T in (1, 16, 128, 1024, 4096, 16384, 65536):
            x, w = torch.randn(T, H, device="cuda", dtype=dtype), torch.randn(H, device="cuda", dtype=dtype)
            out, r = torch.empty_like(x), torch.randn_like(x)
            if "rmsnorm" in ops:
                nbytes = (2 * T * H + H) * size
                record("rmsnorm", T, H, nbytes, "torch_eager",
                       graph_us(lambda: torch.nn.functional.rms_norm(x, (H,), w, EPS)))
                compiled_rms(x, w)
                record("rmsnorm", T, H, nbytes, "torch_compile", graph_us(lambda: compiled_rms(x, w)))
                if fi:
                    record("rmsnorm", T, H, nbytes, "flashinfer", graph_us(lambda: fi.rmsnorm(x, w, EPS, out=out)))
                record("rmsnorm", T, H, nbytes, "ferrinfer-py", graph_us(lambda: ferrinfer.rmsnorm(x, w, EPS, out=out)))
            if "fused_add_rmsnorm" in ops:
                nbytes = (4 * T * H + H) * size
                compiled_fused(x, r, w)
                record("fused_add_rmsnorm", T, H, nbytes, "torch_compile", graph_us(lambda: compiled_fused(x, r, w)))
                if fi:
                    record("fused_add_rmsnorm", T, H, nbytes, "flashinfer",
                           graph_us(lambda: fi.fused_add_rmsnorm(x, r, w, EPS)))
                record("fused_add_rmsnorm", T, H, nbytes, "ferrinfer-py",
                       graph_us(lambda: ferrinfer.fused_add_rmsnorm(x, r, w, EPS)))
            del x, w, out, r
    if args.out:
        with open(args.out, "w") as f:
            f.write("op,dtype,T,H,impl,us,tbps\n" + "\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
