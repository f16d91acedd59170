"""The rope family in the `ferrinfer` wheel on the CPU backend through NumPy's DLPack:
FlashInfer's signatures (`rotary_dim=None`, `interleave=False`), `(q_rope, k_rope)` shaped as `q`
and `k` with different head counts, the in-place forms, llama 3.1's frequencies, vLLM's
`apply_rope_with_cos_sin_cache` (FlashInfer's positional order, flattened heads, partial tables,
GPT-J pairs), and errors that name the argument (a float `pos_ids` is a TypeError)."""
import inspect

import numpy as np
import pytest

import ferrinfer

RNG = np.random.default_rng(5)


def rope_ref(x, pos, rotary_dim=None, interleave=False, scale=1.0, theta=1e4, llama=None):
    """f64 rope with FlashInfer's f32 angle: f32(pos) · f32(freq)."""
    x = x.astype(np.float64)
    d = x.shape[-1] if rotary_dim is None else rotary_dim
    i = np.arange(d // 2)
    f = theta ** (-2.0 * i / d)
    if llama:
        low, high, old = llama
        a, b = old / (2 * np.pi * high - 2 * np.pi * low), -1.0 / (high / low - 1.0)
        s = np.clip(f * a + b, 0.0, 1.0)
        f = (1 - s) * f / scale + s * f
    else:
        f = f / scale
    angle = (pos.astype(np.float32)[:, None] * f.astype(np.float32)[None, :]).astype(np.float64)
    cos, sin = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]
    out = x.copy()
    a, b = (2 * i, 2 * i + 1) if interleave else (i, i + d // 2)
    out[..., a] = x[..., a] * cos - x[..., b] * sin
    out[..., b] = x[..., b] * cos + x[..., a] * sin
    return out


def q_k(tokens, dim, dtype=np.float32):
    return (RNG.standard_normal((tokens, 4, dim)).astype(dtype), RNG.standard_normal((tokens, 2, dim)).astype(dtype))


def test_signatures_follow_flashinfer():
    assert str(inspect.signature(ferrinfer.apply_rope_pos_ids)).startswith(
        "(q, k, pos_ids, rotary_dim=None, interleave=False, rope_scale=1.0, rope_theta=10000.0"
    )
    assert "old_context_len=8192" in str(inspect.signature(ferrinfer.apply_llama31_rope_pos_ids))


@pytest.mark.parametrize("rotary_dim,interleave", [(None, False), (None, True), (32, False), (32, True)])
@pytest.mark.parametrize("pos_dtype", [np.int32, np.int64])
def test_apply_rope_pos_ids_matches_the_reference(rotary_dim, interleave, pos_dtype):
    q, k = q_k(9, 64)
    pos = RNG.integers(0, 100_000, 9).astype(pos_dtype)
    q_rope, k_rope = ferrinfer.apply_rope_pos_ids(q, k, pos, rotary_dim=rotary_dim, interleave=interleave)
    assert q_rope.shape == q.shape and k_rope.shape == k.shape and q_rope.dtype == np.float32
    for got, x in [(q_rope, q), (k_rope, k)]:
        want = rope_ref(x, pos, rotary_dim, interleave)
        assert np.allclose(got, want, rtol=1e-5, atol=1e-5)


def test_llama31_and_in_place_agree_with_out_of_place():
    q, k = q_k(5, 128, np.float16)
    pos = np.array([0, 1, 500, 8191, 65_000], np.int32)
    q_rope, k_rope = ferrinfer.apply_llama31_rope_pos_ids(q, k, pos)
    want = rope_ref(q, pos, scale=8.0, theta=5e5, llama=(1.0, 4.0, 8192.0))
    assert np.linalg.norm(q_rope - want) / np.linalg.norm(want) < 2e-3
    assert ferrinfer.apply_llama31_rope_pos_ids_inplace(q, k, pos) is None
    assert np.array_equal(q, q_rope) and np.array_equal(k, k_rope)


def test_errors_name_the_argument():
    q, k = q_k(3, 16)
    with pytest.raises(TypeError, match="pos_ids"):
        ferrinfer.apply_rope_pos_ids(q, k, np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="rotary_dim"):
        ferrinfer.apply_rope_pos_ids(q, k, np.zeros(3, np.int32), rotary_dim=5)
    with pytest.raises(TypeError, match="interleave"):
        ferrinfer.apply_rope_pos_ids(q, k, np.zeros(3, np.int32), interleave="yes")


def cache_ref(x, pos, cache, head_size, is_neox=True):
    """f64 rope of `x` ([nnz, heads · head_size]) by the rows of vLLM's cos/sin cache."""
    nnz, rotary = x.shape[0], cache.shape[1]
    heads = x.reshape(nnz, -1, head_size).astype(np.float64)
    cos = cache[pos, : rotary // 2].astype(np.float64)[:, None, :]
    sin = cache[pos, rotary // 2 :].astype(np.float64)[:, None, :]
    i = np.arange(rotary // 2)
    a, b = (i, i + rotary // 2) if is_neox else (2 * i, 2 * i + 1)
    out = heads.copy()
    out[..., a] = heads[..., a] * cos - heads[..., b] * sin
    out[..., b] = heads[..., b] * cos + heads[..., a] * sin
    return out.reshape(x.shape)


def test_cos_sin_cache_signature_is_flashinfers():
    assert str(inspect.signature(ferrinfer.apply_rope_with_cos_sin_cache)).startswith(
        "(positions, query, key, head_size, cos_sin_cache, is_neox=True, query_out=None, key_out=None"
    )
    assert str(inspect.signature(ferrinfer.apply_rope_with_cos_sin_cache_inplace)).startswith(
        "(positions, query, key, head_size, cos_sin_cache, is_neox=True"
    )


@pytest.mark.parametrize("rotary", [64, 32])
@pytest.mark.parametrize("is_neox", [True, False])
def test_apply_rope_with_cos_sin_cache_by_position(rotary, is_neox):
    """Positional arguments in FlashInfer's order; outputs like the flattened inputs (f16 values,
    int64 positions: the outputs are f16, not the positions' dtype)."""
    nnz, head_size, rows = 7, 64, 300
    query = RNG.standard_normal((nnz, 4 * head_size)).astype(np.float16)
    key = RNG.standard_normal((nnz, 2 * head_size)).astype(np.float16)
    cache = RNG.standard_normal((rows, rotary)).astype(np.float32)
    pos = RNG.integers(0, rows, nnz).astype(np.int64)
    q_out, k_out = ferrinfer.apply_rope_with_cos_sin_cache(pos, query, key, head_size, cache, is_neox)
    assert q_out.shape == query.shape and k_out.shape == key.shape and q_out.dtype == np.float16
    for got, x in [(q_out, query), (k_out, key)]:
        want = cache_ref(x, pos, cache, head_size, is_neox)
        assert np.linalg.norm(got - want) / np.linalg.norm(want) < 2e-3
    assert ferrinfer.apply_rope_with_cos_sin_cache_inplace(pos, query, key, head_size, cache, is_neox=is_neox) is None
    assert np.array_equal(query, q_out) and np.array_equal(key, k_out)


def test_cos_sin_cache_errors_name_the_argument():
    query, key = np.zeros((3, 64), np.float32), np.zeros((3, 32), np.float32)
    cache, pos = np.zeros((10, 32), np.float32), np.array([0, 9, 2], np.int32)
    # `positions` comes first: the call's device is read from it, and a problem there names it.
    with pytest.raises(TypeError, match="`positions` is a list, which supports neither"):
        ferrinfer.apply_rope_with_cos_sin_cache([0, 9, 2], query, key, 32, cache)
    with pytest.raises(TypeError, match="cos_sin_cache"):
        ferrinfer.apply_rope_with_cos_sin_cache(pos, query, key, 32, cache.astype(np.float16))
    with pytest.raises(ValueError, match="positions"):
        ferrinfer.apply_rope_with_cos_sin_cache(np.array([0, 10, 2], np.int32), query, key, 32, cache)
    with pytest.raises(ValueError, match="query"):
        ferrinfer.apply_rope_with_cos_sin_cache(pos, query, key, 48, cache)
    with pytest.raises(TypeError, match="head_size"):
        ferrinfer.apply_rope_with_cos_sin_cache(pos, query, key, 32.5, cache)
