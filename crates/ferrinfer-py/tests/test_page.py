"""The page family in the `ferrinfer` wheel on the CPU backend through NumPy's DLPack:
`append_paged_kv_cache` with FlashInfer's signature, the cache as a `(k, v)` tuple or one
`[pages, 2, …]` tensor, both layouts, int32 and int64 page tables; errors carry the Rust messages
and leave the cache untouched."""
import inspect

import numpy as np
import pytest

import ferrinfer

RNG = np.random.default_rng(5)


def problem(tokens, sequences, heads, dim, page_size, layout, index=np.int32, prefix=2, dtype=np.float32):
    """Keys and values, a page table (tokens round-robin over sequences after `prefix` entries
    each, each sequence's pages in reverse cache order) and random caches with two spare pages."""
    appended = [(tokens + sequences - 1 - b) // sequences for b in range(sequences)]
    lengths = [prefix + n for n in appended]
    pages = [-(-n // page_size) for n in lengths]
    used = sum(pages)
    indptr = np.concatenate([[0], np.cumsum(pages)]).astype(index)
    last = np.array([n - max(p - 1, 0) * page_size for n, p in zip(lengths, pages)], index)
    ids = np.arange(used + 1, 0, -1)[:used].astype(index)
    batch = (np.arange(tokens) % sequences).astype(index)
    pos = (prefix + np.arange(tokens) // sequences).astype(index)
    shape = (used + 2, page_size, heads, dim) if layout == "NHD" else (used + 2, heads, page_size, dim)
    k_cache, v_cache = (RNG.standard_normal(shape).astype(dtype) for _ in range(2))
    key, value = (RNG.standard_normal((tokens, heads, dim)).astype(dtype) for _ in range(2))
    return key, value, batch, pos, (k_cache, v_cache), ids, indptr, last


def appended_ref(key, value, batch, pos, caches, ids, indptr, layout):
    k_out, v_out = (c.copy() for c in caches)
    page_size = caches[0].shape[1 if layout == "NHD" else 2]
    for i, (b, p) in enumerate(zip(batch, pos)):
        at = int(indptr[b]) * page_size + int(p)
        page, entry = ids[at // page_size], at % page_size
        if layout == "NHD":
            k_out[page, entry], v_out[page, entry] = key[i], value[i]
        else:
            k_out[page, :, entry], v_out[page, :, entry] = key[i], value[i]
    return k_out, v_out


@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("index", [np.int32, np.int64])
@pytest.mark.parametrize("page_size", [1, 16, 5])
def test_append_to_a_pair_of_caches(layout, index, page_size):
    key, value, batch, pos, caches, ids, indptr, last = problem(37, 4, 2, 64, page_size, layout, index)
    want = appended_ref(key, value, batch, pos, caches, ids, indptr, layout)
    result = ferrinfer.append_paged_kv_cache(key, value, batch, pos, caches, ids, indptr, last, kv_layout=layout)
    assert result is None
    assert np.array_equal(caches[0], want[0]) and np.array_equal(caches[1], want[1])


@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_append_to_one_packed_cache(layout):
    key, value, batch, pos, caches, ids, indptr, last = problem(20, 3, 4, 32, 8, layout, dtype=np.float16)
    packed = np.stack(caches, axis=1)  # [pages, 2, …]: FlashInfer's single tensor
    want = appended_ref(key, value, batch, pos, caches, ids, indptr, layout)
    ferrinfer.append_paged_kv_cache(key, value, batch, pos, packed, ids, indptr, last, layout)
    assert np.array_equal(packed[:, 0], want[0]) and np.array_equal(packed[:, 1], want[1])


def test_signature_is_flashinfers():
    params = list(inspect.signature(ferrinfer.append_paged_kv_cache).parameters)
    assert params == [
        "append_key", "append_value", "batch_indices", "positions", "paged_kv_cache",
        "kv_indices", "kv_indptr", "kv_last_page_len", "kv_layout", "enable_pdl",
    ]
    assert inspect.signature(ferrinfer.append_paged_kv_cache).parameters["kv_layout"].default == "NHD"


def test_errors_name_the_argument_and_leave_the_cache_untouched():
    key, value, batch, pos, caches, ids, indptr, last = problem(9, 2, 2, 16, 4, "NHD")
    before = [c.copy() for c in caches]
    call = lambda **kw: ferrinfer.append_paged_kv_cache(  # noqa: E731
        **{"append_key": key, "append_value": value, "batch_indices": batch, "positions": pos,
           "paged_kv_cache": caches, "kv_indices": ids, "kv_indptr": indptr, "kv_last_page_len": last, **kw})
    with pytest.raises(ValueError, match="kv_layout"):
        call(kv_layout="NDH")
    with pytest.raises(TypeError, match="kv_layout"):
        call(kv_layout=0)
    bad_ids = ids.copy()
    bad_ids[1] = 999
    with pytest.raises(ValueError, match=r"0 ≤ kv_indices\[1\] < \d+ \(a page of the caches\), got 999"):
        call(kv_indices=bad_ids)
    with pytest.raises(ValueError, match="positions"):
        call(positions=pos + 100)
    with pytest.raises(TypeError, match="positions"):
        call(positions=pos.astype(np.int64))
    with pytest.raises(ValueError, match="paged_kv_cache"):
        call(paged_kv_cache=caches + (caches[0],))
    with pytest.raises(ValueError, match="paged_kv_cache"):
        call(paged_kv_cache=caches[0])
    assert all(np.array_equal(b, c) for b, c in zip(before, caches))


@pytest.mark.parametrize("index", [np.int32, np.int64])
def test_get_batch_indices_positions(index):
    indptr = np.array([0, 2, 2, 5], index)
    seq_lens = np.array([5, 9, 3], index)
    batch, pos = ferrinfer.get_batch_indices_positions(indptr, seq_lens, 5)
    assert batch.dtype == np.int32 and pos.dtype == np.int32 and batch.shape == (5,)
    assert batch.tolist() == [0, 0, 2, 2, 2] and pos.tolist() == [3, 4, 0, 1, 2]
    batch, pos = ferrinfer.get_batch_indices_positions(indptr, seq_lens, 7)
    assert batch.tolist()[5:] == [-1, -1] and pos.tolist()[5:] == [-1, -1]
    params = list(inspect.signature(ferrinfer.get_batch_indices_positions).parameters)
    assert params[:3] == ["append_indptr", "seq_lens", "nnz"]
    with pytest.raises(ValueError, match="nnz"):
        ferrinfer.get_batch_indices_positions(indptr, seq_lens, -1)
