"""The `ferrinfer` wheel on the CPU backend through NumPy's DLPack: FlashInfer's signatures,
results against float64 references, in-place ops, and errors raised with the Rust messages."""
import numpy as np
import pytest

import ferrinfer

RNG = np.random.default_rng(0)


def rms_ref(x, w, eps, offset=0.0):
    x64 = x.astype(np.float64)
    return x64 / np.sqrt((x64**2).mean(-1, keepdims=True) + eps) * (w.astype(np.float64) + offset)


def close(got, want, dtype):
    tol = 1e-5 if dtype == np.float32 else 2e-3
    rel = np.linalg.norm(got.astype(np.float64) - want) / np.linalg.norm(want)
    assert rel < tol, rel


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape", [(7, 4096), (3, 111), (5, 4, 128)])
def test_rmsnorm_and_gemma(dtype, shape):
    x = RNG.standard_normal(shape).astype(dtype)
    w = RNG.standard_normal(shape[-1]).astype(dtype)
    close(ferrinfer.rmsnorm(x, w), rms_ref(x, w, 1e-6), dtype)
    close(ferrinfer.gemma_rmsnorm(x, w, eps=1e-5), rms_ref(x, w, 1e-5, 1.0), dtype)


def test_rmsnorm_writes_into_out_and_returns_it():
    x = RNG.standard_normal((4, 64)).astype(np.float32)
    w = RNG.standard_normal(64).astype(np.float32)
    out = np.full_like(x, np.nan)
    assert ferrinfer.rmsnorm(x, w, out=out) is out
    close(out, rms_ref(x, w, 1e-6), np.float32)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_fused_add_rmsnorm_updates_both_in_place(dtype):
    x = RNG.standard_normal((9, 1004)).astype(dtype)
    r = RNG.standard_normal((9, 1004)).astype(dtype)
    w = RNG.standard_normal(1004).astype(dtype)
    x0, r0 = x.copy(), r.copy()
    assert ferrinfer.fused_add_rmsnorm(x, r, w) is None
    close(r, x0.astype(np.float64) + r0, dtype)
    close(x, rms_ref(r, w, 1e-6), dtype)


def test_layernorm_with_f32_gamma_beta_on_f16_input():
    x = RNG.standard_normal((6, 500)).astype(np.float16)
    g, b = RNG.standard_normal(500).astype(np.float32), RNG.standard_normal(500).astype(np.float32)
    x64 = x.astype(np.float64)
    want = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-6) * g + b
    close(ferrinfer.layernorm(x, g, b), want, np.float16)


def test_errors_carry_the_rust_message_and_leave_out_untouched():
    x = RNG.standard_normal((4, 64)).astype(np.float32)
    out = np.full_like(x, np.nan)
    with pytest.raises(ValueError, match=r"`weight` has shape \[32\]; expected \[64\]"):
        ferrinfer.rmsnorm(x, np.ones(32, np.float32), out=out)
    with pytest.raises(TypeError, match="`weight` has dtype f16; expected f32"):
        ferrinfer.rmsnorm(x, np.ones(64, np.float16), out=out)
    with pytest.raises(ValueError, match="`eps` is -1"):
        ferrinfer.rmsnorm(x, np.ones(64, np.float32), eps=-1.0, out=out)
    assert np.isnan(out).all()
    with pytest.raises(TypeError, match="`input` is a list, which supports neither"):
        ferrinfer.rmsnorm([1.0, 2.0], np.ones(2, np.float32))
    # Any tensor argument, not only the first: a TypeError naming it, not an AttributeError.
    with pytest.raises(TypeError, match="`weight` is a list, which supports neither"):
        ferrinfer.rmsnorm(x, [1.0] * 64, out=out)
    with pytest.raises(TypeError, match="`residual` is a float, which supports neither"):
        ferrinfer.fused_add_rmsnorm(x, 3.0, np.ones(64, np.float32))
    assert np.isnan(out).all()


def test_export_and_dtype_errors_name_the_argument():
    x = RNG.standard_normal((4, 64)).astype(np.float32)
    w = np.ones(64, np.float32)
    w.flags.writeable = False  # NumPy refuses to export read-only arrays as legacy DLPack
    with pytest.raises(BufferError, match="`weight`: __dlpack__ failed"):
        ferrinfer.rmsnorm(x, w)
    g, b = np.ones(64, np.float64), np.zeros(64, np.float32)
    with pytest.raises((TypeError, ValueError), match="`gamma`"):
        ferrinfer.layernorm(x, g, b)


def test_dtype_errors_are_type_errors_naming_the_dtype():
    x = RNG.standard_normal((4, 64)).astype(np.float32)
    # int32 and int64 import (per-row `top_k` and `seed` take them) and are refused by the op,
    # which computes in floats.
    with pytest.raises(TypeError, match="`input` has dtype i32; expected f16, bf16 or f32"):
        ferrinfer.rmsnorm(x.astype(np.int32), np.ones(64, np.float32))
    with pytest.raises(TypeError, match="`input` has dtype i64; expected f16, bf16 or f32"):
        ferrinfer.rmsnorm(x.astype(np.int64), np.ones(64, np.float32))
    with pytest.raises(TypeError, match="`input` has dtype uint8; expected float16, bfloat16, float32, int32 or int64"):
        ferrinfer.rmsnorm(x.astype(np.uint8), np.ones(64, np.float32))
    with pytest.raises(TypeError, match="`weight` has dtype float64"):
        ferrinfer.rmsnorm(x, np.ones(64, np.float64))


def test_signatures_are_flashinfers_and_arguments_bind_like_python():
    import inspect

    assert str(inspect.signature(ferrinfer.rmsnorm)) == "(input, weight, eps=1e-06, out=None, enable_pdl=None)"
    assert str(inspect.signature(ferrinfer.layernorm)) == "(input, gemma, beta, eps=1e-06, out=None, enable_pdl=None)"
    assert str(inspect.signature(ferrinfer.fused_add_rmsnorm)) == "(input, residual, weight, eps=1e-06, enable_pdl=None)"
    x = RNG.standard_normal((3, 32)).astype(np.float32)
    w = RNG.standard_normal(32).astype(np.float32)
    close(ferrinfer.rmsnorm(input=x, weight=w, eps=1e-5, enable_pdl=False), rms_ref(x, w, 1e-5), np.float32)
    g, b = np.ones(32, np.float32), np.zeros(32, np.float32)
    assert ferrinfer.layernorm(x, gemma=g, beta=b).shape == x.shape
    assert ferrinfer.layernorm(x, gamma=g, beta=b).shape == x.shape
    with pytest.raises(TypeError, match="missing required argument: 'weight'"):
        ferrinfer.rmsnorm(x)
    with pytest.raises(TypeError, match="unexpected keyword argument 'epsilon'"):
        ferrinfer.rmsnorm(x, w, epsilon=1e-6)
    with pytest.raises(TypeError, match="multiple values for argument 'weight'"):
        ferrinfer.rmsnorm(x, w, weight=w)


def test_empty_batches_return_empty_results():
    x = np.zeros((0, 64), np.float32)
    assert ferrinfer.rmsnorm(x, np.ones(64, np.float32)).shape == (0, 64)


def test_rows_of_nothing_are_an_error():
    with pytest.raises(ValueError, match="hidden size"):
        ferrinfer.rmsnorm(np.zeros((4, 0), np.float32), np.ones(0, np.float32))
    with pytest.raises(ValueError, match="d ≥ 1"):
        ferrinfer.silu_and_mul(np.zeros((4, 0), np.float32))
