"""The sampling family in the `ferrinfer` wheel on the CPU backend through NumPy's DLPack:
softmax's FlashInfer signature, f32 probabilities whatever the logits' dtype, temperatures, and
errors raised with the Rust messages."""
import inspect

import numpy as np
import pytest

import ferrinfer

RNG = np.random.default_rng(1)


def softmax_ref(x, temperature):
    u = x.astype(np.float64) / temperature
    e = np.exp(u - u.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape", [(3, 32000), (2, 5, 1000), (1, 7)])
@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_softmax_returns_f32_probabilities(dtype, shape, temperature):
    x = (3 * RNG.standard_normal(shape)).astype(dtype)
    probs = ferrinfer.softmax(x, temperature)
    assert probs.dtype == np.float32 and probs.shape == x.shape
    np.testing.assert_allclose(probs, softmax_ref(x, temperature), rtol=2e-5, atol=1e-9)


def test_softmax_writes_into_out_and_zero_temperature_is_uniform():
    x = RNG.standard_normal((4, 100)).astype(np.float32)
    out = np.full_like(x, np.nan)
    assert ferrinfer.softmax(x, temperature=0.0, out=out) is out
    assert np.all(out == np.float32(1 / 100))
    # After top_k_mask_logits: the kept logits alike, the masked ones (−∞) nothing, not NaN.
    masked = ferrinfer.top_k_mask_logits(np.array([[0.5, 1, 2, 3, -1]], np.float32), 2)
    assert np.array_equal(ferrinfer.softmax(masked, 0.0), [[0, 0, 0.5, 0.5, 0]])


def test_softmax_signature_and_errors():
    assert str(inspect.signature(ferrinfer.softmax)) == "(logits, temperature=1.0, out=None, enable_pdl=None)"
    x = RNG.standard_normal((2, 64)).astype(np.float16)
    out = np.full((2, 64), np.nan, dtype=np.float16)
    with pytest.raises(TypeError, match="`out` has dtype f16; expected f32"):
        ferrinfer.softmax(x, out=out)
    assert np.isnan(out).all()
    with pytest.raises(ValueError, match="`temperature` is -1"):
        ferrinfer.softmax(x, -1.0)


def top_k_kept(x, k):
    """Entries at or above each row's k-th largest (NumPy's order: no NaN in these tests)."""
    kth = -np.sort(-x.astype(np.float64), axis=-1)[..., k - 1 : k]
    return x >= kth


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape", [(3, 32000), (2, 5, 1000), (1, 7)])
@pytest.mark.parametrize("k", [1, 50, 999])
def test_top_k_mask_logits_keeps_the_k_largest_and_ties(dtype, shape, k):
    x = np.round(4 * RNG.standard_normal(shape)).astype(dtype)  # many ties
    masked = ferrinfer.top_k_mask_logits(x, k)
    assert masked.dtype == x.dtype and masked.shape == x.shape
    kept = top_k_kept(x, min(k, shape[-1]))
    np.testing.assert_array_equal(masked, np.where(kept, x, -np.inf).astype(dtype))


@pytest.mark.parametrize("shape", [(3, 32000), (1, 7)])
@pytest.mark.parametrize("k", [1, 50, 40000])
def test_top_k_renorm_probs_renormalises_the_k_largest(shape, k):
    p = RNG.random(shape).astype(np.float32)
    out = ferrinfer.top_k_renorm_probs(p, k)
    kept = top_k_kept(p, min(k, shape[-1]))
    want = np.where(kept, p, 0) / np.where(kept, p, 0).astype(np.float64).sum(-1, keepdims=True)
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=1e-9)


def test_top_k_signatures_and_errors():
    assert str(inspect.signature(ferrinfer.top_k_mask_logits)) == "(logits, top_k, out=None, enable_pdl=None)"
    assert str(inspect.signature(ferrinfer.top_k_renorm_probs)) == "(probs, top_k, out=None, enable_pdl=None)"
    x = RNG.standard_normal((2, 64)).astype(np.float32)
    with pytest.raises(TypeError, match="missing required argument: 'top_k'"):
        ferrinfer.top_k_mask_logits(x)
    with pytest.raises(TypeError, match="`top_k` must be an int; got float"):
        ferrinfer.top_k_mask_logits(x, 2.5)
    out = np.full((2, 64), np.nan, dtype=np.float32)
    with pytest.raises(ValueError, match="`top_k` is 0"):
        ferrinfer.top_k_renorm_probs(x, 0, out=out)
    assert np.isnan(out).all()


def test_softmax_takes_a_temperature_a_row():
    x = (3 * RNG.standard_normal((3, 500))).astype(np.float32)
    temperatures = np.array([0.5, 1.0, 2.0], dtype=np.float32)
    probs = ferrinfer.softmax(x, temperatures)
    for row, t in enumerate(temperatures):
        np.testing.assert_allclose(probs[row], softmax_ref(x[row], t), rtol=2e-5, atol=1e-9)
        assert np.array_equal(probs[row], ferrinfer.softmax(x[row : row + 1], float(t))[0])
    with pytest.raises(ValueError, match=r"`temperature` has shape \[2\]; expected \[3\]"):
        ferrinfer.softmax(x, temperatures[:2])
    with pytest.raises(ValueError, match="`temperature` is -1"):
        ferrinfer.softmax(x, np.array([1.0, -1.0, 1.0], dtype=np.float32))
    with pytest.raises(TypeError, match="`temperature` has dtype f16"):
        ferrinfer.softmax(x, temperatures.astype(np.float16))


def test_top_k_takes_a_k_a_row():
    x = np.round(4 * RNG.standard_normal((4, 300))).astype(np.float32)
    ks = np.array([1, 7, 0, 50], dtype=np.int32)
    masked = ferrinfer.top_k_mask_logits(x, ks)
    for row, k in enumerate(ks):
        want = ferrinfer.top_k_mask_logits(x[row : row + 1], int(k) if k > 0 else 300)[0]
        np.testing.assert_array_equal(masked[row], want)
    with pytest.raises(TypeError, match="`top_k` has dtype i64"):
        ferrinfer.top_k_mask_logits(x, ks.astype(np.int64))
    with pytest.raises(ValueError, match=r"`top_k` has shape \[3\]; expected \[4\]"):
        ferrinfer.top_k_renorm_probs(np.abs(x), ks[:3])


def top_p_kept(p, top_p):
    """Entries whose larger entries (strictly) hold less than top_p of the row (f64)."""
    p64 = p.astype(np.float64)
    above = np.array([[row[row > x].sum() for x in row] for row in p64.reshape(-1, p.shape[-1])])
    return above.reshape(p.shape) < np.float64(np.float32(top_p)) * p64.sum(-1, keepdims=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("top_p", [0.1, 0.5, 0.9, 1.0])
def test_top_p_renorm_probs_keeps_the_largest_holding_the_share(dtype, top_p):
    p = (np.round(8 * RNG.random((3, 2000))) / 8).astype(dtype)  # many ties, some zeros
    out = ferrinfer.top_p_renorm_probs(p, top_p)
    assert out.dtype == p.dtype and out.shape == p.shape
    kept = top_p_kept(p, top_p)
    want = np.where(kept, p.astype(np.float64), 0)
    want /= want.sum(-1, keepdims=True)
    tolerance = dict(rtol=2e-5, atol=1e-9) if dtype == np.float32 else dict(rtol=2e-3, atol=3e-8)
    np.testing.assert_allclose(out, want, **tolerance)


def test_top_p_signature_a_share_a_row_and_errors():
    assert str(inspect.signature(ferrinfer.top_p_renorm_probs)) == "(probs, top_p, out=None, enable_pdl=None)"
    p = RNG.random((3, 500)).astype(np.float32)
    shares = np.array([0.5, 1.0, 0.2], dtype=np.float32)
    out = ferrinfer.top_p_renorm_probs(p, shares)
    for row, share in enumerate(shares):
        assert np.array_equal(out[row], ferrinfer.top_p_renorm_probs(p[row : row + 1], float(share))[0])
    out = np.full_like(p, np.nan)
    for bad in [0.0, 1.5]:
        with pytest.raises(ValueError, match="`top_p` is"):
            ferrinfer.top_p_renorm_probs(p, bad, out=out)
    assert np.isnan(out).all()
    with pytest.raises(TypeError, match="`top_p` has dtype"):
        ferrinfer.top_p_renorm_probs(p, shares.astype(np.int32))  # f32 shares only


SAMPLING_OPS = [
    ("sampling_from_probs", ()),
    ("top_k_sampling_from_probs", (3,)),
    ("top_p_sampling_from_probs", (0.6,)),
    ("min_p_sampling_from_probs", (0.3,)),
    # Of the test's row, top-k keeps 3 and top-p 2 of those (of the whole row it would keep 6).
    ("top_k_top_p_sampling_from_probs", (3, 0.8)),
    ("top_k_top_p_sampling_from_logits", (3, 0.8)),
]


def sampling_input(name, probs):
    """What an op draws from for rows of probabilities: them, or their logarithms (logits)."""
    if name.endswith("_from_logits"):
        with np.errstate(divide="ignore"):
            return np.log(probs)
    return probs


def kept_by(name, row, *thresholds):
    """The entries each sampling op draws among, by its definition."""
    def top_k(k):
        return row >= np.sort(row)[::-1][k - 1]

    def top_p(p, among):
        above = np.array([row[row > q].sum() for q in row])
        return among & (above < np.float32(p) * row[among].sum())

    if name == "top_k_sampling_from_probs":
        return top_k(*thresholds)
    if name == "top_p_sampling_from_probs":
        return top_p(*thresholds, np.full(row.shape, True))
    if name == "min_p_sampling_from_probs":
        return row >= np.float32(thresholds[0]) * row.max()
    if name.startswith("top_k_top_p_sampling"):
        return top_p(thresholds[1], top_k(thresholds[0]))
    return row > 0


@pytest.mark.parametrize("name, threshold", SAMPLING_OPS)
def test_sampling_ops_draw_int32_tokens_among_the_kept_entries(name, threshold):
    op = getattr(ferrinfer, name)
    row = np.array([0.02, 0.25, 0.0, 0.08, 0.3, 0.05, 0.12, 0.1, 0.0, 0.08], dtype=np.float32)
    probs = sampling_input(name, np.tile(row, (2000, 1)))
    samples = op(probs, *threshold, 7, 0)
    assert samples.dtype == np.int32 and samples.shape == (2000,)
    kept = kept_by(name, row, *threshold)
    drawn = np.bincount(samples, minlength=row.size)
    assert np.all(drawn[~kept] == 0), drawn
    # The kept entries in proportion (a loose check here; the Rust tests run chi-square).
    share = drawn[kept] / drawn.sum()
    expected = row[kept] / row[kept].sum()
    assert np.all(np.abs(share - expected) < 0.05), (share, expected)
    assert np.array_equal(op(probs, *threshold, 7, 0), samples), "a draw is a function of (seed, offset)"
    assert not np.array_equal(op(probs, *threshold, 7, 2), samples), "another offset draws afresh"


def test_sampling_signatures_out_and_errors():
    sig = str(inspect.signature(ferrinfer.top_k_sampling_from_probs))
    assert sig == "(probs, top_k, seed, offset, samples=None, enable_pdl=None)", sig
    probs = np.abs(RNG.standard_normal((4, 100))).astype(np.float32)
    samples = np.full(4, -1, dtype=np.int32)
    assert ferrinfer.sampling_from_probs(probs, 1, 0, samples=samples) is samples
    assert np.all((samples >= 0) & (samples < 100))
    bad = np.full(4, -1, dtype=np.int32)
    with pytest.raises(ValueError, match="`seed` is -1"):
        ferrinfer.sampling_from_probs(probs, -1, 0, samples=bad)
    with pytest.raises(TypeError, match="`samples` has dtype f32"):
        ferrinfer.sampling_from_probs(probs, 1, 0, samples=np.zeros(4, dtype=np.float32))
    with pytest.raises(ValueError, match="`samples`"):
        ferrinfer.sampling_from_probs(probs, 1, 0, samples=np.zeros(5, dtype=np.int32))
    with pytest.raises(ValueError, match="`min_p` is 1.5"):
        ferrinfer.min_p_sampling_from_probs(probs, 1.5, 1, 0, samples=bad)
    assert np.all(bad == -1)


@pytest.mark.parametrize("name, threshold", SAMPLING_OPS)
def test_sampling_takes_seed_and_offset_tensors_a_row_or_one(name, threshold):
    op = getattr(ferrinfer, name)
    probs = np.abs(RNG.standard_normal((6, 300))).astype(np.float32)
    # An int64 tensor's values are read as their bits: -1 is the seed 2^64 - 1.
    seeds = np.array([0, 1, 42, -1, 2**53 + 1, -(2**63)], dtype=np.int64)
    offsets = np.array([0, 2, 4, 6, -2, 1_000_006], dtype=np.int64)
    samples = op(probs, *threshold, seeds, offsets)
    for row in range(6):
        alone = op(probs, *threshold, int(seeds[row]) % 2**64, int(offsets[row]) % 2**64)
        assert samples[row] == alone[row], row
    one = np.array([9], dtype=np.int64)
    assert np.array_equal(op(probs, *threshold, one, 5), op(probs, *threshold, 9, 5)), "one seed for every row"
    with pytest.raises(TypeError, match="`seed` has dtype i32"):
        op(probs, *threshold, seeds.astype(np.int32), 0)
    with pytest.raises(ValueError, match="`offset`"):
        op(probs, *threshold, 1, offsets[:3])


@pytest.mark.parametrize("name, threshold", SAMPLING_OPS)
def test_seeds_and_offsets_take_every_u64_and_refuse_the_rest(name, threshold):
    op = getattr(ferrinfer, name)
    probs = np.abs(RNG.standard_normal((2, 100))).astype(np.float32)
    samples = op(probs, *threshold, 2**64 - 1, 2**64 - 2)
    assert samples.dtype == np.int32 and samples.shape == (2,)
    bits = [np.array([v], dtype=np.int64) for v in (-1, -2)]
    assert np.array_equal(samples, op(probs, *threshold, *bits)), "a number and an int64 tensor of its bits agree"
    for argument, value in [("seed", -1), ("seed", 2**64), ("offset", -1), ("offset", 2**70)]:
        given = {"seed": 1, "offset": 0, argument: value}
        with pytest.raises(ValueError, match=rf"`{argument}` is {value}; expected an integer, 0 ≤ value < 2\^64"):
            op(probs, *threshold, given["seed"], given["offset"])
    with pytest.raises(TypeError, match="`seed` must be an int; got float"):
        op(probs, *threshold, 1.5, 0)
