"""The cascade family in the `ferrinfer` wheel on the CPU backend through NumPy's DLPack:
`merge_state` returns FlashInfer's `(v, s)` pair, `merge_state_in_place` updates its first state,
empty partitions merge without NaN, and errors carry the Rust messages."""
import inspect

import numpy as np
import pytest

import ferrinfer

RNG = np.random.default_rng(3)


def merge_ref(v_a, s_a, v_b, s_b):
    s_a, s_b = s_a.astype(np.float64), s_b.astype(np.float64)
    m = np.maximum(s_a, s_b)
    w_a, w_b = np.exp2(s_a - m), np.exp2(s_b - m)
    total = w_a + w_b
    v = (w_a[..., None] * v_a.astype(np.float64) + w_b[..., None] * v_b.astype(np.float64)) / total[..., None]
    return v, np.log2(total) + m


def state(shape, dtype):
    return RNG.standard_normal(shape).astype(dtype), (RNG.standard_normal(shape[:-1]) * 4).astype(np.float32)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape", [(7, 32, 128), (3, 111), (1, 8, 256)])
def test_merge_state_returns_the_merged_pair(dtype, shape):
    (v_a, s_a), (v_b, s_b) = state(shape, dtype), state(shape, dtype)
    v, s = ferrinfer.merge_state(v_a, s_a, v_b, s_b)
    want_v, want_s = merge_ref(v_a, s_a, v_b, s_b)
    assert v.dtype == dtype and v.shape == shape and s.dtype == np.float32 and s.shape == shape[:-1]
    tol = 1e-5 if dtype == np.float32 else 2e-3
    assert np.linalg.norm(v - want_v) / np.linalg.norm(want_v) < tol
    assert np.allclose(s, want_s, rtol=1e-5, atol=1e-5)


def test_merge_state_in_place_updates_the_first_state():
    (v, s), (v_b, s_b) = state((4, 2, 64), np.float32), state((4, 2, 64), np.float32)
    want_v, want_s = merge_ref(v, s, v_b, s_b)
    assert ferrinfer.merge_state_in_place(v, s, v_b, s_b) is None
    assert np.allclose(v, want_v, rtol=1e-5, atol=1e-6) and np.allclose(s, want_s, rtol=1e-5, atol=1e-5)


def test_empty_partitions_merge_without_nan():
    v_a, v_b = np.ones((2, 4), np.float32), np.full((2, 4), 3.0, np.float32)
    s_a = np.array([-np.inf, -np.inf], np.float32)
    s_b = np.array([1.5, -np.inf], np.float32)
    v, s = ferrinfer.merge_state(v_a, s_a, v_b, s_b)
    assert (v[0] == 3.0).all() and s[0] == 1.5
    assert (v[1] == 0.0).all() and s[1] == -np.inf


def test_scores_must_be_float32_and_errors_name_the_argument():
    v_a, s_a = state((3, 16), np.float16)
    with pytest.raises(TypeError, match="s_b"):
        ferrinfer.merge_state(v_a, s_a, v_a.copy(), s_a.astype(np.float16))
    with pytest.raises(ValueError, match="v_b"):
        ferrinfer.merge_state(v_a, s_a, v_a[:, :8].copy(), s_a.copy())


def test_signature_is_flashinfers_plus_optional_outputs():
    params = list(inspect.signature(ferrinfer.merge_state).parameters)
    assert params[:4] == ["v_a", "s_a", "v_b", "s_b"]
    assert params[4:] == ["v_merged", "s_merged", "enable_pdl"]


def merge_states_ref(v, s):
    """f64 merge over axis 1 (the states) of `v` `[seq, states, heads…, dim]`, `s` `[seq, states, heads…]`."""
    s = s.astype(np.float64)
    m = s.max(axis=1, keepdims=True)
    w = np.exp2(s - m)
    total = w.sum(axis=1)
    merged = (w[..., None] * v.astype(np.float64)).sum(axis=1) / total[..., None]
    return merged, np.log2(total) + m[:, 0]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape", [(6, 5, 4, 128), (3, 2, 64), (2, 7, 2, 3, 32)])
def test_merge_states_merges_the_second_dimension(dtype, shape):
    v = RNG.standard_normal(shape).astype(dtype)
    s = (RNG.standard_normal(shape[:-1]) * 4).astype(np.float32)
    v_merged, s_merged = ferrinfer.merge_states(v, s)
    want_v, want_s = merge_states_ref(v, s)
    assert v_merged.shape == want_v.shape and v_merged.dtype == dtype and s_merged.shape == want_s.shape
    tol = 1e-5 if dtype == np.float32 else 2e-3
    assert np.linalg.norm(v_merged - want_v) / np.linalg.norm(want_v) < tol
    assert np.allclose(s_merged, want_s, rtol=1e-5, atol=1e-5)


def test_merge_states_of_two_states_is_merge_state():
    v = RNG.standard_normal((4, 2, 3, 64)).astype(np.float32)
    s = (RNG.standard_normal((4, 2, 3)) * 4).astype(np.float32)
    pair = ferrinfer.merge_state(v[:, 0].copy(), s[:, 0].copy(), v[:, 1].copy(), s[:, 1].copy())
    stacked = ferrinfer.merge_states(v, s)
    assert all(np.array_equal(a, b) for a, b in zip(stacked, pair))


def test_merge_states_needs_a_states_dimension():
    with pytest.raises(ValueError, match="at least 3 dimensions"):
        ferrinfer.merge_states(np.ones((4, 8), np.float32), np.zeros((4,), np.float32))


def test_empty_inputs_take_any_strides():
    """NumPy gives empty arrays strides of 0: no states merge to zeros and a score of −inf, no
    sequences to nothing."""
    v_merged, s_merged = ferrinfer.merge_states(np.zeros((3, 0, 4, 8), np.float32), np.zeros((3, 0, 4), np.float32))
    assert v_merged.shape == (3, 4, 8) and not v_merged.any() and (s_merged == -np.inf).all()
    v_merged, s_merged = ferrinfer.merge_states(np.zeros((0, 3, 4, 8), np.float32), np.zeros((0, 3, 4), np.float32))
    assert v_merged.shape == (0, 4, 8) and s_merged.shape == (0, 4)
