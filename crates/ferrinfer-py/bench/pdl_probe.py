"""Short calls with and without programmatic dependent launch: ferrinfer's Python module beside
FlashInfer, rmsnorm and fused_add_rmsnorm at T = 1, each timed as ops.py times it (graph replay
on the default stream) and replayed on a side stream, `enable_pdl` True and False, two passes.
Written to tell a kernel's own time from the launch chain's (docs/perf/norm.md v7).

Usage (GPU machine, wheel installed, FlashInfer importable: source .peers/b/install.sh):
    python3 crates/ferrinfer-py/bench/pdl_probe.py
Output lines: probe,<impl>,<H>,pdl=<bool>,default_stream=<µs>,side_stream=<µs>.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ferrinfer  # noqa: E402
from ops import EPS, flashinfer_ops, graph_us, warm_up_clocks  # noqa: E402


def side_stream_us(fn):
    with torch.cuda.stream(torch.cuda.Stream()):
        return graph_us(fn)


def main():
    warm_up_clocks(torch.bfloat16)
    fi, _ = flashinfer_ops()
    for H in (4096, 8192):
        x, w = torch.randn(1, H, device="cuda", dtype=torch.bfloat16), torch.randn(H, device="cuda", dtype=torch.bfloat16)
        out, r = torch.empty_like(x), torch.randn_like(x)
        impls = {"ferrinfer": lambda pdl: lambda: ferrinfer.rmsnorm(x, w, EPS, out=out, enable_pdl=pdl),
                 "ferrinfer-fused": lambda pdl: lambda: ferrinfer.fused_add_rmsnorm(x, r, w, EPS, enable_pdl=pdl)}
        if fi:
            impls["flashinfer"] = lambda pdl: lambda: fi.rmsnorm(x, w, EPS, out=out, enable_pdl=pdl)
            impls["flashinfer-fused"] = lambda pdl: lambda: fi.fused_add_rmsnorm(x, r, w, EPS, enable_pdl=pdl)
        for _ in range(2):
            for name, make in impls.items():
                for pdl in (True, False):
                    print(f"probe,{name},{H},pdl={pdl},default_stream={graph_us(make(pdl)):.3f},"
                          f"side_stream={side_stream_us(make(pdl)):.3f}", flush=True)


if __name__ == "__main__":
    main()
