"""The decode family in the `ferrinfer` wheel on the CPU backend through NumPy: FlashInfer's
`single_decode_with_kv_cache` (its output alone, or with the log-sum-exp where `return_lse`) and
`BatchDecodeWithPagedKVCacheWrapper` (`plan`, then `run` any number of times), both layouts,
page sizes 1, 7, 16 and 64, GQA, long requests split into work items and merged, against an f64 reference; errors name the
argument."""
import numpy as np
import pytest

import ferrinfer
from ferrinfer.decode import BatchDecodeWithPagedKVCacheWrapper, single_decode_with_kv_cache

RNG = np.random.default_rng(11)


def attention_ref(q, k, v, sm_scale=None):
    """f64 decode of `q` `[heads, d]` over `k`, `v` `[n, kv_heads, d]`: `(o, lse base 2)`."""
    heads, d = q.shape
    group = heads // k.shape[1]
    scale = sm_scale if sm_scale is not None else d ** -0.5
    out, lse = np.zeros((heads, d)), np.full(heads, -np.inf)
    for h in range(heads):
        if len(k) == 0:
            continue
        s = k[:, h // group].astype(np.float64) @ q[h].astype(np.float64) * scale
        m = s.max()
        w = np.exp(s - m)
        out[h] = w @ v[:, h // group].astype(np.float64) / w.sum()
        lse[h] = (m + np.log(w.sum())) / np.log(2)
    return out, lse


@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_single_decode_returns_its_output_and_lse_where_asked(layout):
    heads, kv_heads, d, n = 8, 2, 64, 37
    q = RNG.standard_normal((heads, d)).astype(np.float32)
    k, v = (RNG.standard_normal((n, kv_heads, d)).astype(np.float32) for _ in range(2))
    stored = (lambda x: x) if layout == "NHD" else (lambda x: np.ascontiguousarray(x.transpose(1, 0, 2)))
    out = single_decode_with_kv_cache(q, stored(k), stored(v), kv_layout=layout)
    assert out.shape == (heads, d)
    want, want_lse = attention_ref(q, k, v)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
    out, lse = single_decode_with_kv_cache(q, stored(k), stored(v), kv_layout=layout, return_lse=True)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-5, atol=1e-5)


def paged(lengths, kv_heads, d, page_size, layout):
    """A paged cache holding `lengths` keys a request, its pages in reverse order."""
    pages = [-(-n // page_size) for n in lengths]
    used = sum(pages)
    indptr = np.concatenate([[0], np.cumsum(pages)]).astype(np.int32)
    indices = np.arange(used, 0, -1).astype(np.int32)
    last = np.array([n - max(p - 1, 0) * page_size if p else 0 for n, p in zip(lengths, pages)], np.int32)
    shape = (used + 1, page_size, kv_heads, d) if layout == "NHD" else (used + 1, kv_heads, page_size, d)
    k_cache, v_cache = (RNG.standard_normal(shape).astype(np.float32) for _ in range(2))

    def keys(cache, b):
        rows = cache[indices[indptr[b]:indptr[b + 1]]]
        rows = rows if layout == "NHD" else rows.transpose(0, 2, 1, 3)
        return rows.reshape(-1, kv_heads, d)[: lengths[b]]

    return (k_cache, v_cache), indptr, indices, last, keys


@pytest.mark.parametrize("layout,page_size", [("NHD", 16), ("HND", 16), ("NHD", 1), ("HND", 64), ("NHD", 7)])
def test_the_wrapper_plans_once_and_runs_any_number_of_times(layout, page_size):
    heads, kv_heads, d = 8, 2, 128
    lengths = [0, 1, 16, 700, 3000, 33, 64]
    caches, indptr, indices, last, keys = paged(lengths, kv_heads, d, page_size, layout)
    workspace = np.zeros(64 << 20, np.uint8)
    wrapper = BatchDecodeWithPagedKVCacheWrapper(workspace, layout)
    wrapper.plan(indptr, indices, last, heads, kv_heads, d, page_size)
    for _ in range(2):
        q = RNG.standard_normal((len(lengths), heads, d)).astype(np.float32)
        out, lse = wrapper.run(q, caches, return_lse=True)
        for b in range(len(lengths)):
            want, want_lse = attention_ref(q[b], keys(caches[0], b), keys(caches[1], b))
            np.testing.assert_allclose(out[b], want, rtol=1e-4, atol=1e-5, err_msg=f"request {b}")
            np.testing.assert_allclose(lse[b], want_lse, rtol=1e-5, atol=1e-5, err_msg=f"request {b}")
    assert wrapper.run(q, caches).shape == q.shape


def test_a_workspace_too_small_is_refused_naming_it():
    caches, indptr, indices, last, _ = paged([5000] * 4, 2, 128, 16, "NHD")
    wrapper = BatchDecodeWithPagedKVCacheWrapper(np.zeros(64, np.uint8))
    # A CPU plan keeps requests whole: four items of 8 heads × 129 floats, more than 64 bytes.
    with pytest.raises(ValueError, match="float_workspace_buffer"):
        wrapper.plan(indptr, indices, last, 8, 2, 128, 16)


def test_heads_that_do_not_divide_are_refused():
    caches, indptr, indices, last, _ = paged([5], 3, 64, 16, "NHD")
    wrapper = BatchDecodeWithPagedKVCacheWrapper(np.zeros(1 << 20, np.uint8))
    with pytest.raises(ValueError, match="num_qo_heads"):
        wrapper.plan(indptr, indices, last, 8, 3, 64, 16)


def test_the_wrapper_is_in_the_decode_submodule():
    assert ferrinfer.decode.BatchDecodeWithPagedKVCacheWrapper is BatchDecodeWithPagedKVCacheWrapper


def test_a_nan_in_one_request_stays_there():
    heads, kv_heads, d, page_size = 4, 1, 64, 16
    lengths = [40, 2000, 5]
    caches, indptr, indices, last, keys = paged(lengths, kv_heads, d, page_size, "NHD")
    caches[0][indices[indptr[1]], 3, 0, 7] = np.nan  # a key of request 1
    wrapper = BatchDecodeWithPagedKVCacheWrapper(np.zeros(1 << 20, np.uint8))
    wrapper.plan(indptr, indices, last, heads, kv_heads, d, page_size)
    q = RNG.standard_normal((len(lengths), heads, d)).astype(np.float32)
    out = wrapper.run(q, caches)
    assert np.isnan(out[1]).all()
    for b in (0, 2):
        want, _ = attention_ref(q[b], keys(caches[0], b), keys(caches[1], b))
        np.testing.assert_allclose(out[b], want, rtol=1e-4, atol=1e-5, err_msg=f"request {b}")


def test_graph_mode_keeps_its_buffers_and_pads_the_plan_with_idle_items():
    """`use_cuda_graph=True` on the CPU: the page table lands in the fixed buffers, the work
    items keep one tensor padded with idle items from plan to plan, and each run is right."""
    rng = np.random.default_rng(5)
    heads, kv_heads, dim, page_size, batch = 4, 2, 64, 4, 3
    buffers = dict(paged_kv_indptr_buffer=np.zeros(batch + 1, np.int32),
                   paged_kv_indices_buffer=np.zeros(40, np.int32),
                   paged_kv_last_page_len_buffer=np.zeros(batch, np.int32))
    wrapper = ferrinfer.decode.BatchDecodeWithPagedKVCacheWrapper(np.zeros(1 << 20, np.uint8), "NHD",
                                                                  use_cuda_graph=True, **buffers)
    k_cache, v_cache = (rng.standard_normal((40, page_size, kv_heads, dim)).astype(np.float32) for _ in range(2))
    q = rng.standard_normal((batch, heads, dim)).astype(np.float32)
    work = None
    for lengths in ([5, 0, 30], [1, 60, 2]):
        pages = [(n + page_size - 1) // page_size for n in lengths]
        bounds = np.concatenate([[0], np.cumsum(pages)]).astype(np.int32)
        ids = rng.permutation(40)[:bounds[-1]].astype(np.int32)
        last = np.array([n - (p - 1) * page_size if n else 0 for n, p in zip(lengths, pages)], np.int32)
        wrapper.plan(bounds, ids, last, heads, kv_heads, dim, page_size, q_data_type="float32")
        assert np.array_equal(buffers["paged_kv_indptr_buffer"], bounds)
        work = wrapper._plan["work"] if work is None else work
        assert np.shares_memory(wrapper._plan["work"], work) and (work[:, 0] == -1).any()
        out = wrapper.run(q, (k_cache, v_cache))
        for b, n in enumerate(lengths):
            rows = (ids[bounds[b]:bounds[b + 1]][:, None] * page_size + np.arange(page_size)).reshape(-1)[:n]
            k = k_cache.reshape(-1, kv_heads, dim)[rows]
            v = v_cache.reshape(-1, kv_heads, dim)[rows]
            want = attention_ref(q[b], k, v)[0]
            np.testing.assert_allclose(out[b], want, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("split", [dict(fixed_split_size=3), dict(disable_split_kv=True)])
def test_a_fixed_or_disabled_split_gives_a_request_the_same_bits_alone_and_in_any_batch(split):
    heads, kv_heads, d, page_size = 4, 2, 64, 16
    lengths = [700, 5, 3000, 0, 129]
    caches, indptr, indices, last, keys = paged(lengths, kv_heads, d, page_size, "NHD")
    q = RNG.standard_normal((len(lengths), heads, d)).astype(np.float32)
    wrapper = BatchDecodeWithPagedKVCacheWrapper(np.zeros(8 << 20, np.uint8))
    wrapper.plan(indptr, indices, last, heads, kv_heads, d, page_size, **split)
    together = wrapper.run(q, caches)
    for b in range(len(lengths)):
        alone = BatchDecodeWithPagedKVCacheWrapper(np.zeros(8 << 20, np.uint8))
        alone.plan(indptr[b:b + 2] - indptr[b], indices[indptr[b]:indptr[b + 1]], last[b:b + 1],
                   heads, kv_heads, d, page_size, **split)
        assert np.array_equal(alone.run(q[b:b + 1], caches)[0], together[b]), f"request {b}"


def test_fixed_split_size_counts_pages_and_cuts_at_its_multiples():
    caches, indptr, indices, last, keys = paged([700, 40], 2, 64, 16, "NHD")
    wrapper = BatchDecodeWithPagedKVCacheWrapper(np.zeros(8 << 20, np.uint8))
    wrapper.plan(indptr, indices, last, 4, 2, 64, 16, fixed_split_size=3)
    assert wrapper._plan["work"].tolist() == [[0, b, min(b + 48, 700)] for b in range(0, 700, 48)] + [[1, 0, 40]]


def test_graph_mode_refuses_a_fixed_split_with_more_items_than_its_capacity():
    batch = 2
    buffers = dict(paged_kv_indptr_buffer=np.zeros(batch + 1, np.int32),
                   paged_kv_indices_buffer=np.zeros(4000, np.int32),
                   paged_kv_last_page_len_buffer=np.zeros(batch, np.int32))
    wrapper = BatchDecodeWithPagedKVCacheWrapper(np.zeros(8 << 20, np.uint8), "NHD", use_cuda_graph=True, **buffers)
    caches, indptr, indices, last, _ = paged([30000, 10], 1, 64, 16, "NHD")
    with pytest.raises(ValueError, match="fixed_split_size"):
        wrapper.plan(indptr, indices, last, 4, 1, 64, 16, fixed_split_size=1)
    assert not buffers["paged_kv_indptr_buffer"].any(), "nothing written on the error path"
