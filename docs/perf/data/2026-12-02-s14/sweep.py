"""Session 13: sampling_from_probs layouts (FERRINFER_SAMPLING_LAYOUT set by the caller), one
process per layout; graph replay timing as ops.py; prints CSV layout,op,dtype,V,B,us."""
import os, sys
sys.path.insert(0, "crates/ferrinfer-py/bench")
import torch
import ferrinfer
from ops import graph_us
layout = os.environ.get("FERRINFER_SAMPLING_LAYOUT", "*:*")
ops = sys.argv[1].split(",")
for dtype in (torch.float32, torch.bfloat16):
    for V in (32000, 128256):
        for B in (1, 64, 256, 1024):
            probs = torch.softmax(torch.randn(B, V, device="cuda"), dim=-1).to(dtype)
            out = torch.empty(B, dtype=torch.int32, device="cuda")
            for op in ops:
                f = getattr(ferrinfer, op)
                if op == "sampling_from_probs":
                    call = lambda: f(probs, 7, 0, samples=out)
                elif op == "min_p_sampling_from_probs":
                    call = lambda: f(probs, 0.1, 7, 0, samples=out)
                elif op == "top_p_sampling_from_probs":
                    call = lambda: f(probs, 0.9, 7, 0, samples=out)
                else:
                    call = lambda: f(probs, 50, 7, 0, samples=out)
                try:
                    us = graph_us(call)
                except Exception as e:  # a forced layout this launch cannot take
                    print(f"# {layout} {op} {V} {B}: {e}", file=sys.stderr); continue
                print(f"{layout},{op},{str(dtype)[6:]},{V},{B},{us:.3f}", flush=True)
