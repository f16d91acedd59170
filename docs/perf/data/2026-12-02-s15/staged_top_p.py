"""Session 15: top-p sampling by the unstaged kernel (`top_p_sampling_from_probs`) against the
staged one (`top_k_top_p_sampling_from_probs` with top_k = vocab: the same rejection rounds on a
slice kept in shared memory), and top-k then top-p at k = 50, in one process. Checks first that
both kernels draw the same tokens. Timed as crates/ferrinfer-py/bench/ops.py (graph of 50 calls,
median of 15 replays). Usage: python3 staged_top_p.py --out staged.csv
"""
import argparse
import os
import sys

import torch

# Run from the repository root (or from here): the Python benchmark's timing.
sys.path[:0] = [os.path.join(os.getcwd(), "crates/ferrinfer-py/bench"),
                os.path.join(os.path.dirname(__file__), "../../../../crates/ferrinfer-py/bench")]
from ops import graph_us  # noqa: E402

import ferrinfer  # noqa: E402

TOP_P, SEED = 0.9, 7


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    rows = ["dtype,V,B,kernel,us"]
    torch.manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        for V in (32000, 128256):
            for B in (1, 64, 256):
                p = torch.softmax(torch.randn(B, V, device="cuda"), dim=-1).to(dtype)
                out = torch.empty(B, device="cuda", dtype=torch.int32)
                unstaged = lambda: ferrinfer.top_p_sampling_from_probs(p, TOP_P, SEED, 0, samples=out)  # noqa: E731
                staged = lambda: ferrinfer.top_k_top_p_sampling_from_probs(p, V, TOP_P, SEED, 0, samples=out)  # noqa: E731
                top_k_50 = lambda: ferrinfer.top_k_top_p_sampling_from_probs(p, 50, TOP_P, SEED, 0, samples=out)  # noqa: E731
                a = ferrinfer.top_p_sampling_from_probs(p, TOP_P, SEED, 0)
                b = ferrinfer.top_k_top_p_sampling_from_probs(p, V, TOP_P, SEED, 0)
                assert torch.equal(a, b), f"{dtype} {V} {B}: the kernels disagree"
                for name, fn in (("unstaged_top_p", unstaged), ("staged_top_p", staged), ("top_k50_top_p", top_k_50)):
                    us = graph_us(fn)
                    rows.append(f"{str(dtype).split('.')[-1]},{V},{B},{name},{us:.2f}")
                    print(rows[-1], flush=True)
    with open(args.out, "w") as f:
        f.write("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
