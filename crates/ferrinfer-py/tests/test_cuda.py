"""The `ferrinfer` wheel on CUDA tensors from PyTorch: every op against float64 references, work
issued on the caller's current stream (DLPack stream protocol), capture in `torch.cuda.graph`,
and device errors. Skips (saying why) where torch or a CUDA device is missing, as on CI."""
import pytest

torch = pytest.importorskip("torch", reason="SKIPPED: torch is not installed (the CUDA tests need it)")
if not torch.cuda.is_available():
    pytest.skip("SKIPPED: no CUDA device (the CUDA tests need a GPU)", allow_module_level=True)

import ferrinfer  # noqa: E402

DEV = torch.device("cuda", 0)
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# Rows × vocabulary reaching each of the sampling planner's layouts on a 132-multiprocessor
# device (crates/ferrinfer-launch/src/sampling.rs): few rows split finely; fewer rows than
# multiprocessors in two wide blocks (the widest a 16-bit mask takes at 128256); a block a row;
# a row shorter than a vector.
SAMPLING_SHAPES = [(1, 128256), (64, 32000), (64, 128256), (200, 32000), (3, 7)]
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def randn(*shape, dtype):
    return torch.randn(*shape, device=DEV, dtype=torch.float32).to(dtype)


def rms_ref(x, w, eps=1e-6, offset=0.0):
    x64 = x.double()
    return x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps) * (w.double() + offset)


def close(got, want, dtype):
    rel = (got.double() - want).norm() / want.norm()
    assert rel < TOL[dtype], (dtype, rel.item())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 4096), (37, 8192), (5, 3, 1000), (2, 130)])
def test_rmsnorm_and_gemma(dtype, shape):
    x, w = randn(*shape, dtype=dtype), randn(shape[-1], dtype=dtype)
    close(ferrinfer.rmsnorm(x, w), rms_ref(x, w), dtype)
    close(ferrinfer.gemma_rmsnorm(x, w, eps=1e-5), rms_ref(x, w, 1e-5, 1.0), dtype)
    out = torch.full_like(x, float("nan"))
    assert ferrinfer.rmsnorm(x, w, out=out) is out
    close(out, rms_ref(x, w), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("gemma", [False, True])
def test_fused_add_rmsnorm_in_place(dtype, gemma):
    x, r, w = randn(33, 4096, dtype=dtype), randn(33, 4096, dtype=dtype), randn(4096, dtype=dtype)
    total = x.double() + r.double()
    op = ferrinfer.gemma_fused_add_rmsnorm if gemma else ferrinfer.fused_add_rmsnorm
    assert op(x, r, w) is None
    close(r, total, dtype)
    close(x, rms_ref(r, w, offset=1.0 if gemma else 0.0), dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_layernorm_f32_gamma_beta(dtype):
    x = randn(17, 2048, dtype=dtype)
    g, b = randn(2048, dtype=torch.float32), randn(2048, dtype=torch.float32)
    x64 = x.double()
    want = (x64 - x64.mean(-1, keepdim=True)) / torch.sqrt(x64.var(-1, unbiased=False, keepdim=True) + 1e-6)
    close(ferrinfer.layernorm(x, g, b), want * g.double() + b.double(), dtype)


def test_strided_rows():
    base, w = randn(16, 2 * 4096, dtype=torch.bfloat16), randn(4096, dtype=torch.bfloat16)
    x = base[:, 4096:]  # row stride 8192, last dim contiguous
    close(ferrinfer.rmsnorm(x, w), rms_ref(x, w), torch.bfloat16)


def test_runs_on_the_current_stream():
    """Only a launch on torch's current stream (a side stream here) is ordered before the reads
    queued after it on that stream. The default stream is kept busy meanwhile, so a launch on it
    (or on any stream other than `side`) would run late, and the clones taken on `side` right
    after the calls would still see the NaN-filled outputs."""
    src, w = randn(4096, 4096, dtype=torch.bfloat16), randn(4096, dtype=torch.bfloat16)
    x, out = torch.zeros_like(src), torch.full_like(src, float("nan"))
    r = torch.zeros_like(src)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    torch.cuda._sleep(400_000_000)  # the default stream: busy ~0.2 s
    with torch.cuda.stream(side):
        x.copy_(src)
        ferrinfer.rmsnorm(x, w, out=out)
        seen_out = out.clone()
        ferrinfer.fused_add_rmsnorm(x, r, w)
        seen_r, seen_x = r.clone(), x.clone()
    side.synchronize()
    close(seen_out, rms_ref(src, w), torch.bfloat16)
    close(seen_r, src.double(), torch.bfloat16)
    close(seen_x, rms_ref(seen_r, w), torch.bfloat16)
    torch.cuda.synchronize()


def test_parameters_that_require_grad_are_accepted():
    """torch will not export a tensor that requires grad; model weights do (FlashInfer takes them)."""
    x = randn(8, 1024, dtype=torch.float32)
    w = torch.nn.Parameter(randn(1024, dtype=torch.float32))
    close(ferrinfer.rmsnorm(x, w), rms_ref(x, w.detach()), torch.float32)


def test_captured_in_a_cuda_graph_and_replayed():
    x, w = randn(64, 4096, dtype=torch.float16), randn(4096, dtype=torch.float16)
    out, res = torch.empty_like(x), torch.zeros_like(x)
    xs = x.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside capture: loads the modules
        ferrinfer.rmsnorm(x, w, out=out)
        ferrinfer.fused_add_rmsnorm(xs, res, w)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ferrinfer.rmsnorm(x, w, out=out)
        ferrinfer.fused_add_rmsnorm(xs, res, w)
    fresh = randn(64, 4096, dtype=torch.float16)
    x.copy_(fresh)
    xs.copy_(fresh)
    res.zero_()
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    close(out, rms_ref(fresh, w), torch.float16)
    close(res, fresh.double(), torch.float16)
    close(xs, rms_ref(fresh, w), torch.float16)


def test_device_mismatch_is_a_value_error_and_out_is_untouched():
    x, out = randn(4, 64, dtype=torch.float32), torch.full((4, 64), float("nan"), device=DEV)
    with pytest.raises(ValueError, match="`weight` is on cpu; expected cuda:0"):
        ferrinfer.rmsnorm(x, torch.ones(64), out=out)
    with pytest.raises(TypeError, match="`weight` has dtype f16; expected f32"):
        ferrinfer.rmsnorm(x, torch.ones(64, device=DEV, dtype=torch.float16), out=out)
    assert out.isnan().all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SAMPLING_SHAPES)
def test_softmax_allocates_f32_probabilities_on_the_device(dtype, shape):
    x = 4 * randn(*shape, dtype=dtype)
    probs = ferrinfer.softmax(x, 0.8)
    assert probs.dtype == torch.float32 and probs.device == x.device and probs.shape == x.shape
    close(probs, torch.softmax(x.double() / 0.8, dim=-1), torch.float32)
    again = torch.empty_like(probs)
    ferrinfer.softmax(x, 0.8, out=again)
    assert torch.equal(probs, again), "softmax is bitwise deterministic"


def test_softmax_takes_a_temperature_a_row_on_the_device():
    x = 4 * randn(5, 32000, dtype=torch.float32)
    temperatures = torch.tensor([0.3, 0.7, 1.0, 2.0, 0.0], device=DEV)
    probs = ferrinfer.softmax(x, temperatures)
    for row in range(5):
        assert torch.equal(probs[row], ferrinfer.softmax(x[row : row + 1], temperatures[row].item())[0])


def test_top_k_takes_a_k_a_row_on_the_device():
    x = 4 * randn(4, 32000, dtype=torch.bfloat16)
    ks = torch.tensor([1, 50, 0, 7], device=DEV, dtype=torch.int32)
    masked = ferrinfer.top_k_mask_logits(x, ks)
    for row, k in enumerate(ks.tolist()):
        assert torch.equal(masked[row], ferrinfer.top_k_mask_logits(x[row : row + 1], k if k > 0 else 32000)[0])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SAMPLING_SHAPES)
@pytest.mark.parametrize("k", [1, 50, 1000])
def test_top_k_ops_match_torch_topk_on_the_device(dtype, shape, k):
    x = 4 * randn(*shape, dtype=dtype)
    kth = x.float().topk(min(k, shape[-1]), dim=-1).values[..., -1:]
    kept = x.float() >= kth
    masked = ferrinfer.top_k_mask_logits(x, k)
    assert masked.dtype == dtype and masked.device == x.device
    assert torch.equal(masked, torch.where(kept, x, torch.tensor(float("-inf"), dtype=dtype, device=DEV)))
    p = x.float().abs()
    renormed = ferrinfer.top_k_renorm_probs(p, k)
    kept_p = p >= p.topk(min(k, shape[-1]), dim=-1).values[..., -1:]
    want = torch.where(kept_p, p.double(), 0) / torch.where(kept_p, p.double(), 0).sum(-1, keepdim=True)
    close(renormed, want, torch.float32)
    assert torch.equal(renormed, ferrinfer.top_k_renorm_probs(p, k)), "bitwise deterministic"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SAMPLING_SHAPES)
@pytest.mark.parametrize("top_p", [0.3, 0.9, 1.0])
def test_top_p_renorm_probs_keeps_what_the_cpu_keeps_on_the_device(dtype, shape, top_p):
    p = torch.softmax(2 * randn(*shape, dtype=torch.float32), dim=-1).to(dtype)
    out = ferrinfer.top_p_renorm_probs(p, top_p)
    assert out.dtype == dtype and out.device == p.device
    on_cpu = ferrinfer.top_p_renorm_probs(p.cpu(), top_p)
    assert torch.equal(out.cpu() > 0, on_cpu > 0), "integer masses: the CPU's entries exactly"
    close(out.float(), on_cpu.double().to(DEV), dtype)
    assert torch.equal(out, ferrinfer.top_p_renorm_probs(p, top_p)), "bitwise deterministic"
    shares = torch.full((shape[0],), top_p, device=DEV)
    assert torch.equal(out, ferrinfer.top_p_renorm_probs(p, shares)), "a share a row, the same"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SAMPLING_SHAPES)
@pytest.mark.parametrize(
    "name, threshold",
    [("sampling_from_probs", ()), ("top_k_sampling_from_probs", (50,)), ("top_p_sampling_from_probs", (0.9,)),
     ("min_p_sampling_from_probs", (0.1,)), ("top_k_top_p_sampling_from_probs", (50, 0.9)),
     ("top_k_top_p_sampling_from_logits", (50, 0.9))],
)
def test_sampling_ops_draw_the_cpus_tokens_on_the_device(dtype, shape, name, threshold):
    op = getattr(ferrinfer, name)
    p = torch.softmax(2 * randn(*shape, dtype=torch.float32), dim=-1).to(dtype)
    if name.endswith("_from_logits"):
        p = 2 * randn(*shape, dtype=dtype)
    samples = op(p, *threshold, 123, 4)
    assert samples.dtype == torch.int32 and samples.shape == shape[:1] and samples.device == p.device
    assert torch.equal(samples.cpu(), op(p.cpu(), *threshold, 123, 4)), "exact integers: the CPU's tokens"
    assert torch.equal(samples, op(p, *threshold, 123, 4)), "bitwise deterministic"


def test_sampling_captured_in_a_cuda_graph_draws_as_outside():
    p = torch.softmax(randn(16, 32000, dtype=torch.float32), dim=-1)
    samples = torch.full((16,), -1, device=DEV, dtype=torch.int32)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside capture: loads the module
        ferrinfer.top_p_sampling_from_probs(p, 0.9, 5, 6, samples=samples)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ferrinfer.top_p_sampling_from_probs(p, 0.9, 5, 6, samples=samples)
    fresh = torch.softmax(randn(16, 32000, dtype=torch.float32), dim=-1)
    p.copy_(fresh)
    samples.fill_(-1)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(samples, ferrinfer.top_p_sampling_from_probs(fresh, 0.9, 5, 6))


def test_sampling_with_offset_tensors_in_a_cuda_graph_draws_afresh_on_each_replay():
    p = torch.softmax(randn(16, 32000, dtype=torch.float32), dim=-1)
    seed = torch.tensor([5], device=DEV, dtype=torch.int64)
    offset = torch.tensor([6], device=DEV, dtype=torch.int64)
    samples = torch.full((16,), -1, device=DEV, dtype=torch.int32)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside capture: loads the module
        ferrinfer.top_p_sampling_from_probs(p, 0.9, seed, offset, samples=samples)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ferrinfer.top_p_sampling_from_probs(p, 0.9, seed, offset, samples=samples)
        offset.add_(2)
    offset.fill_(6)
    draws = []
    for _ in range(3):
        graph.replay()
        torch.cuda.synchronize()
        draws.append(samples.clone())
    for replay, drawn in enumerate(draws):
        assert torch.equal(drawn, ferrinfer.top_p_sampling_from_probs(p, 0.9, 5, 6 + 2 * replay)), replay
    assert not torch.equal(draws[0], draws[1]), "the offset the graph advanced draws afresh"
    assert offset.item() == 12



@pytest.mark.parametrize("dtype", DTYPES)
def test_merge_state_on_the_device(dtype):
    v_a, v_b = randn(7, 32, 128, dtype=dtype), randn(7, 32, 128, dtype=dtype)
    s_a, s_b = randn(7, 32, dtype=torch.float32) * 4, randn(7, 32, dtype=torch.float32) * 4
    s_b[0, 0] = float("-inf")
    v, s = ferrinfer.merge_state(v_a, s_a, v_b, s_b)
    m = torch.maximum(s_a, s_b).double()
    w_a, w_b = torch.exp2(s_a.double() - m), torch.exp2(s_b.double() - m)
    want = (w_a[..., None] * v_a.double() + w_b[..., None] * v_b.double()) / (w_a + w_b)[..., None]
    close(v, want, dtype)
    assert torch.allclose(s.double(), torch.log2(w_a + w_b) + m, rtol=1e-5, atol=1e-5)
    assert ferrinfer.merge_state_in_place(v_a, s_a, v_b, s_b) is None
    assert torch.equal(v_a, v) and torch.equal(s_a, s)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seq", [7, 300])
def test_merge_states_of_two_states_with_heads_is_merge_state_on_the_device(dtype, seq):
    """`[seq, 2, 32, 128]` takes the two-state entries' walk dividing by the heads: in 16-bit, 7
    tokens one vector a lane, 300 (9600 rows, over 2^14 vectors) two; f32's rows of 32 vectors
    two at either length."""
    v, s = randn(seq, 2, 32, 128, dtype=dtype), randn(seq, 2, 32, dtype=torch.float32) * 4
    s[0, 1, 3] = float("-inf")
    stacked = ferrinfer.merge_states(v, s)
    halves = [t[:, k].contiguous() for k in (0, 1) for t in (v, s)]
    pair = ferrinfer.merge_state(*halves)
    assert all(torch.equal(a, b) for a, b in zip(stacked, pair))


def rope_ref(x, pos, theta=1e4):
    """NeoX rope in float64 at FlashInfer's f32 angle: f32(pos) · f32(theta^(−2i/D))."""
    half = x.shape[-1] // 2
    freq = (theta ** (-2.0 * torch.arange(half, dtype=torch.float64, device=x.device) / x.shape[-1])).float()
    angle = (pos.float()[:, None] * freq[None, :]).double()[:, None, :]
    x1, x2 = x[..., :half].double(), x[..., half:].double()
    return torch.cat([x1 * angle.cos() - x2 * angle.sin(), x2 * angle.cos() + x1 * angle.sin()], dim=-1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rope_on_the_device_in_a_graph_and_in_place(dtype):
    q, k = randn(300, 32, 128, dtype=dtype), randn(300, 8, 128, dtype=dtype)
    pos = torch.randint(0, 100_000, (300,), device=DEV, dtype=torch.int64)
    q_rope, k_rope = ferrinfer.apply_rope_pos_ids(q, k, pos)
    close(q_rope, rope_ref(q, pos), dtype)
    close(k_rope, rope_ref(k, pos), dtype)
    out = (torch.empty_like(q), torch.empty_like(k))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ferrinfer.apply_rope_pos_ids(q, k, pos, q_rope=out[0], k_rope=out[1])
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out[0], q_rope) and torch.equal(out[1], k_rope)
    assert ferrinfer.apply_rope_pos_ids_inplace(q, k, pos) is None
    assert torch.equal(q, q_rope) and torch.equal(k, k_rope)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rope_with_cos_sin_cache_on_packed_qkv_in_a_graph(dtype):
    """vLLM's call: query and key column slices of one qkv tensor, turned in place by a cos/sin
    cache built as vLLM builds it, in a CUDA graph; the value columns untouched."""
    nnz, head_size, rotary = 300, 128, 64
    qkv = randn(nnz, (32 + 8 + 8) * head_size, dtype=dtype)
    query, key, value = qkv.split([32 * head_size, 8 * head_size, 8 * head_size], dim=-1)
    inv_freq = 1e4 ** (-torch.arange(0, rotary, 2, dtype=torch.float32, device=DEV) / rotary)
    angles = torch.arange(4096, dtype=torch.float32, device=DEV)[:, None] * inv_freq[None, :]
    cache = torch.cat([angles.cos(), angles.sin()], dim=-1)
    pos = torch.randint(0, 4096, (nnz,), device=DEV, dtype=torch.int64)

    def want(x):
        heads = x.double().view(nnz, -1, head_size).clone()
        cos, sin = cache[pos, : rotary // 2].double()[:, None], cache[pos, rotary // 2 :].double()[:, None]
        x1, x2 = heads[..., : rotary // 2].clone(), heads[..., rotary // 2 : rotary].clone()
        heads[..., : rotary // 2], heads[..., rotary // 2 : rotary] = x1 * cos - x2 * sin, x2 * cos + x1 * sin
        return heads.view(nnz, -1)

    q_want, k_want, v_before = want(query), want(key), value.clone()
    q_out, k_out = ferrinfer.apply_rope_with_cos_sin_cache(pos, query, key, head_size, cache)
    close(q_out, q_want, dtype)
    close(k_out, k_want, dtype)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ferrinfer.apply_rope_with_cos_sin_cache_inplace(pos, query, key, head_size, cache)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(query, q_out) and torch.equal(key, k_out) and torch.equal(value, v_before)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_append_paged_kv_cache_on_the_device_in_a_graph(dtype, layout):
    """FlashInfer's decode call: one token for each of 64 sequences, positions from
    `get_batch_indices_positions`' arithmetic, into a packed `[pages, 2, …]` cache, captured in a
    CUDA graph; every other entry untouched."""
    sequences, page_size, heads, dim = 64, 16, 8, 128
    lengths = torch.randint(1, 200, (sequences,))
    pages = (lengths + page_size - 1) // page_size
    indptr = torch.cat([torch.zeros(1, dtype=torch.int64), pages.cumsum(0)]).to(DEV, torch.int32)
    used = int(pages.sum())
    ids = torch.randperm(used + 5)[:used].to(DEV, torch.int32)
    last = (lengths - (pages - 1) * page_size).to(DEV, torch.int32)
    batch = torch.arange(sequences, device=DEV, dtype=torch.int32)
    pos = (lengths - 1).to(DEV, torch.int32)
    shape = (used + 5, 2, page_size, heads, dim) if layout == "NHD" else (used + 5, 2, heads, page_size, dim)
    cache = randn(*shape, dtype=dtype)
    key, value = randn(sequences, heads, dim, dtype=dtype), randn(sequences, heads, dim, dtype=dtype)
    want = cache.clone()
    for i in range(sequences):
        at = int(indptr[i]) * page_size + int(pos[i])
        page, entry = int(ids[at // page_size]), at % page_size
        for kv, rows in ((0, key), (1, value)):
            if layout == "NHD":
                want[page, kv, entry] = rows[i]
            else:
                want[page, kv, :, entry] = rows[i]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ferrinfer.append_paged_kv_cache(key, value, batch, pos, cache, ids, indptr, last, kv_layout=layout)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(cache, want)


def test_get_batch_indices_positions_feeds_the_append_on_the_device():
    """FlashInfer's prefill pattern: positions from `get_batch_indices_positions`, then the
    append, both on the device; the positions as FlashInfer defines them."""
    append_lens = torch.tensor([3, 0, 5, 1], dtype=torch.int32)
    seq_lens = (append_lens + torch.tensor([4, 2, 0, 30], dtype=torch.int32)).to(DEV)
    indptr = torch.cat([torch.zeros(1, dtype=torch.int32), append_lens.cumsum(0).to(torch.int32)]).to(DEV)
    nnz = int(append_lens.sum())
    batch, pos = ferrinfer.get_batch_indices_positions(indptr, seq_lens, nnz)
    want_batch = torch.repeat_interleave(torch.arange(4), append_lens).to(DEV, torch.int32)
    starts = (seq_lens.cpu() - append_lens)
    want_pos = torch.cat([torch.arange(s, s + n) for s, n in zip(starts.tolist(), append_lens.tolist())]).to(DEV, torch.int32)
    assert torch.equal(batch, want_batch) and torch.equal(pos, want_pos)


def decode_reference(q, caches, ids, bounds, lengths, layout):
    """Each request's attention in float64 over its keys gathered from the paged caches."""
    k_cache, v_cache = caches
    if layout == "HND":
        k_cache, v_cache = k_cache.transpose(1, 2), v_cache.transpose(1, 2)
    page_size, kv_heads = k_cache.shape[1], k_cache.shape[2]
    group, scale = q.shape[1] // kv_heads, q.shape[-1] ** -0.5
    out = torch.zeros(q.shape, dtype=torch.float64, device=DEV)
    for b, n in enumerate(lengths):
        if n == 0:
            continue
        pages = ids[bounds[b]:bounds[b + 1]].long()
        k = k_cache[pages].reshape(-1, kv_heads, q.shape[-1])[:n].double().repeat_interleave(group, 1)
        v = v_cache[pages].reshape(-1, kv_heads, q.shape[-1])[:n].double().repeat_interleave(group, 1)
        w = torch.softmax(torch.einsum("hd,khd->hk", q[b].double(), k) * scale, -1)
        out[b] = torch.einsum("hk,khd->hd", w, v)
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("group,head_dim,page_size,layout", [
    (4, 128, 16, "NHD"), (1, 64, 1, "HND"), (8, 256, 7, "NHD"), (16, 128, 64, "HND"), (32, 64, 16, "NHD"),
    (5, 256, 16, "HND"), (2, 128, 3, "NHD")])
def test_batch_decode_matches_float64_over_groups_pages_and_splits(dtype, group, head_dim, page_size, layout):
    """The wrapper on the device (its tensor-core kernel for f16 and bf16, CUDA cores for f32):
    requests of 0 to 5000 keys, split across the multiprocessors by the plan, pages in random
    order with spare pages, any group (past the tensor-core kernel's 16 rows too); empty
    requests give zeros and lse −∞."""
    kv_heads = 2
    lengths = [0, 1, 17, 64, 65, 300, 5000, 1999, 16]
    pages = [(n + page_size - 1) // page_size for n in lengths]
    bounds = [0]
    for p in pages:
        bounds.append(bounds[-1] + p)
    ids = torch.randperm(bounds[-1] + 3, device=DEV)[:bounds[-1]].to(torch.int32)
    shape = (bounds[-1] + 3, page_size, kv_heads, head_dim) if layout == "NHD" else (bounds[-1] + 3, kv_heads, page_size, head_dim)
    caches = (randn(*shape, dtype=dtype), randn(*shape, dtype=dtype))
    q = randn(len(lengths), kv_heads * group, head_dim, dtype=dtype)
    last = [n - (p - 1) * page_size if n else 0 for n, p in zip(lengths, pages)]
    workspace = torch.empty(64 << 20, dtype=torch.uint8, device=DEV)
    wrapper = ferrinfer.decode.BatchDecodeWithPagedKVCacheWrapper(workspace, layout)
    wrapper.plan(torch.tensor(bounds, dtype=torch.int32, device=DEV), ids, torch.tensor(last, dtype=torch.int32, device=DEV),
                 kv_heads * group, kv_heads, head_dim, page_size, q_data_type=dtype)
    out, lse = wrapper.run(q, caches, return_lse=True)
    want = decode_reference(q, caches, ids, bounds, lengths, layout)
    close(out, want, dtype)
    assert torch.all(out[0] == 0) and torch.all(lse[0] == float("-inf"))
    assert torch.isfinite(lse[1:]).all()


def test_batch_decode_graph_mode_replays_one_capture_after_new_plans():
    """`use_cuda_graph=True`: `run` captured once, then each new plan of the same batch size —
    other lengths, other pages, other splits — replayed correctly; another batch size refused."""
    kv_heads, qo_heads, head_dim, page_size, batch, pool = 8, 32, 128, 16, 6, 700
    buffers = dict(paged_kv_indptr_buffer=torch.empty(batch + 1, dtype=torch.int32, device=DEV),
                   paged_kv_indices_buffer=torch.empty(pool, dtype=torch.int32, device=DEV),
                   paged_kv_last_page_len_buffer=torch.empty(batch, dtype=torch.int32, device=DEV))
    workspace = torch.empty(64 << 20, dtype=torch.uint8, device=DEV)
    wrapper = ferrinfer.decode.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD", use_cuda_graph=True, **buffers)
    caches = tuple(randn(pool, page_size, kv_heads, head_dim, dtype=torch.bfloat16) for _ in range(2))
    q = randn(batch, qo_heads, head_dim, dtype=torch.bfloat16)
    out = torch.empty_like(q)

    def plan(lengths):
        pages = [(n + page_size - 1) // page_size for n in lengths]
        bounds = [0]
        for p in pages:
            bounds.append(bounds[-1] + p)
        ids = torch.randperm(pool, device=DEV)[:bounds[-1]].to(torch.int32)
        last = [n - (p - 1) * page_size if n else 0 for n, p in zip(lengths, pages)]
        wrapper.plan(torch.tensor(bounds, dtype=torch.int32), ids, torch.tensor(last, dtype=torch.int32),
                     qo_heads, kv_heads, head_dim, page_size, q_data_type=torch.bfloat16)
        return ids, bounds

    plan([3, 100, 0, 4096, 17, 1000])
    wrapper.run(q, caches, out=out)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        wrapper.run(q, caches, out=out)
    for lengths in ([3, 100, 0, 4096, 17, 1000], [9000, 1, 1, 1, 1, 1], [64] * 6, [0, 0, 0, 0, 0, 33]):
        ids, bounds = plan(lengths)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        close(out, decode_reference(q, caches, ids, bounds, lengths, "NHD"), torch.bfloat16)
    with pytest.raises(ValueError, match="batch size"):
        wrapper.plan(torch.tensor([0, 1], dtype=torch.int32), ids[:1], torch.tensor([1], dtype=torch.int32),
                     qo_heads, kv_heads, head_dim, page_size)
