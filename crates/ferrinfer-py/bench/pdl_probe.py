"""Short calls with and without programmatic dependent launch: ferrinfer's Python module beside
FlashInfer, each case timed as ops.py times it (graph replay), `enable_pdl` True and False, over
several passes with the tensors allocated afresh each pass. Written to tell a kernel's own time
from the launch chain's, and to see whether the pass-to-pass scatter of one-wave calls follows
the tensors' addresses (docs/perf/norm.md v7, docs/perf/activation.md v3).

Usage (GPU machine, wheel installed, FlashInfer importable: source .peers/b/install.sh):
    python3 crates/ferrinfer-py/bench/pdl_probe.py [--cases rmsnorm:1:4096,silu_and_mul:128:4096] [--passes 4]
Output lines: probe,<op>,<T>,<H>,pass=<n>,<impl>,pdl=<bool>,<µs>,x%2MiB=<input address mod 2 MiB>.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ferrinfer  # noqa: E402
from ops import EPS, flashinfer_ops, graph_us, warm_up_clocks  # noqa: E402


def calls(op, T, H, norm_peer, activation_peer):
    """{impl: make(pdl) -> zero-argument call} for one case, on freshly allocated tensors."""
    bf16 = dict(device="cuda", dtype=torch.bfloat16)
    if op in ("rmsnorm", "fused_add_rmsnorm"):
        x, w, r = torch.randn(T, H, **bf16), torch.randn(H, **bf16), torch.randn(T, H, **bf16)
        out = torch.empty_like(x)
        if op == "rmsnorm":
            impls = {"ferrinfer": lambda pdl: lambda: ferrinfer.rmsnorm(x, w, EPS, out=out, enable_pdl=pdl),
                     "flashinfer": norm_peer and (lambda pdl: lambda: norm_peer.rmsnorm(x, w, EPS, out=out, enable_pdl=pdl))}
        else:
            impls = {"ferrinfer": lambda pdl: lambda: ferrinfer.fused_add_rmsnorm(x, r, w, EPS, enable_pdl=pdl),
                     "flashinfer": norm_peer and (lambda pdl: lambda: norm_peer.fused_add_rmsnorm(x, r, w, EPS, enable_pdl=pdl))}
    else:
        x, out = torch.randn(T, 2 * H, **bf16), torch.empty(T, H, **bf16)
        ours, theirs = getattr(ferrinfer, op), activation_peer and getattr(activation_peer, op)
        impls = {"ferrinfer": lambda pdl: lambda: ours(x, out=out, enable_pdl=pdl),
                 "flashinfer": theirs and (lambda pdl: lambda: theirs(x, out=out, enable_pdl=pdl))}
    return x, {name: make for name, make in impls.items() if make}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="rmsnorm:1:4096,rmsnorm:1:8192,fused_add_rmsnorm:1:4096")
    parser.add_argument("--passes", type=int, default=2)
    args = parser.parse_args()
    warm_up_clocks(torch.bfloat16)
    norm_peer, activation_peer = flashinfer_ops()
    for case in args.cases.split(","):
        op, T, H = case.split(":")
        for n in range(args.passes):
            x, impls = calls(op, int(T), int(H), norm_peer, activation_peer)
            for name, make in impls.items():
                for pdl in (True, False):
                    print(f"probe,{op},{T},{H},pass={n},{name},pdl={pdl},{graph_us(make(pdl)):.3f},"
                          f"x%2MiB={x.data_ptr() % (2 << 20)}", flush=True)
            del x, impls


if __name__ == "__main__":
    main()
