"""The H200's copy ceiling for the bandwidth targets: torch's device-to-device copy of a bf16
tensor (read once, written once, as a norm or activation moves its bytes), timed like the
benchmarks (a CUDA graph of back-to-back copies, CUDA events, median of repeats).
Prints CSV: rows,hidden,bytes_moved,us,tbps."""
import statistics

import torch

SHAPES = [(16384, 4096), (65536, 4096), (16384, 8192), (65536, 8192), (16384, 14336)]
COPIES_PER_GRAPH = 20


def time_copy(rows, hidden):
    x = torch.randn(rows, hidden, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(3):
            y.copy_(x)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(COPIES_PER_GRAPH):
            y.copy_(x)
    times = []
    for _ in range(7):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / COPIES_PER_GRAPH)
    us = statistics.median(times)
    moved = 2 * x.numel() * x.element_size()
    return moved, us, moved / us / 1e6


print("rows,hidden,bytes_moved,us,tbps")
for rows, hidden in SHAPES:
    moved, us, tbps = time_copy(rows, hidden)
    print(f"{rows},{hidden},{moved},{us:.2f},{tbps:.3f}")
