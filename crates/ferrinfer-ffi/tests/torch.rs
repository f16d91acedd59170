//! The tch adapter on CPU tensors: every op in every kind against ferrinfer's f64 reference, on
//! contiguous tensors and on narrowed views (start offset, row stride longer than the row) —
//! outputs included, whose memory around the view must stay untouched; in place; errors that
//! name the argument, come as the right `TchError` and leave every tensor untouched; the stream
//! rules that can be checked without a GPU; docs/adapters.md's quickstart.
//! Run with libtorch: `source scripts/torch/libtorch.sh` (docs/adapters.md).
#![cfg(feature = "torch")]

use ferrinfer_ffi::torch::{self as ft, TorchStream};
use ferrinfer_launch::norm::NormRoutine;
use ferrinfer_launch::reference::{self, random_normal};
use ferrinfer_launch::{DType, cuda_device_count};
use half::{bf16, f16};
use tch::{Device, Kind, TchError, Tensor};

const EPS: f32 = 1e-6;
const KINDS: [Kind; 3] = [Kind::Float, Kind::Half, Kind::BFloat16];

/// Random-normal values of `kind` (rounded from f32) as a CPU tensor `[rows, hidden]`:
/// contiguous, or (`narrow`) rows 1.. and columns 3.. of a larger tensor.
fn tensor(kind: Kind, rows: i64, hidden: i64, narrow: bool, seed: u64) -> Tensor {
    window(&buffer(kind, rows, hidden, narrow, seed), rows, hidden, narrow)
}

/// The memory of [`tensor`]: `[rows, hidden]`, or `[rows + 1, hidden + 5]` to narrow.
fn buffer(kind: Kind, rows: i64, hidden: i64, narrow: bool, seed: u64) -> Tensor {
    let (rows, width) = if narrow { (rows + 1, hidden + 5) } else { (rows, hidden) };
    let values = random_normal::<f32>((rows * width) as usize, seed);
    Tensor::from_slice(&values).view([rows, width]).to_kind(kind)
}

/// The `[rows, hidden]` view of a [`buffer`].
fn window(buffer: &Tensor, rows: i64, hidden: i64, narrow: bool) -> Tensor {
    if !narrow {
        return buffer.shallow_clone();
    }
    let view = buffer.narrow(0, 1, rows).narrow(1, 3, hidden);
    assert!(!view.is_contiguous() && view.stride() == [hidden + 5, 1]);
    view
}

/// A row of `hidden` random values.
fn row(kind: Kind, hidden: i64, seed: u64) -> Tensor {
    tensor(kind, 1, hidden, false, seed).view([hidden])
}

fn values(t: &Tensor) -> Vec<f64> {
    Vec::<f64>::try_from(t.to_kind(Kind::Double).contiguous().view([-1])).unwrap()
}

fn dtype(kind: Kind) -> DType {
    match kind {
        Kind::Half => DType::F16,
        Kind::BFloat16 => DType::Bf16,
        _ => DType::F32,
    }
}

/// The f64 reference of `routine` on the values before the call: (output, new residual).
fn reference_of(routine: NormRoutine, kind: Kind, x: &[f64], r: &[f64], w: &[f64], b: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let (hidden, eps, offset) = (w.len(), EPS as f64, routine.weight_offset() as f64);
    let fused = match kind {
        Kind::Half => reference::fused_add_rmsnorm::<f16>,
        Kind::BFloat16 => reference::fused_add_rmsnorm::<bf16>,
        _ => reference::fused_add_rmsnorm::<f32>,
    };
    match routine {
        NormRoutine::LayerNorm => (reference::layernorm(x, w, b, hidden, eps), r.to_vec()),
        _ if routine.is_fused() => fused(x, r, w, hidden, eps, offset),
        _ => (reference::rmsnorm(x, w, hidden, eps, offset), r.to_vec()),
    }
}

/// Runs `routine` on CPU tensors; the ops with an output write it into `out`.
fn run(
    routine: NormRoutine,
    x: &mut Tensor,
    r: &mut Tensor,
    w: &Tensor,
    b: &Tensor,
    out: &mut Tensor,
) -> Result<(), TchError> {
    let cpu = &TorchStream::Cpu;
    let returned = match routine {
        NormRoutine::RmsNorm => ft::rmsnorm(x, w, EPS, Some(out), cpu)?,
        NormRoutine::GemmaRmsNorm => ft::gemma_rmsnorm(x, w, EPS, Some(out), cpu)?,
        NormRoutine::LayerNorm => {
            let y = ft::layernorm(x, w, b, EPS, cpu)?;
            out.f_copy_(&y)?; // FlashInfer's layernorm has no `out`
            y
        }
        NormRoutine::FusedAddRmsNorm => return ft::fused_add_rmsnorm(x, r, w, EPS, cpu),
        NormRoutine::GemmaFusedAddRmsNorm => return ft::gemma_fused_add_rmsnorm(x, r, w, EPS, cpu),
    };
    assert!(routine == NormRoutine::LayerNorm || returned.data_ptr() == out.data_ptr(), "returns `out` itself");
    Ok(())
}

/// One op, kind and layout: written tensors match the reference, and the memory around narrowed
/// outputs (the rest of their buffer) is still the NaN it was filled with.
fn check(routine: NormRoutine, kind: Kind, narrow: bool, hidden: i64, seed: u64) {
    let rows = 7;
    let (mut x, mut r) = (tensor(kind, rows, hidden, narrow, seed), tensor(kind, rows, hidden, narrow, seed + 1));
    // layernorm takes f32 gamma and beta with every input kind (FlashInfer's signature).
    let weight_kind = if routine == NormRoutine::LayerNorm { Kind::Float } else { kind };
    let (w, b) = (row(weight_kind, hidden, seed + 2), row(weight_kind, hidden, seed + 3));
    let out_buffer = buffer(kind, rows, hidden, narrow, 0).fill_(f64::NAN);
    let mut out = window(&out_buffer, rows, hidden, narrow);
    let (x0, r0) = (values(&x), values(&r));
    run(routine, &mut x, &mut r, &w, &b, &mut out).unwrap();
    let (want, sums) = reference_of(routine, kind, &x0, &r0, &values(&w), &values(&b));
    let context = format!("{routine:?} {kind:?} narrow={narrow} hidden={hidden}");
    let got = if routine.is_fused() { values(&x) } else { values(&out) };
    reference::compare(dtype(kind), &got, &want).unwrap_or_else(|e| panic!("{context}: {e}"));
    reference::compare(dtype(kind), &values(&r), &sums).unwrap_or_else(|e| panic!("{context}: residual: {e}"));
    if !routine.is_fused() {
        let written = values(&out_buffer).iter().filter(|v| !v.is_nan()).count();
        assert_eq!(written, (rows * hidden) as usize, "{context}: wrote outside `out`");
    }
}

fn check_every_kind_and_layout(routine: NormRoutine, seed: u64) {
    for (i, kind) in KINDS.into_iter().enumerate() {
        for (j, (narrow, hidden)) in [(false, 1024), (true, 1024), (false, 111), (true, 111)].into_iter().enumerate() {
            check(routine, kind, narrow, hidden, seed + 100 * i as u64 + 10 * j as u64);
        }
    }
}

#[test]
fn torch_rmsnorm_matches_the_reference() {
    check_every_kind_and_layout(NormRoutine::RmsNorm, 1_000);
}

#[test]
fn torch_gemma_rmsnorm_matches_the_reference() {
    check_every_kind_and_layout(NormRoutine::GemmaRmsNorm, 2_000);
}

#[test]
fn torch_fused_add_rmsnorm_matches_the_reference() {
    check_every_kind_and_layout(NormRoutine::FusedAddRmsNorm, 3_000);
}

#[test]
fn torch_gemma_fused_add_rmsnorm_matches_the_reference() {
    check_every_kind_and_layout(NormRoutine::GemmaFusedAddRmsNorm, 4_000);
}

#[test]
fn torch_layernorm_matches_the_reference() {
    check_every_kind_and_layout(NormRoutine::LayerNorm, 5_000);
}

/// A new output is like `input`; `out = input` runs in place; 3-D input (QK-norm) is rows of
/// its last dimension; results agree with plain tch math.
#[test]
fn torch_new_output_in_place_and_three_dims() {
    let x = tensor(Kind::Float, 6, 128, false, 6_000).view([2, 3, 128]);
    let w = row(Kind::Float, 128, 6_001);
    let y = ft::rmsnorm(&x, &w, EPS, None, &TorchStream::Cpu).unwrap();
    assert_eq!((y.size(), y.kind(), y.device()), (x.size(), Kind::Float, Device::Cpu));
    assert_ne!(y.data_ptr(), x.data_ptr());
    let tch_math = &x * (x.square().mean_dim(-1, true, Kind::Float) + EPS as f64).rsqrt() * &w;
    reference::compare(DType::F32, &values(&y), &values(&tch_math)).unwrap();
    let mut in_place = x.shallow_clone();
    let returned = ft::rmsnorm(&x, &w, EPS, Some(&mut in_place), &TorchStream::Cpu).unwrap();
    assert_eq!(returned.data_ptr(), x.data_ptr());
    assert_eq!(values(&x), values(&y));
}

/// Each error names its argument, comes as the `TchError` variant tch uses for such a problem,
/// and leaves every tensor as it was.
#[test]
fn torch_errors_name_the_argument_and_write_nothing() {
    let cpu = &TorchStream::Cpu;
    let (mut x, mut r) = (tensor(Kind::BFloat16, 4, 64, false, 7_000), tensor(Kind::BFloat16, 4, 64, false, 7_001));
    let w = row(Kind::BFloat16, 64, 7_002);
    let mut out = Tensor::full([4, 64], f64::NAN, (Kind::BFloat16, Device::Cpu));
    let (x0, r0) = (values(&x), values(&r));
    let kind = |e: TchError| matches!(e, TchError::Kind(m) if m.contains("`weight` has dtype f32"));
    assert!(kind(ft::rmsnorm(&x, &row(Kind::Float, 64, 1), EPS, Some(&mut out), cpu).unwrap_err()));
    let shape = ft::fused_add_rmsnorm(&mut x, &mut r, &row(Kind::BFloat16, 32, 1), EPS, cpu).unwrap_err();
    assert!(matches!(&shape, TchError::Shape(m) if m.contains("`weight` has shape [32]")), "{shape}");
    let transposed = tensor(Kind::BFloat16, 64, 4, false, 1).tr();
    let layout = ft::gemma_rmsnorm(&transposed, &w, EPS, None, cpu).unwrap_err();
    assert!(matches!(&layout, TchError::Shape(m) if m.contains("`input`: the last dimension must be contiguous")));
    let integer = ft::rmsnorm(&x.to_kind(Kind::Int64), &w, EPS, None, cpu).unwrap_err();
    assert!(matches!(&integer, TchError::Kind(m) if m.starts_with("`input` has kind Int64")), "{integer}");
    let undefined = ft::rmsnorm(&x, &Tensor::new(), EPS, None, cpu).unwrap_err();
    assert!(matches!(&undefined, TchError::Torch(m) if m == "`weight` is an undefined tensor"), "{undefined}");
    let f16_gamma = ft::layernorm(&x, &row(Kind::Half, 64, 1), &row(Kind::Half, 64, 2), EPS, cpu).unwrap_err();
    assert!(matches!(&f16_gamma, TchError::Kind(m) if m.starts_with("`gamma` has dtype f16")), "{f16_gamma}");
    let beta = ft::layernorm(&x, &row(Kind::Float, 64, 1), &w, EPS, cpu).unwrap_err();
    assert!(matches!(&beta, TchError::Kind(m) if m.starts_with("`beta` has dtype bf16")), "{beta}");
    let eps = ft::gemma_fused_add_rmsnorm(&mut x, &mut r, &w, -1.0, cpu).unwrap_err();
    assert!(matches!(&eps, TchError::Torch(m) if m.starts_with("`eps` is -1")), "{eps}");
    let rows = tensor(Kind::BFloat16, 5, 64, false, 7_003);
    let overlap = ft::rmsnorm(&rows.narrow(0, 0, 4), &w, EPS, Some(&mut rows.narrow(0, 1, 4)), cpu).unwrap_err();
    assert!(matches!(&overlap, TchError::Torch(m) if m.starts_with("`out` overlaps `input`")), "{overlap}");
    for sparse in [x.to_sparse(None, None::<&[i64]>, None), x.to_sparse_csr(None)] {
        let error = ft::rmsnorm(&sparse, &w, EPS, None, cpu).unwrap_err();
        assert!(
            matches!(&error, TchError::Shape(m) if m == "`input`: unsupported layout: not a strided (dense) tensor")
        );
    }
    let negated = ft::rmsnorm(&x, &w.internal_neg_view(), EPS, None, cpu).unwrap_err();
    assert!(matches!(&negated, TchError::Shape(m) if m.starts_with("`weight`: unsupported layout: a lazily negated")));
    assert_eq!((values(&x), values(&r)), (x0, r0), "inputs untouched");
    assert!(values(&out).iter().all(|v| v.is_nan()), "`out` untouched");
}

/// CPU tensors never run on a CUDA stream; a stream of a device that does not exist is refused
/// when it is made. (CUDA tensors on the CPU stream: tests/torch_gpu.rs.)
#[test]
fn torch_streams_are_checked_against_the_tensors() {
    let x = tensor(Kind::Float, 2, 64, false, 8_000);
    let w = row(Kind::Float, 64, 8_001);
    let count = cuda_device_count();
    // SAFETY: ordinal `count` does not exist, so the (null) handle is never used.
    let missing = unsafe { TorchStream::cuda(count, 0) }.unwrap_err();
    let expected = format!("CUDA device {count} does not exist");
    assert!(matches!(&missing, TchError::Torch(m) if m.starts_with(&expected)), "{missing}");
    if count > 0 {
        // SAFETY: 0 is the legacy default stream of device 0, always alive.
        let stream = unsafe { TorchStream::cuda(0, 0) }.unwrap();
        let error = ft::rmsnorm(&x, &w, EPS, None, &stream).unwrap_err();
        assert!(
            matches!(&error, TchError::Torch(m) if m.starts_with("`stream` is on cuda:0; expected cpu")),
            "{error}"
        );
    }
}

/// docs/adapters.md's torch quickstart, run as written: the block between the markers is the
/// document's ```rust block (`torch_docs_quickstart_is_the_documented_one` checks the copy).
#[test]
fn torch_docs_quickstart() -> Result<(), tch::TchError> {
    // quickstart:begin
    use ferrinfer_ffi::torch::{self as ferrinfer, TorchStream};
    use tch::{Device, Kind, Tensor};

    let stream = TorchStream::Cpu; // CUDA tensors: TorchStream::Cuda(..) or unsafe TorchStream::cuda(device, raw)
    let x = Tensor::f_randn([4, 4096], (Kind::BFloat16, Device::Cpu))?;
    let w = Tensor::f_ones([4096], (Kind::BFloat16, Device::Cpu))?;
    let mut y = ferrinfer::rmsnorm(&x, &w, 1e-6, None, &stream)?; // a new tensor like x
    let same = ferrinfer::rmsnorm(&x, &w, 1e-6, Some(&mut y), &stream)?; // or into `out`, returned too
    assert_eq!(same.data_ptr(), y.data_ptr());

    let (mut hidden, mut residual) = (x.copy(), x.f_zeros_like()?);
    ferrinfer::fused_add_rmsnorm(&mut hidden, &mut residual, &w, 1e-6, &stream)?; // both in place
    assert!(residual.f_equal(&x)?); // residual += hidden (it was 0)
    assert!(hidden.f_allclose(&y, 1e-2, 1e-2, false)?); // hidden = rmsnorm(residual) * w

    let err = ferrinfer::rmsnorm(&x, &w.f_narrow(0, 0, 8)?, 1e-6, None, &stream).unwrap_err();
    assert!(matches!(err, tch::TchError::Shape(m) if m.contains("`weight` has shape [8]")));
    // quickstart:end
    Ok(())
}

#[test]
fn torch_docs_quickstart_is_the_documented_one() {
    let doc = include_str!("../../../docs/adapters.md");
    let section =
        doc.split("## torch (tch) quickstart").nth(1).expect("docs/adapters.md has `## torch (tch) quickstart`");
    let documented = section.split("```rust\n").nth(1).and_then(|s| s.split("```").next()).expect("a ```rust block");
    let this = include_str!("torch.rs");
    let test =
        this.split("// quickstart:begin\n").nth(1).and_then(|s| s.split("    // quickstart:end").next()).unwrap();
    let test: String = test.lines().map(|l| format!("{}\n", l.strip_prefix("    ").unwrap_or(l))).collect();
    assert_eq!(documented, test, "docs/adapters.md's torch snippet differs from the test that runs it");
}
