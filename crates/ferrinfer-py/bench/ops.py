"""ferrinfer's Python module beside torch eager, torch.compile and FlashInfer, in one process on one
GPU, timed exactly as the team's peer benchmark (`<shared>/peers/peers.py`) times the peers.

Method (identical for every implementation, and to ferrinfer-bench's): 3 s of clock warm-up; per
case a CUDA graph of 50 calls, replayed 3 times untimed and 15 times timed; the figure is the
median replay time / 50, in µs. Bytes: every input read once, every output written once. Inputs
are random normal. ferrinfer runs on torch's current stream (the capture stream).

Families: `norm` (rmsnorm, fused_add_rmsnorm over H ∈ {4096, 8192} × T ∈ {1, …, 65536}; with
`--grid wide`, H from 64 to 16384, odd widths included, and H = 128 over 221184 rows),
`activation` (silu/gelu/gelu_tanh_and_mul over d ∈ {4096, 11008, 14336} × T ∈ {1, …, 16384}) and
`sampling` (softmax, top_k_mask_logits and top_k_renorm_probs with k = 50, top_p_renorm_probs with
p = 0.9, and the sampling ops — sampling_from_probs, top_k_/top_p_/min_p_sampling_from_probs,
top_k_top_p_sampling_from_probs/_logits with k = 50, p = 0.9, min_p = 0.1, seed 7 and offset 0
for FlashInfer and ferrinfer, torch's `multinomial` over its filtered probabilities — over
vocabularies of 32000 and 128256 × batches
of 1, 64, 256; `H` is the vocabulary, `T` the batch; FlashInfer's sampling functions return a new
tensor — softmax's logits converted to f32 first —, as its API does; the renorms' and sampling
ops' input is a softmax's probabilities in the run's dtype), and `cascade` (merge_state,
merge_state_in_place: two attention states of 32 heads × head_dim 128 over seq ∈ {1, 128, 2048,
16384}, values in the run's dtype, f32 scores; merge_states: three states stacked a position,
`[seq, 3, 32, 128]`, and `merge_states_2` — two, only when `--ops` names it; `T` is seq · 32
rows, `H` the head_dim), and `rope`
(apply_rope_pos_ids and its in-place form, apply_rope over a ragged batch of requests of 128
tokens — one request below 128 —, and apply_rope_with_cos_sin_cache and its in-place form —
vLLM's flattened heads, int64 positions uniform over a cos/sin cache of 8192 rows of 128 in f32
(the Rust bench's table; bytes count one cache row a token, at most the cache) —: q of 32 heads
and k of 8, head_dim 128, int32 positions but the cache ops', NeoX pairs, over tokens ∈ {1, 128,
2048, 16384}; `T` is the tokens, `H` the head_dim), and `page` (append_paged_kv_cache: {1, 128,
2048} tokens for each of 64 sequences holding 100 entries before, keys and values of 8 heads ×
head_dim 128 into NHD caches of 16-entry pages in random order, a (k, v) pair, int32 page tables;
torch's peer computes each token's page and entry and writes by index; `T` is the tokens, `H`
the head_dim; bytes: keys and values read once and written once), and `decode`
(BatchDecodeWithPagedKVCacheWrapper's `run`, planned once: ours, FlashInfer's CUDA-core and
tensor-core paths, `flashinfer` and `flashinfer_tc`, and torch's SDPA over each request's keys
gathered from the cache; 8 kv heads, `--decode-shape head_dim,group,page_size` (default
128,4,16), pages in random order, over DECODE_GRID's batches: 1, 16 and 64 × 4096 keys, 128 ×
1024, 64 × 16384 and 1 × 32768 + 63 × 512; `T` is the batch, `H` the keys summed over it;
bytes: keys and values read once, the query and the output once; each output's largest
difference from torch's printed; with --eager, `plan`'s host cost instead).
`--eager` instead times the host path: the wall time per call of 2000 back-to-back calls outside
any graph (T = 1), what eager PyTorch pays per op.

Output: CSV op,dtype,T,H,impl,us,tbps — the peers' columns (impl `ferrinfer-py` for this module;
`*_eager` rows for --eager), so scripts/perf/compare.py joins it with any other run.

Usage (GPU machine, wheel installed; FlashInfer optional — see docs/perf/README.md):
    python3 crates/ferrinfer-py/bench/ops.py --family norm --dtype bfloat16 --out norm-py.csv
"""
import argparse
import importlib
import itertools
import os
import statistics
import sys
import time

import torch

import ferrinfer

EPS = 1e-6
NORM_GRID = [(H, T) for H in (4096, 8192) for T in (1, 16, 128, 1024, 4096, 16384, 65536)]
# `--grid wide`: the norm issue's own grid, H from 64 to 16384 — odd widths (no 16-byte vectors:
# 4095, 1001), widths no power of two (200, 3000, 5120, 12288) — at a token, a batch and a
# prefill, and a per-head norm (H = 128 over 221184 rows: 32 heads × 6912 tokens).
NORM_WIDE_GRID = [(H, T) for H in (64, 128, 200, 256, 1001, 1024, 2048, 3000, 4095, 4096, 5120, 8192, 12288, 16384)
                  for T in (1, 128, 4096)] + [(128, 221184)]
ACTIVATION_GRID = [(D, T) for D in (4096, 11008, 14336) for T in (1, 16, 128, 1024, 4096, 16384)]
SAMPLING_GRID = [(V, B) for V in (32000, 128256) for B in (1, 64, 256)]
CASCADE_HEADS = 32
CASCADE_GRID = [(128, seq * CASCADE_HEADS) for seq in (1, 128, 2048, 16384)]
MERGE_STATES = 3  # merge_states' states a row, as the Rust bench's (`op::STACKED_STATES`)
ROPE_Q_HEADS, ROPE_K_HEADS = 32, 8
ROPE_GRID = [(128, T) for T in (1, 128, 2048, 16384)]
ROPE_CACHE_ROWS = 8192
PAGE_SEQUENCES, PAGE_PREFIX, PAGE_SIZE, PAGE_KV_HEADS = 64, 100, 16, 8
PAGE_GRID = [(128, PAGE_SEQUENCES * n) for n in (1, 128, 2048)]
TEMPERATURE = 0.7
TOP_K = 50
TOP_P = 0.9
MIN_P = 0.1
SEED = 7


def flashinfer_module(name):
    """FlashInfer 0.7.2's module `name` (`sampling`, `cascade`, `rope`: CUDA, built by the GPU
    machine's nvcc at first use); None where unavailable, saying why."""
    try:
        return importlib.import_module(f"flashinfer.{name}")
    except Exception as error:
        print(f"# flashinfer {name} unavailable: {error!r}", file=sys.stderr)
        return None


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


def eager_us(fn, calls=2000, reps=7):
    """Wall time per call of `calls` back-to-back calls, then one sync: the host path's cost."""
    for _ in range(100):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e6 / calls)
    return statistics.median(times)


def flashinfer_ops():
    """FlashInfer 0.7.2's norm (CuTe-DSL kernels, as the peer benchmark loads them) and activation
    (CUDA, built by the GPU machine's nvcc at first use) modules; None where unavailable."""
    norm = activation = None
    try:
        import flashinfer.norm as norm
        import flashinfer.norm.kernels as kernels  # undo 0.7.2's fallback on a circular import

        for name in ("rmsnorm_cute", "qk_rmsnorm_cute", "rmsnorm_quant_cute", "fused_add_rmsnorm_cute",
                     "fused_add_rmsnorm_quant_cute", "layernorm_cute"):
            setattr(norm, name, getattr(kernels, name))
        norm._USE_CUDA_NORM = os.environ.get("FLASHINFER_USE_CUDA_NORM", "0") == "1"
    except Exception as error:  # the peer is optional; say so
        print(f"# flashinfer norm unavailable: {error!r}", file=sys.stderr)
        norm = None
    try:
        import flashinfer.activation as activation
    except Exception as error:
        print(f"# flashinfer activation unavailable: {error!r}", file=sys.stderr)
    return norm, activation


def rms(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * w.float()).to(x.dtype)


def fused_add(x, r, w):
    s = x.float() + r.float()
    return rms(s, w).to(x.dtype), s.to(x.dtype)


def gated(act):
    def f(x):
        d = x.shape[-1] // 2
        return (act(x[..., :d].float()) * x[..., d:].float()).to(x.dtype)
    return f


TORCH_ACTIVATIONS = {
    "silu_and_mul": gated(torch.nn.functional.silu),
    "gelu_and_mul": gated(torch.nn.functional.gelu),
    "gelu_tanh_and_mul": gated(lambda v: torch.nn.functional.gelu(v, approximate="tanh")),
}


def warm_up_clocks(dtype):
    x = torch.randn(1 << 28, device="cuda", dtype=dtype)
    y = torch.empty_like(x)
    start = time.time()
    while time.time() - start < 3:
        y.copy_(x)


class Recorder:
    def __init__(self, dtype_name):
        self.dtype_name, self.rows = dtype_name, []

    def __call__(self, op, T, H, nbytes, impl, us):
        self.rows.append(f"{op},{self.dtype_name},{T},{H},{impl},{us:.3f},{nbytes / us / 1e6:.3f}")
        print(self.rows[-1], flush=True)


def peer_record(record, op, T, H, nbytes, impl, time_fn, fn):
    """A peer's row, or a note that it cannot run this shape (FlashInfer's norms at odd widths)."""
    try:
        record(op, T, H, nbytes, impl, time_fn(fn))
    except Exception as error:
        print(f"# {impl} {op} T={T} H={H} not timed: {type(error).__name__}: {str(error)[:160]}", file=sys.stderr)


def norm_cases(record, dtype, ops, fi, time_fn, impl_suffix, grid):
    for limit in ("cache_size_limit", "recompile_limit"):  # the wide grid's many widths: no eager fallback
        if hasattr(torch._dynamo.config, limit):
            setattr(torch._dynamo.config, limit, max(getattr(torch._dynamo.config, limit), 64))
    compiled_rms, compiled_fused = torch.compile(rms), torch.compile(fused_add)
    size = torch.tensor([], dtype=dtype).element_size()
    for H, T in grid:
        x, w = torch.randn(T, H, device="cuda", dtype=dtype), torch.randn(H, device="cuda", dtype=dtype)
        out, r = torch.empty_like(x), torch.randn_like(x)
        if "rmsnorm" in ops:
            nbytes = (2 * T * H + H) * size
            record("rmsnorm", T, H, nbytes, "torch_eager" + impl_suffix,
                   time_fn(lambda: torch.nn.functional.rms_norm(x, (H,), w, EPS)))
            compiled_rms(x, w)
            record("rmsnorm", T, H, nbytes, "torch_compile" + impl_suffix, time_fn(lambda: compiled_rms(x, w)))
            if fi:
                peer_record(record, "rmsnorm", T, H, nbytes, "flashinfer" + impl_suffix, time_fn,
                            lambda: fi.rmsnorm(x, w, EPS, out=out))
            record("rmsnorm", T, H, nbytes, "ferrinfer-py" + impl_suffix,
                   time_fn(lambda: ferrinfer.rmsnorm(x, w, EPS, out=out)))
        if "fused_add_rmsnorm" in ops:
            nbytes = (4 * T * H + H) * size
            compiled_fused(x, r, w)
            record("fused_add_rmsnorm", T, H, nbytes, "torch_compile" + impl_suffix, time_fn(lambda: compiled_fused(x, r, w)))
            if fi:
                peer_record(record, "fused_add_rmsnorm", T, H, nbytes, "flashinfer" + impl_suffix, time_fn,
                            lambda: fi.fused_add_rmsnorm(x, r, w, EPS))
            record("fused_add_rmsnorm", T, H, nbytes, "ferrinfer-py" + impl_suffix,
                   time_fn(lambda: ferrinfer.fused_add_rmsnorm(x, r, w, EPS)))
        del x, w, out, r


def activation_cases(record, dtype, ops, fi, time_fn, impl_suffix, grid):
    size = torch.tensor([], dtype=dtype).element_size()
    for op in ops:
        eager, compiled = TORCH_ACTIVATIONS[op], torch.compile(TORCH_ACTIVATIONS[op])
        ours, theirs = getattr(ferrinfer, op), getattr(fi, op, None) if fi else None
        for D, T in grid:
            x, out = torch.randn(T, 2 * D, device="cuda", dtype=dtype), torch.empty(T, D, device="cuda", dtype=dtype)
            nbytes = 3 * T * D * size
            record(op, T, D, nbytes, "torch_eager" + impl_suffix, time_fn(lambda: eager(x)))
            compiled(x)
            record(op, T, D, nbytes, "torch_compile" + impl_suffix, time_fn(lambda: compiled(x)))
            if theirs:
                record(op, T, D, nbytes, "flashinfer" + impl_suffix, time_fn(lambda: theirs(x, out=out)))
            record(op, T, D, nbytes, "ferrinfer-py" + impl_suffix, time_fn(lambda: ours(x, out=out)))
            del x, out


def merge_state_torch(v_a, s_a, v_b, s_b):
    """The merge in torch: weights 2^(s − max), the weighted mean of the values, log2 of the sum."""
    m = torch.maximum(s_a, s_b)
    w_a, w_b = torch.exp2(s_a - m), torch.exp2(s_b - m)
    total = w_a + w_b
    v = (w_a[..., None] * v_a.float() + w_b[..., None] * v_b.float()) / total[..., None]
    return v.to(v_a.dtype), torch.log2(total) + m


def merge_states_torch(v, s):
    """merge_states in torch: `v` [seq, states, heads, D], `s` [seq, states, heads]."""
    m = s.max(dim=1, keepdim=True).values
    w = torch.exp2(s - m)
    total = w.sum(dim=1)
    merged = (w[..., None] * v.float()).sum(dim=1) / total[..., None]
    return merged.to(v.dtype), torch.log2(total) + m[:, 0]


def cascade_cases(record, dtype, ops, fi, time_fn, impl_suffix, grid):
    size = torch.tensor([], dtype=dtype).element_size()
    compiled = torch.compile(merge_state_torch)
    compiled_states = torch.compile(merge_states_torch)
    for D, T in grid:
        seq = T // CASCADE_HEADS
        v_a, v_b = (torch.randn(seq, CASCADE_HEADS, D, device="cuda", dtype=dtype) for _ in range(2))
        s_a, s_b = (torch.randn(seq, CASCADE_HEADS, device="cuda", dtype=torch.float32) * 4 for _ in range(2))
        nbytes = 3 * T * D * size + 3 * T * 4
        if "merge_state" in ops:
            v_out, s_out = torch.empty_like(v_a), torch.empty_like(s_a)
            record("merge_state", T, D, nbytes, "torch_eager" + impl_suffix, time_fn(lambda: merge_state_torch(v_a, s_a, v_b, s_b)))
            compiled(v_a, s_a, v_b, s_b)
            record("merge_state", T, D, nbytes, "torch_compile" + impl_suffix, time_fn(lambda: compiled(v_a, s_a, v_b, s_b)))
            if fi:
                record("merge_state", T, D, nbytes, "flashinfer" + impl_suffix, time_fn(lambda: fi.merge_state(v_a, s_a, v_b, s_b)))
            record("merge_state", T, D, nbytes, "ferrinfer-py" + impl_suffix,
                   time_fn(lambda: ferrinfer.merge_state(v_a, s_a, v_b, s_b, v_merged=v_out, s_merged=s_out)))
        if "merge_state_in_place" in ops:
            # Repeated merges into one state: the values change, the work does not.
            if fi:
                record("merge_state_in_place", T, D, nbytes, "flashinfer" + impl_suffix,
                       time_fn(lambda: fi.merge_state_in_place(v_a, s_a, v_b, s_b)))
            record("merge_state_in_place", T, D, nbytes, "ferrinfer-py" + impl_suffix,
                   time_fn(lambda: ferrinfer.merge_state_in_place(v_a, s_a, v_b, s_b)))
        # MERGE_STATES states a (position, head), stacked on the second dimension; or two
        # (`merge_states_2`, not in the default ops: the launcher's two-state route with heads).
        for op, n in [("merge_states", MERGE_STATES), ("merge_states_2", 2)]:
            if op not in ops:
                continue
            v = torch.randn(seq, n, CASCADE_HEADS, D, device="cuda", dtype=dtype)
            s = torch.randn(seq, n, CASCADE_HEADS, device="cuda", dtype=torch.float32) * 4
            v_out, s_out = torch.empty_like(v_a), torch.empty_like(s_a)
            nbytes_states = (n + 1) * T * (D * size + 4)
            record(op, T, D, nbytes_states, "torch_eager" + impl_suffix, time_fn(lambda: merge_states_torch(v, s)))
            compiled_states(v, s)
            record(op, T, D, nbytes_states, "torch_compile" + impl_suffix, time_fn(lambda: compiled_states(v, s)))
            if fi:
                record(op, T, D, nbytes_states, "flashinfer" + impl_suffix, time_fn(lambda: fi.merge_states(v, s)))
            record(op, T, D, nbytes_states, "ferrinfer-py" + impl_suffix,
                   time_fn(lambda: ferrinfer.merge_states(v, s, v_merged=v_out, s_merged=s_out)))
            del v, s
        del v_a, v_b, s_a, s_b


def rope_torch(q, k, pos_ids, theta=1e4):
    """NeoX rope in torch, f32 math: pair (i, i + D/2) turned by pos · theta^(−2i/D)."""
    half = q.shape[-1] // 2
    inv_freq = theta ** (-torch.arange(0, half, device=q.device, dtype=torch.float32) * 2 / q.shape[-1])
    angles = pos_ids.float()[:, None] * inv_freq[None, :]
    cos, sin = angles.cos()[:, None, :], angles.sin()[:, None, :]

    def turn(x):
        x1, x2 = x[..., :half].float(), x[..., half:].float()
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)

    return turn(q), turn(k)


def rope_cache_torch(positions, query, key, head_size, cache):
    """vLLM's native rope with a cos/sin cache (NeoX pairs), f32 math, heads flattened."""
    half = cache.shape[-1] // 2
    cos, sin = cache[positions].chunk(2, dim=-1)
    cos, sin = cos[:, None, :], sin[:, None, :]

    def turn(x):
        heads = x.view(x.shape[0], -1, head_size)
        x1, x2 = heads[..., :half].float(), heads[..., half:2 * half].float()
        turned = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)
        return torch.cat([turned, heads[..., 2 * half:]], dim=-1).view(x.shape)

    return turn(query), turn(key)


def rope_cache_cases(record, dtype, ops, fi, time_fn, impl_suffix, grid):
    """apply_rope_with_cos_sin_cache (and in place) beside FlashInfer and torch."""
    size = torch.tensor([], dtype=dtype).element_size()
    compiled = torch.compile(rope_cache_torch)
    for D, T in grid:
        query = torch.randn(T, ROPE_Q_HEADS * D, device="cuda", dtype=dtype)
        key = torch.randn(T, ROPE_K_HEADS * D, device="cuda", dtype=dtype)
        # Cosines and sines of real angles: repeated in-place turns keep the values' size.
        angles = torch.rand(ROPE_CACHE_ROWS, D // 2, device="cuda") * 1e3
        cache = torch.cat([angles.cos(), angles.sin()], dim=-1)
        pos = torch.randint(0, ROPE_CACHE_ROWS, (T,), device="cuda", dtype=torch.int64)
        q_out, k_out = torch.empty_like(query), torch.empty_like(key)
        nbytes = 2 * (query.numel() + key.numel()) * size + 8 * T + 4 * D * min(T, ROPE_CACHE_ROWS)
        if "apply_rope_with_cos_sin_cache" in ops:
            op = "apply_rope_with_cos_sin_cache"
            call = (pos, query, key, D, cache)
            record(op, T, D, nbytes, "torch_eager" + impl_suffix, time_fn(lambda: rope_cache_torch(*call)))
            compiled(*call)
            record(op, T, D, nbytes, "torch_compile" + impl_suffix, time_fn(lambda: compiled(*call)))
            if fi:
                try:
                    fi.apply_rope_with_cos_sin_cache(*call, True)
                    record(op, T, D, nbytes, "flashinfer" + impl_suffix,
                           time_fn(lambda: fi.apply_rope_with_cos_sin_cache(*call, True)))
                except Exception as error:
                    print(f"# flashinfer {op} failed: {error!r}", file=sys.stderr)
            record(op, T, D, nbytes, "ferrinfer-py" + impl_suffix,
                   time_fn(lambda: ferrinfer.apply_rope_with_cos_sin_cache(*call, True, query_out=q_out, key_out=k_out)))
        if "apply_rope_with_cos_sin_cache_inplace" in ops:
            op = "apply_rope_with_cos_sin_cache_inplace"
            if fi:
                try:
                    fi.apply_rope_with_cos_sin_cache_inplace(pos, query, key, D, cache, True)
                    record(op, T, D, nbytes, "flashinfer" + impl_suffix,
                           time_fn(lambda: fi.apply_rope_with_cos_sin_cache_inplace(pos, query, key, D, cache, True)))
                except Exception as error:
                    print(f"# flashinfer {op} failed: {error!r}", file=sys.stderr)
            record(op, T, D, nbytes, "ferrinfer-py" + impl_suffix,
                   time_fn(lambda: ferrinfer.apply_rope_with_cos_sin_cache_inplace(pos, query, key, D, cache, True)))
        del query, key, q_out, k_out, pos, cache


def rope_cases(record, dtype, ops, fi, time_fn, impl_suffix, grid):
    size = torch.tensor([], dtype=dtype).element_size()
    compiled = torch.compile(rope_torch)
    for D, T in grid:
        q = torch.randn(T, ROPE_Q_HEADS, D, device="cuda", dtype=dtype)
        k = torch.randn(T, ROPE_K_HEADS, D, device="cuda", dtype=dtype)
        pos = torch.randint(0, 32768, (T,), device="cuda", dtype=torch.int32)
        q_out, k_out = torch.empty_like(q), torch.empty_like(k)
        nbytes = 2 * (q.numel() + k.numel()) * size + 4 * T
        if "apply_rope_pos_ids" in ops:
            op = "apply_rope_pos_ids"
            record(op, T, D, nbytes, "torch_eager" + impl_suffix, time_fn(lambda: rope_torch(q, k, pos)))
            compiled(q, k, pos)
            record(op, T, D, nbytes, "torch_compile" + impl_suffix, time_fn(lambda: compiled(q, k, pos)))
            if fi:
                try:
                    fi.apply_rope_pos_ids(q, k, pos)
                    record(op, T, D, nbytes, "flashinfer" + impl_suffix, time_fn(lambda: fi.apply_rope_pos_ids(q, k, pos)))
                except Exception as error:
                    print(f"# flashinfer {op} failed: {error!r}", file=sys.stderr)
            record(op, T, D, nbytes, "ferrinfer-py" + impl_suffix,
                   time_fn(lambda: ferrinfer.apply_rope_pos_ids(q, k, pos, q_rope=q_out, k_rope=k_out)))
        if "apply_rope" in ops:
            op = "apply_rope"
            requests = max(1, T // 128)
            indptr = torch.linspace(0, T, requests + 1, device="cuda").round().to(torch.int32)
            offsets = torch.randint(0, 32768, (requests,), device="cuda", dtype=torch.int32)
            nbytes_ragged = 2 * (q.numel() + k.numel()) * size + 8 * requests
            if fi:
                try:
                    fi.apply_rope(q, k, indptr, offsets)
                    record(op, T, D, nbytes_ragged, "flashinfer" + impl_suffix,
                           time_fn(lambda: fi.apply_rope(q, k, indptr, offsets)))
                except Exception as error:
                    print(f"# flashinfer {op} failed: {error!r}", file=sys.stderr)
            record(op, T, D, nbytes_ragged, "ferrinfer-py" + impl_suffix,
                   time_fn(lambda: ferrinfer.apply_rope(q, k, indptr, offsets, q_rope=q_out, k_rope=k_out)))
        if "apply_rope_pos_ids_inplace" in ops:
            # Repeated turns of the same tensors: the values change, the work does not.
            op = "apply_rope_pos_ids_inplace"
            if fi:
                try:
                    fi.apply_rope_pos_ids_inplace(q, k, pos)
                    record(op, T, D, nbytes, "flashinfer" + impl_suffix,
                           time_fn(lambda: fi.apply_rope_pos_ids_inplace(q, k, pos)))
                except Exception as error:
                    print(f"# flashinfer {op} failed: {error!r}", file=sys.stderr)
            record(op, T, D, nbytes, "ferrinfer-py" + impl_suffix,
                   time_fn(lambda: ferrinfer.apply_rope_pos_ids_inplace(q, k, pos)))
        del q, k, q_out, k_out, pos


def top_k_kept(x, k):
    """torch's top-k keep mask: entries at or above each row's k-th largest (ties kept)."""
    return x >= x.topk(k, dim=-1).values[..., -1:]


def top_k_mask_torch(x):
    return torch.where(top_k_kept(x, TOP_K), x, float("-inf"))


def top_k_renorm_torch(p):
    kept = torch.where(top_k_kept(p, TOP_K), p, 0)
    return kept / kept.sum(-1, keepdim=True)


def top_p_renorm_torch(p):
    """Sorted: an entry is kept when the entries before it hold less than TOP_P of the row."""
    sorted_p, order = p.sort(dim=-1, descending=True)
    before = sorted_p.cumsum(-1) - sorted_p
    kept_sorted = torch.where(before < TOP_P * sorted_p.sum(-1, keepdim=True), sorted_p, 0)
    kept = torch.empty_like(p).scatter_(-1, order, kept_sorted)
    return kept / kept.sum(-1, keepdim=True)


def draw_torch(p):
    """torch's draw of one token a row: `multinomial` over the (filtered) probabilities."""
    return torch.multinomial(p.float(), 1)


def min_p_torch(p):
    return torch.where(p >= MIN_P * p.amax(-1, keepdim=True), p, 0)


def sampling_cases(record, dtype, ops, fi, time_fn, impl_suffix, grid):
    """Per op: (torch version, FlashInfer call, ferrinfer call, input maker, output dtype)."""
    size = torch.tensor([], dtype=dtype).element_size()
    logits = lambda B, V: torch.randn(B, V, device="cuda", dtype=dtype)  # noqa: E731
    probs = lambda B, V: torch.softmax(torch.randn(B, V, device="cuda"), dim=-1).to(dtype)  # noqa: E731
    table = {
        "softmax": (lambda x: torch.softmax(x.float() / TEMPERATURE, dim=-1),
                    lambda x: fi.softmax(x, TEMPERATURE),
                    lambda x, out: ferrinfer.softmax(x, TEMPERATURE, out=out), logits, torch.float32),
        "top_k_mask_logits": (top_k_mask_torch, lambda x: fi.top_k_mask_logits(x, TOP_K),
                              lambda x, out: ferrinfer.top_k_mask_logits(x, TOP_K, out=out), logits, dtype),
        "top_k_renorm_probs": (top_k_renorm_torch, lambda x: fi.top_k_renorm_probs(x, TOP_K),
                               lambda x, out: ferrinfer.top_k_renorm_probs(x, TOP_K, out=out), probs, dtype),
        "top_p_renorm_probs": (top_p_renorm_torch, lambda x: fi.top_p_renorm_probs(x, TOP_P),
                               lambda x, out: ferrinfer.top_p_renorm_probs(x, TOP_P, out=out), probs, dtype),
        # One token a row, from an explicit (seed, offset) on every side (no generator state).
        "sampling_from_probs": (draw_torch, lambda x: fi.sampling_from_probs(x, seed=SEED, offset=0),
                                lambda x, out: ferrinfer.sampling_from_probs(x, SEED, 0, samples=out), probs, torch.int32),
        "top_k_sampling_from_probs": (lambda p: draw_torch(top_k_renorm_torch(p)),
                                      lambda x: fi.top_k_sampling_from_probs(x, TOP_K, seed=SEED, offset=0),
                                      lambda x, out: ferrinfer.top_k_sampling_from_probs(x, TOP_K, SEED, 0, samples=out),
                                      probs, torch.int32),
        "top_p_sampling_from_probs": (lambda p: draw_torch(top_p_renorm_torch(p)),
                                      lambda x: fi.top_p_sampling_from_probs(x, TOP_P, seed=SEED, offset=0),
                                      lambda x, out: ferrinfer.top_p_sampling_from_probs(x, TOP_P, SEED, 0, samples=out),
                                      probs, torch.int32),
        "min_p_sampling_from_probs": (lambda p: draw_torch(min_p_torch(p)),
                                      lambda x: fi.min_p_sampling_from_probs(x, MIN_P, seed=SEED, offset=0),
                                      lambda x, out: ferrinfer.min_p_sampling_from_probs(x, MIN_P, SEED, 0, samples=out),
                                      probs, torch.int32),
        # Top-k, then top-p among the kept (FlashInfer's default order, "top_k_first").
        "top_k_top_p_sampling_from_probs": (
            lambda p: draw_torch(top_p_renorm_torch(top_k_renorm_torch(p))),
            lambda x: fi.top_k_top_p_sampling_from_probs(x, TOP_K, TOP_P, seed=SEED, offset=0),
            lambda x, out: ferrinfer.top_k_top_p_sampling_from_probs(x, TOP_K, TOP_P, SEED, 0, samples=out),
            probs, torch.int32),
        "top_k_top_p_sampling_from_logits": (
            lambda x: draw_torch(top_p_renorm_torch(torch.softmax(top_k_mask_torch(x).float(), dim=-1))),
            lambda x: fi.top_k_top_p_sampling_from_logits(x, TOP_K, TOP_P, seed=SEED, offset=0),
            lambda x, out: ferrinfer.top_k_top_p_sampling_from_logits(x, TOP_K, TOP_P, SEED, 0, samples=out),
            logits, torch.int32),
    }
    # Per-row thresholds (a tensor a row, as an engine with per-request parameters passes them):
    # FlashInfer's scalar top_k ≤ 256 at V ≥ 65536 takes its radix top-k path (the `topk` module);
    # tensors take its general path (top-k renorm, then top-p sampling). Impl `*_rows`.
    def rows_of(B):
        return (torch.full((B,), TOP_K, device="cuda", dtype=torch.int32),
                torch.full((B,), TOP_P, device="cuda", dtype=torch.float32))
    per_row = {
        op: (lambda x, f=f: f(x, *rows_of(x.shape[0]), seed=SEED, offset=0),
             lambda x, out, g=g: g(x, *rows_of(x.shape[0]), SEED, 0, samples=out))
        for op, f, g in [
            ("top_k_top_p_sampling_from_probs", lambda *a, **k: fi.top_k_top_p_sampling_from_probs(*a, **k),
             ferrinfer.top_k_top_p_sampling_from_probs),
            ("top_k_top_p_sampling_from_logits", lambda *a, **k: fi.top_k_top_p_sampling_from_logits(*a, **k),
             ferrinfer.top_k_top_p_sampling_from_logits),
        ]
    }
    for op in ops:
        eager, theirs, ours, make, out_dtype = table[op]
        compiled = torch.compile(eager)
        for V, B in grid:
            # Tokens: one a row; probabilities and logits: a row each.
            shape = (B,) if out_dtype == torch.int32 else (B, V)
            x, out = make(B, V), torch.empty(shape, device="cuda", dtype=out_dtype)
            nbytes = B * V * size + out.numel() * out.element_size()
            record(op, B, V, nbytes, "torch_eager" + impl_suffix, time_fn(lambda: eager(x)))
            try:
                if compiled:
                    compiled(x)
                    record(op, B, V, nbytes, "torch_compile" + impl_suffix, time_fn(lambda: compiled(x)))
            except Exception as error:  # inductor cannot compile every torch version (top-p's sort)
                print(f"# torch.compile {op} failed, not timed: {type(error).__name__}", file=sys.stderr)
                compiled = None
            if fi:
                try:
                    theirs(x)
                    record(op, B, V, nbytes, "flashinfer" + impl_suffix, time_fn(lambda: theirs(x)))
                except Exception as error:
                    print(f"# flashinfer {op} failed: {error!r}", file=sys.stderr)
            record(op, B, V, nbytes, "ferrinfer-py" + impl_suffix, time_fn(lambda: ours(x, out)))
            if op in per_row:
                theirs_rows, ours_rows = per_row[op]
                if fi:
                    try:
                        theirs_rows(x)
                        record(op, B, V, nbytes, "flashinfer_rows" + impl_suffix, time_fn(lambda: theirs_rows(x)))
                    except Exception as error:
                        print(f"# flashinfer {op} (per-row thresholds) failed: {error!r}", file=sys.stderr)
                record(op, B, V, nbytes, "ferrinfer-py_rows" + impl_suffix, time_fn(lambda: ours_rows(x, out)))
            del x, out


def append_torch(key, value, batch, pos, k_cache, v_cache, ids, indptr, page_size):
    """FlashInfer's append in torch: each token's page and entry from the page table, then one
    indexed write a cache (NHD)."""
    at = indptr[batch.long()].long() * page_size + pos.long()
    page, entry = ids[at // page_size].long(), at % page_size
    k_cache[page, entry] = key
    v_cache[page, entry] = value


def page_cases(record, dtype, ops, fi, time_fn, impl_suffix, grid):
    """append_paged_kv_cache of `T / PAGE_SEQUENCES` tokens to each of PAGE_SEQUENCES sequences
    holding PAGE_PREFIX entries each, pages of PAGE_SIZE in random cache order, NHD caches as a
    (k, v) pair; int32 page tables."""
    if "append_paged_kv_cache" not in ops:
        return
    size = torch.tensor([], dtype=dtype).element_size()
    compiled = torch.compile(append_torch)
    for D, T in grid:
        n = T // PAGE_SEQUENCES
        lengths = torch.full((PAGE_SEQUENCES,), PAGE_PREFIX + n)
        pages = (lengths + PAGE_SIZE - 1) // PAGE_SIZE
        used = int(pages.sum())
        indptr = torch.cat([torch.zeros(1, dtype=torch.int64), pages.cumsum(0)]).to("cuda", torch.int32)
        last = (lengths - (pages - 1) * PAGE_SIZE).to("cuda", torch.int32)
        ids = torch.randperm(used).to("cuda", torch.int32)
        batch = torch.arange(PAGE_SEQUENCES, device="cuda", dtype=torch.int32).repeat_interleave(n)
        pos = (PAGE_PREFIX + torch.arange(n, device="cuda", dtype=torch.int32)).repeat(PAGE_SEQUENCES)
        k_cache, v_cache = (torch.zeros(used, PAGE_SIZE, PAGE_KV_HEADS, D, device="cuda", dtype=dtype) for _ in range(2))
        key, value = (torch.randn(T, PAGE_KV_HEADS, D, device="cuda", dtype=dtype) for _ in range(2))
        nbytes = 4 * T * PAGE_KV_HEADS * D * size
        op = "append_paged_kv_cache"
        args = (key, value, batch, pos, k_cache, v_cache, ids, indptr, PAGE_SIZE)
        record(op, T, D, nbytes, "torch_eager" + impl_suffix, time_fn(lambda: append_torch(*args)))
        compiled(*args)
        record(op, T, D, nbytes, "torch_compile" + impl_suffix, time_fn(lambda: compiled(*args)))
        caches = (k_cache, v_cache)
        if fi:
            peer_record(record, op, T, D, nbytes, "flashinfer" + impl_suffix, time_fn,
                        lambda: fi.append_paged_kv_cache(key, value, batch, pos, caches, ids, indptr, last))
        record(op, T, D, nbytes, "ferrinfer-py" + impl_suffix,
               time_fn(lambda: ferrinfer.append_paged_kv_cache(key, value, batch, pos, caches, ids, indptr, last)))
        del k_cache, v_cache, key, value, caches, args


# Decode: 8 kv heads, `--decode-group` query heads each (4: 32 query heads), pages of
# `--page-size` in random cache order, NHD; `T` is the batch, `H` the keys summed over it.
DECODE_KV_HEADS = 8
DECODE_GRID = [[4096], [4096] * 16, [4096] * 64, [1024] * 128, [16384] * 64, [32768] + [512] * 63]
DECODE_WORKSPACE_BYTES = 256 << 20


def decode_batch(lengths, page_size, kv_heads, head_dim, dtype):
    """A paged batch of `lengths` keys: the caches (pages in random order), the page table, and
    for torch each request's cache rows padded to the longest (with a mask where they differ)."""
    pages = [(n + page_size - 1) // page_size for n in lengths]
    used = sum(pages)
    k_cache, v_cache = (torch.randn(used, page_size, kv_heads, head_dim, device="cuda", dtype=dtype) for _ in range(2))
    ids = torch.randperm(used, device="cuda", dtype=torch.int32)
    indptr = torch.tensor([0] + pages, dtype=torch.int64).cumsum(0).to("cuda", torch.int32)
    last = torch.tensor([n - (p - 1) * page_size for n, p in zip(lengths, pages)], device="cuda", dtype=torch.int32)
    longest, starts = max(lengths), [0] + list(itertools.accumulate(pages))
    entries = torch.arange(page_size, device="cuda")

    def request_rows(b):
        rows = (ids[starts[b]:starts[b + 1]].long()[:, None] * page_size + entries).reshape(-1)[:lengths[b]]
        return torch.nn.functional.pad(rows, (0, longest - lengths[b]))

    rows = torch.stack([request_rows(b) for b in range(len(lengths))])
    slots = torch.arange(longest, device="cuda")
    valid = slots[None, :] < torch.tensor(lengths, device="cuda")[:, None]
    mask = None if min(lengths) == longest else valid[:, None, None, :]
    return (k_cache, v_cache), ids, indptr, last, rows, mask


def decode_torch(q, caches, rows, mask):
    """Decode with torch: each request's keys and values gathered from the paged caches (rows
    padded to the longest, masked), then SDPA with grouped query heads."""
    k_cache, v_cache = caches
    kv_heads, head_dim = k_cache.shape[-2:]
    k = k_cache.reshape(-1, kv_heads, head_dim)[rows].transpose(1, 2)
    v = v_cache.reshape(-1, kv_heads, head_dim)[rows].transpose(1, 2)
    out = torch.nn.functional.scaled_dot_product_attention(q.unsqueeze(2), k, v, attn_mask=mask, enable_gqa=True)
    return out.squeeze(2)


def decode_cases(record, dtype, ops, fi, time_fn, impl_suffix, grid, shape):
    """batch_decode over `grid`'s batches (each a list of request lengths): ferrinfer's and
    FlashInfer's wrappers (its CUDA-core and its tensor-core path) planned once, `run` timed; torch's
    SDPA over the gathered cache. Prints each output's largest difference from torch's."""
    head_dim, group, page_size = shape
    kv_heads, size = DECODE_KV_HEADS, torch.tensor([], dtype=dtype).element_size()
    qo_heads = kv_heads * group
    suffix = "" if shape == (128, 4, 16) else f"_d{head_dim}_g{group}_p{page_size}"
    op = "batch_decode" + suffix
    workspace = torch.empty(DECODE_WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")
    for lengths in grid:
        batch, keys = len(lengths), sum(lengths)
        caches, ids, indptr, last, rows, mask = decode_batch(lengths, page_size, kv_heads, head_dim, dtype)
        q = torch.randn(batch, qo_heads, head_dim, device="cuda", dtype=dtype)
        nbytes = (2 * keys * kv_heads + 2 * batch * qo_heads) * head_dim * size
        plan = (indptr, ids, last, qo_heads, kv_heads, head_dim, page_size)
        expected = decode_torch(q, caches, rows, mask).float()

        def timed(impl, wrapper):
            wrapper.plan(*plan, q_data_type=dtype, kv_data_type=dtype)
            difference = (wrapper.run(q, caches).float() - expected).abs().max().item()
            print(f"# {op} {impl} batch={batch} keys={keys}: largest difference from torch {difference:.3g}", file=sys.stderr)
            record(op, batch, keys, nbytes, impl + impl_suffix, time_fn(lambda: wrapper.run(q, caches)))

        if "torch" in ops:
            record(op, batch, keys, nbytes, "torch_eager" + impl_suffix, time_fn(lambda: decode_torch(q, caches, rows, mask)))
        if fi:
            for impl, tensor_cores in [("flashinfer", False), ("flashinfer_tc", True)]:
                try:
                    timed(impl, fi.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD", use_tensor_cores=tensor_cores))
                except Exception as error:
                    print(f"# {impl} {op} not timed: {type(error).__name__}: {str(error)[:300]}", file=sys.stderr)
        timed("ferrinfer-py", ferrinfer.decode.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD"))
        del caches, q, rows, expected


def decode_plan_cases(record, fi, grid, calls=200):
    """The host cost of `plan` (wall time per call, then one sync) for each batch of `grid`."""
    workspace = torch.empty(DECODE_WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")
    for lengths in grid:
        pages = [(n + 15) // 16 for n in lengths]
        indptr = torch.tensor([0] + pages, dtype=torch.int64).cumsum(0).to("cuda", torch.int32)
        ids = torch.arange(sum(pages), device="cuda", dtype=torch.int32)
        last = torch.tensor([n - (p - 1) * 16 for n, p in zip(lengths, pages)], device="cuda", dtype=torch.int32)
        wrappers = [("ferrinfer-py", ferrinfer.decode.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD"))]
        if fi:
            wrappers += [("flashinfer", fi.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD")),
                         ("flashinfer_tc", fi.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD", use_tensor_cores=True))]
        for impl, wrapper in wrappers:
            def plan():
                wrapper.plan(indptr, ids, last, 32, DECODE_KV_HEADS, 128, 16, q_data_type=torch.bfloat16)
            try:
                record("batch_decode_plan", len(lengths), sum(lengths), 1, impl + "_eager", eager_us(plan, calls=calls))
            except Exception as error:
                print(f"# {impl} plan not timed: {type(error).__name__}: {str(error)[:300]}", file=sys.stderr)


def only_tokens(grid, tokens):
    """The grid's (width, T) points whose T is in `tokens` (comma-separated); all if None."""
    if tokens is None:
        return grid
    wanted = {int(t) for t in tokens.split(",")}
    return [(width, T) for width, T in grid if T in wanted]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="norm", choices=["norm", "activation", "sampling", "cascade", "rope", "page", "decode"])
    parser.add_argument("--ops", default=None, help="comma-separated (default: the family's ops)")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--eager", action="store_true", help="time the host path (T = 1, no graph)")
    parser.add_argument("--tokens", default=None, help="comma-separated T values: only these rows of the grid")
    parser.add_argument("--grid", default="standard", choices=["standard", "wide"],
                        help="norm only: the peers' grid, or H from 64 to 16384 (NORM_WIDE_GRID)")
    parser.add_argument("--decode-shape", default="128,4,16",
                        help="decode only: head_dim,group,page_size (query heads a kv head; 8 kv heads)")
    parser.add_argument("--out", default=None, help="also write the CSV here")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    torch.manual_seed(0)
    warm_up_clocks(dtype)
    fi_norm, fi_activation = flashinfer_ops()
    record = Recorder(args.dtype)
    time_fn, suffix = (eager_us, "_eager") if args.eager else (graph_us, "")
    if args.family == "norm":
        ops = (args.ops or "rmsnorm,fused_add_rmsnorm").split(",")
        grid = NORM_WIDE_GRID if args.grid == "wide" else NORM_GRID
        grid = [(4096, 1), (8192, 1)] if args.eager else only_tokens(grid, args.tokens)
        norm_cases(record, dtype, ops, fi_norm, time_fn, suffix, grid)
    elif args.family == "sampling":
        ops = (args.ops or "softmax,top_k_mask_logits,top_k_renorm_probs,top_p_renorm_probs").split(",")
        grid = [(128256, 1)] if args.eager else only_tokens(SAMPLING_GRID, args.tokens)
        sampling_cases(record, dtype, ops, flashinfer_module("sampling"), time_fn, suffix, grid)
    elif args.family == "cascade":
        ops = (args.ops or "merge_state,merge_state_in_place,merge_states").split(",")
        grid = [(128, CASCADE_HEADS)] if args.eager else only_tokens(CASCADE_GRID, args.tokens)
        cascade_cases(record, dtype, ops, flashinfer_module("cascade"), time_fn, suffix, grid)
    elif args.family == "rope":
        ops = (args.ops or "apply_rope_pos_ids,apply_rope,apply_rope_pos_ids_inplace,"
               "apply_rope_with_cos_sin_cache,apply_rope_with_cos_sin_cache_inplace").split(",")
        grid = [(128, 1)] if args.eager else only_tokens(ROPE_GRID, args.tokens)
        fi = flashinfer_module("rope")
        rope_cases(record, dtype, ops, fi, time_fn, suffix, grid)
        rope_cache_cases(record, dtype, ops, fi, time_fn, suffix, grid)
    elif args.family == "decode":
        ops = (args.ops or "torch,batch_decode").split(",")
        fi = flashinfer_module("decode")
        if args.eager:
            decode_plan_cases(record, fi, DECODE_GRID)
        else:
            shape = tuple(int(x) for x in args.decode_shape.split(","))
            grid = DECODE_GRID if args.tokens is None else [g for g in DECODE_GRID if str(len(g)) in args.tokens.split(",")]
            decode_cases(record, dtype, ops, fi, time_fn, suffix, grid, shape)
    elif args.family == "page":
        ops = (args.ops or "append_paged_kv_cache").split(",")
        grid = [(128, PAGE_SEQUENCES)] if args.eager else only_tokens(PAGE_GRID, args.tokens)
        page_cases(record, dtype, ops, flashinfer_module("page"), time_fn, suffix, grid)
    else:
        ops = (args.ops or "silu_and_mul,gelu_and_mul,gelu_tanh_and_mul").split(",")
        grid = [(4096, 1), (14336, 1)] if args.eager else only_tokens(ACTIVATION_GRID, args.tokens)
        activation_cases(record, dtype, ops, fi_activation, time_fn, suffix, grid)
    if args.out:
        with open(args.out, "w") as f:
            f.write("op,dtype,T,H,impl,us,tbps\n" + "\n".join(record.rows) + "\n")


if __name__ == "__main__":
    main()
