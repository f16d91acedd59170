"""One call of FlashInfer, of torch.compile (norm ops) and of ferrinfer's Python module per case,
each inside an NVTX range named `prof`, for Nsight Compute to profile side by side (suite step
`ncupeers`): the same tensors, the same stream, after warm-up calls outside the range (FlashInfer
compiles its CuTe-DSL kernels at first use, torch.compile its Triton kernels). A peer that cannot
be imported is left out, saying so.

Cases: op:T:H, op one of rmsnorm, fused_add_rmsnorm, silu_and_mul (H is d, the output width),
merge_state, merge_state_in_place (T rows of 32 heads: seq = T / 32; H is head_dim),
top_k_mask_logits, top_k_renorm_probs (T rows of a vocabulary of H, k = 50, ops.py's inputs).
"""
import sys

import torch

import ferrinfer
from ops import CASCADE_HEADS, TOP_K, flashinfer_module, flashinfer_ops, fused_add, rms

EPS = 1e-6


def cascade_calls(op, T, H, dtype):
    fi = flashinfer_module("cascade")
    seq = T // CASCADE_HEADS
    v_a, v_b = (torch.randn(seq, CASCADE_HEADS, H, device="cuda", dtype=dtype) for _ in range(2))
    s_a, s_b = (torch.randn(seq, CASCADE_HEADS, device="cuda") * 4 for _ in range(2))
    if op == "merge_state":
        v_out, s_out = torch.empty_like(v_a), torch.empty_like(s_a)
        return {"flashinfer": lambda: fi.merge_state(v_a, s_a, v_b, s_b),
                "ferrinfer": lambda: ferrinfer.merge_state(v_a, s_a, v_b, s_b, v_merged=v_out, s_merged=s_out)}
    return {"flashinfer": lambda: fi.merge_state_in_place(v_a, s_a, v_b, s_b),
            "ferrinfer": lambda: ferrinfer.merge_state_in_place(v_a, s_a, v_b, s_b)}


def top_k_calls(op, T, H, dtype):
    fi = flashinfer_module("sampling")
    if op == "top_k_mask_logits":
        x = torch.randn(T, H, device="cuda", dtype=dtype)
    else:
        x = torch.softmax(torch.randn(T, H, device="cuda"), dim=-1).to(dtype)
    out = torch.empty_like(x)
    return {"flashinfer": fi and (lambda: getattr(fi, op)(x, TOP_K)),
            "ferrinfer": lambda: getattr(ferrinfer, op)(x, TOP_K, out=out)}


def calls(op, T, H, fi_norm, fi_activation):
    dtype = torch.bfloat16
    if op.startswith("merge_state"):
        return cascade_calls(op, T, H, dtype)
    if op.startswith("top_k_"):
        return top_k_calls(op, T, H, dtype)
    if op == "silu_and_mul":
        x, out = torch.randn(T, 2 * H, device="cuda", dtype=dtype), torch.empty(T, H, device="cuda", dtype=dtype)
        return {"flashinfer": lambda: fi_activation.silu_and_mul(x, out=out),
                "ferrinfer": lambda: ferrinfer.silu_and_mul(x, out=out)}
    x, w = torch.randn(T, H, device="cuda", dtype=dtype), torch.randn(H, device="cuda", dtype=dtype)
    out, r = torch.empty_like(x), torch.randn_like(x)
    if op == "rmsnorm":
        compiled = torch.compile(rms)
        return {"flashinfer": fi_norm and (lambda: fi_norm.rmsnorm(x, w, EPS, out=out)),
                "torch_compile": lambda: compiled(x, w),
                "ferrinfer": lambda: ferrinfer.rmsnorm(x, w, EPS, out=out)}
    compiled = torch.compile(fused_add)
    return {"flashinfer": fi_norm and (lambda: fi_norm.fused_add_rmsnorm(x, r, w, EPS)),
            "torch_compile": lambda: compiled(x, r, w),
            "ferrinfer": lambda: ferrinfer.fused_add_rmsnorm(x, r, w, EPS)}


def main():
    fi_norm, fi_activation = flashinfer_ops()
    for case in sys.argv[1:]:
        op, T, H = case.split(":")
        for impl, call in calls(op, int(T), int(H), fi_norm, fi_activation).items():
            if call is None:
                print(f"# {impl} unavailable: {case} not profiled", flush=True)
                continue
            for _ in range(3):
                call()
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_push("prof")
            call()
            torch.cuda.nvtx.range_pop()
            torch.cuda.synchronize()
            print(f"# profiled {impl} {case}", flush=True)


if __name__ == "__main__":
    main()
