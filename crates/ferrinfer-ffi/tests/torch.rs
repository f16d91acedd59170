//! The tch adapter on CPU tensors: every op in every kind against ferrinfer's f64 reference, on
//! contiguous tensors and on narrowed views (start offset, row stride longer than the row) —
//! outputs included, whose memory around the view must stay untouched; in place; errors that
//! name the argument, come as the right `TchError` and leave every tensor untouched; the stream
//! rules that can be checked without a GPU; docs/adapters.md's quickstart.
//! Run with libtorch: `source scripts/torch/libtorch.sh` (docs/adapters.md).
#![cfg(feature = "torch")]

use ferrinfer_ffi::torch::{self as ft, TorchStream};
use ferrinfer_launch::op::{DTypeRule, Domain, Extent, OpInfo, Role, TensorArg};
use ferrinfer_launch::reference::{self, random_normal};
use ferrinfer_launch::scalar::ScalarType;
use ferrinfer_launch::{DType, KvLayout, Scalar, cuda_device_count};
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

/// An output's kind for inputs of `kind`: f32 where the op's outputs are always f32 (softmax).
fn output_kind(arg: &TensorArg, kind: Kind) -> Kind {
    if arg.dtype == DTypeRule::F32 { Kind::Float } else { kind }
}

fn dtype(kind: Kind) -> DType {
    match kind {
        Kind::Half => DType::F16,
        Kind::BFloat16 => DType::Bf16,
        _ => DType::F32,
    }
}

/// States a stacked argument holds ([`ferrinfer_launch::op::STACKED_STATES`]).
const STACKED: i64 = ferrinfer_launch::op::STACKED_STATES as i64;

/// One op, kind and layout: every input made (narrowed or not; f32 weights where the op takes
/// them with any kind), outputs given as narrowed NaN-filled windows; written tensors match the
/// reference, read-only ones are untouched, and the memory around narrowed outputs (the rest of
/// their buffer) is still NaN.
fn check(op: &'static OpInfo, kind: Kind, wide: bool, narrow: bool, hidden: i64, seed: u64) {
    let rows = 7;
    let mut inputs: Vec<Tensor> = op
        .tensors
        .iter()
        .filter(|a| a.role != Role::Out)
        .enumerate()
        .map(|(i, arg)| match arg.extent {
            Extent::Row if wide && arg.dtype == DTypeRule::SameOrF32 => row(Kind::Float, hidden, seed + i as u64),
            Extent::Row => row(kind, hidden, seed + i as u64),
            Extent::Rows if arg.domain == Domain::Nonnegative => {
                tensor(kind, rows, hidden, narrow, seed + i as u64).abs_()
            }
            Extent::Rows => tensor(kind, rows, hidden, narrow, seed + i as u64),
            Extent::DoubleRows => tensor(kind, rows, 2 * hidden, narrow, seed + i as u64),
            // One value a row (attention states' scores, always f32).
            Extent::Batch => tensor(Kind::Float, rows, 1, false, seed + i as u64).reshape([rows]),
            // States of every row (`[rows, S, H]`) and their scores (`[rows, S]`).
            Extent::Stacked => {
                tensor(kind, rows * STACKED, hidden, narrow, seed + i as u64).view([rows, STACKED, hidden])
            }
            Extent::StackedBatch => {
                tensor(Kind::Float, rows * STACKED, 1, false, seed + i as u64).reshape([rows, STACKED])
            }
            _ => {
                unreachable!("rope's, the page family's and decode's ops are tested on their own")
            }
        })
        .collect();
    let out_args: Vec<&TensorArg> = op.tensors.iter().filter(|a| a.role == Role::Out).collect();
    // Tokens (one a row) in an int32 buffer of -1; values (and one-a-row scores) NaN-filled.
    let unwritten = |arg: &TensorArg, v: f64| if arg.dtype == DTypeRule::I32 { v == -1.0 } else { v.is_nan() };
    let buffers: Vec<Tensor> = out_args
        .iter()
        .map(|arg| match arg.extent {
            Extent::Batch if arg.dtype == DTypeRule::I32 => Tensor::full([rows + 2], -1, (Kind::Int, Device::Cpu)),
            Extent::Batch => Tensor::full([rows + 2], f64::NAN, (output_kind(arg, kind), Device::Cpu)),
            _ => buffer(output_kind(arg, kind), rows, hidden, narrow, 0).fill_(f64::NAN),
        })
        .collect();
    let outputs: Vec<Tensor> = buffers
        .iter()
        .zip(&out_args)
        .map(|(b, arg)| match arg.extent {
            Extent::Batch => b.narrow(0, narrow as i64, rows),
            _ => window(b, rows, hidden, narrow),
        })
        .collect();
    let before: Vec<Vec<f64>> = inputs.iter().map(values).collect();
    let scalars = op.examples(rows as usize, hidden as usize);
    let refs: Vec<&Tensor> = inputs.iter_mut().map(|t| &*t).collect();
    let produced = ft::call(op, &refs, outputs.iter().map(Some).collect(), &scalars, &TorchStream::Cpu).unwrap();
    let context = format!("{} {kind:?} wide={wide} narrow={narrow} hidden={hidden}", op.name);
    for (p, o) in produced.iter().zip(&outputs) {
        assert_eq!(p.data_ptr(), o.data_ptr(), "{context}: returns `out` itself");
    }
    let mut written = Vec::new();
    for ((arg, t), b) in op.tensors.iter().zip(&inputs).zip(&before) {
        match arg.role {
            Role::InOut => written.push(values(t)),
            _ => assert_eq!(&values(t), b, "{context}: `{}` was written", arg.name),
        }
    }
    written.extend(outputs.iter().map(values));
    let mut tensors = before.clone();
    tensors.extend(outputs.iter().map(|_| Vec::new()));
    reference::check_written(op, dtype(kind), hidden as usize, &tensors, &written, &scalars)
        .unwrap_or_else(|e| panic!("{context}: {e}"));
    for (b, arg) in buffers.iter().zip(&out_args) {
        let written = values(b).iter().filter(|&&v| !unwritten(arg, v)).count();
        let expected = if arg.extent == Extent::Batch { rows } else { rows * hidden };
        assert_eq!(written, expected as usize, "{context}: wrote outside `{}`", arg.name);
    }
}

/// Every op of the registry in every kind and layout, against its reference.
#[test]
fn torch_every_op_matches_the_reference() {
    // Rope's heads and positions, the page family's page tables and decode's caches are not made here: their
    // adapter paths have tests of their own below.
    for (o, op) in ferrinfer_launch::ops().filter(|op| !matches!(op.family, "rope" | "page" | "decode")).enumerate() {
        for (i, kind) in KINDS.into_iter().enumerate() {
            for (j, (narrow, hidden)) in
                [(false, 1024), (true, 1024), (false, 111), (true, 111)].into_iter().enumerate()
            {
                let seed = 1000 * o as u64 + 100 * i as u64 + 10 * j as u64;
                check(op, kind, false, narrow, hidden, seed);
                if kind != Kind::Float && op.tensors.iter().any(|a| a.dtype == DTypeRule::SameOrF32) {
                    check(op, kind, true, narrow, hidden, seed + 5);
                }
            }
        }
    }
}

/// A new output is like `input`; `out = input` runs in place; 3-D input (QK-norm) is rows of
/// its last dimension; results agree with plain tch math.
#[test]
fn torch_new_output_in_place_and_three_dims() {
    let x = tensor(Kind::Float, 6, 128, false, 6_000).view([2, 3, 128]);
    let w = row(Kind::Float, 128, 6_001);
    let y = ft::rmsnorm(&x, &w, None, EPS, &TorchStream::Cpu).unwrap();
    assert_eq!((y.size(), y.kind(), y.device()), (x.size(), Kind::Float, Device::Cpu));
    assert_ne!(y.data_ptr(), x.data_ptr());
    let tch_math = &x * (x.square().mean_dim(-1, true, Kind::Float) + EPS as f64).rsqrt() * &w;
    reference::compare(DType::F32, &values(&y), &values(&tch_math)).unwrap();
    let mut in_place = x.shallow_clone();
    let returned = ft::rmsnorm(&x, &w, Some(&mut in_place), EPS, &TorchStream::Cpu).unwrap();
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
    assert!(kind(ft::rmsnorm(&x, &row(Kind::Float, 64, 1), Some(&mut out), EPS, cpu).unwrap_err()));
    let shape = ft::fused_add_rmsnorm(&mut x, &mut r, &row(Kind::BFloat16, 32, 1), EPS, cpu).unwrap_err();
    assert!(matches!(&shape, TchError::Shape(m) if m.contains("`weight` has shape [32]")), "{shape}");
    let transposed = tensor(Kind::BFloat16, 64, 4, false, 1).tr();
    let layout = ft::gemma_rmsnorm(&transposed, &w, None, EPS, cpu).unwrap_err();
    assert!(matches!(&layout, TchError::Shape(m) if m.contains("`input`: the last dimension must be contiguous")));
    let integer = ft::rmsnorm(&x.to_kind(Kind::Int64), &w, None, EPS, cpu).unwrap_err();
    assert!(matches!(&integer, TchError::Kind(m) if m.starts_with("`input` has dtype i64")), "{integer}");
    let undefined = ft::rmsnorm(&x, &Tensor::new(), None, EPS, cpu).unwrap_err();
    assert!(matches!(&undefined, TchError::Torch(m) if m == "`weight` is an undefined tensor"), "{undefined}");
    let f16_gamma = ft::layernorm(&x, &row(Kind::Half, 64, 1), &row(Kind::Half, 64, 2), None, EPS, cpu).unwrap_err();
    assert!(matches!(&f16_gamma, TchError::Kind(m) if m.starts_with("`gamma` has dtype f16")), "{f16_gamma}");
    let beta = ft::layernorm(&x, &row(Kind::Float, 64, 1), &w, None, EPS, cpu).unwrap_err();
    assert!(matches!(&beta, TchError::Kind(m) if m.starts_with("`beta` has dtype bf16")), "{beta}");
    let eps = ft::gemma_fused_add_rmsnorm(&mut x, &mut r, &w, -1.0, cpu).unwrap_err();
    assert!(matches!(&eps, TchError::Torch(m) if m.starts_with("`eps` is -1")), "{eps}");
    let rows = tensor(Kind::BFloat16, 5, 64, false, 7_003);
    let overlap = ft::rmsnorm(&rows.narrow(0, 0, 4), &w, Some(&mut rows.narrow(0, 1, 4)), EPS, cpu).unwrap_err();
    assert!(matches!(&overlap, TchError::Torch(m) if m.starts_with("`out` overlaps `input`")), "{overlap}");
    for sparse in [x.to_sparse(None, None::<&[i64]>, None), x.to_sparse_csr(None)] {
        let error = ft::rmsnorm(&sparse, &w, None, EPS, cpu).unwrap_err();
        assert!(
            matches!(&error, TchError::Shape(m) if m == "`input`: unsupported layout: not a strided (dense) tensor")
        );
    }
    let negated = ft::rmsnorm(&x, &w.internal_neg_view(), None, EPS, cpu).unwrap_err();
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
        let error = ft::rmsnorm(&x, &w, None, EPS, &stream).unwrap_err();
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
    let mut y = ferrinfer::rmsnorm(&x, &w, None, 1e-6, &stream)?; // a new tensor like x
    let same = ferrinfer::rmsnorm(&x, &w, Some(&mut y), 1e-6, &stream)?; // or into `out`, returned too
    assert_eq!(same.data_ptr(), y.data_ptr());

    let (mut hidden, mut residual) = (x.copy(), x.f_zeros_like()?);
    ferrinfer::fused_add_rmsnorm(&mut hidden, &mut residual, &w, 1e-6, &stream)?; // both in place
    assert!(residual.f_equal(&x)?); // residual += hidden (it was 0)
    assert!(hidden.f_allclose(&y, 1e-2, 1e-2, false)?); // hidden = rmsnorm(residual) * w

    let err = ferrinfer::rmsnorm(&x, &w.f_narrow(0, 0, 8)?, None, 1e-6, &stream).unwrap_err();
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

/// vLLM's rope through tch on the CPU: the outputs allocated like the flattened `query` and
/// `key` (bf16 — not like the int64 `positions` first), checked against the op's reference with
/// a table of `op::TABLE_ROWS` rows; the in-place function writes `query` and `key` alike.
#[test]
fn torch_rope_with_cos_sin_cache_allocates_like_query_and_runs_in_place() {
    let cpu = &TorchStream::Cpu;
    let rows = ferrinfer_launch::op::TABLE_ROWS as i64;
    let query = tensor(Kind::BFloat16, 5, 4 * 64, false, 8_100);
    let key = tensor(Kind::BFloat16, 5, 2 * 64, false, 8_101);
    let cache = tensor(Kind::Float, rows, 32, false, 8_102);
    let pos = Tensor::from_slice(&[0i64, 3, 17, 4096, rows - 1]);
    let (q_out, k_out) =
        ft::apply_rope_with_cos_sin_cache(&pos, &query, &key, &cache, None, None, 64, false, cpu).unwrap();
    assert_eq!((q_out.size(), k_out.size()), (query.size(), key.size()));
    assert_eq!((q_out.kind(), k_out.kind()), (Kind::BFloat16, Kind::BFloat16));
    let op = &ferrinfer_launch::apply_rope_with_cos_sin_cache::INFO;
    let tensors = [values(&pos), values(&query), values(&key), values(&cache), Vec::new(), Vec::new()];
    let written = [values(&q_out), values(&k_out)];
    reference::check_written(op, DType::Bf16, 64, &tensors, &written, &[Scalar::I32(64), Scalar::Bool(false)]).unwrap();
    let (mut q2, mut k2) = (query.copy(), key.copy());
    ft::apply_rope_with_cos_sin_cache_inplace(&pos, &mut q2, &mut k2, &cache, 64, false, cpu).unwrap();
    assert_eq!((values(&q2), values(&k2)), (values(&q_out), values(&k_out)));
}

/// Rope through tch on the CPU: new outputs shaped as `q` and `k` (GQA: 4 and 2 heads), int64
/// positions, equal to the launch layer's own CPU result; the in-place function writes `q` and
/// `k` themselves with the same values.
#[test]
fn torch_rope_matches_the_launch_layer_and_runs_in_place() {
    let cpu = &TorchStream::Cpu;
    let q = tensor(Kind::BFloat16, 5 * 4, 64, false, 8_000).view([5, 4, 64]);
    let k = tensor(Kind::BFloat16, 5 * 2, 64, false, 8_001).view([5, 2, 64]);
    let pos = Tensor::from_slice(&[0i64, 3, 17, 4096, 100_000]);
    let (q_rope, k_rope) = ft::apply_rope_pos_ids(&q, &k, &pos, None, None, None, false, 1.0, 1e4, cpu).unwrap();
    assert_eq!((q_rope.size(), k_rope.size()), (q.size(), k.size()));
    let op = &ferrinfer_launch::apply_rope_pos_ids::INFO;
    let scalars = [Scalar::Absent, Scalar::Bool(false), Scalar::F32(1.0), Scalar::F32(1e4)];
    let tensors = [values(&q), values(&k), values(&pos), Vec::new(), Vec::new()];
    reference::check_written(op, DType::Bf16, 64, &tensors, &[values(&q_rope), values(&k_rope)], &scalars).unwrap();
    let (mut q2, mut k2) = (q.copy(), k.copy());
    ft::apply_rope_pos_ids_inplace(&mut q2, &mut k2, &pos, None, false, 1.0, 1e4, cpu).unwrap();
    assert_eq!((values(&q2), values(&k2)), (values(&q_rope), values(&k_rope)));
}

/// The registry's paged-KV problem of `rows` tokens of head_dim `hidden` as tch tensors: keys,
/// values and caches of `kind` from `seed`, the page table's int32 parts.
fn registry_problem(op: &OpInfo, kind: Kind, rows: usize, hidden: usize, seed: u64) -> Vec<Tensor> {
    op.tensors
        .iter()
        .filter(|arg| arg.role != Role::Out)
        .enumerate()
        .map(|(i, arg)| {
            let shape: Vec<i64> = arg.extent.shape(rows, hidden).iter().map(|&d| d as i64).collect();
            match arg.domain.fixed(rows) {
                Some(values) => {
                    let values = Tensor::from_slice(&values.iter().map(|&v| v as i32).collect::<Vec<_>>());
                    values.view(shape.as_slice())
                }
                None => {
                    let len = shape.iter().product::<i64>() as usize;
                    let kind = if arg.dtype == DTypeRule::F32 { Kind::Float } else { kind };
                    Tensor::from_slice(&random_normal::<f32>(len, seed + i as u64)).view(shape.as_slice()).to_kind(kind)
                }
            }
        })
        .collect()
}

/// Batch decode through tch on the CPU: the registry's problem (requests of 0 to 79 keys in a
/// paged cache, int32 page table and plan), the workspace written in place and `(out, lse)`
/// allocated, all as the op's reference says.
#[test]
fn torch_batch_decode_writes_the_workspace_and_its_outputs() {
    let (rows, hidden) = (9, 64);
    let op = &ferrinfer_launch::batch_decode_with_paged_kv_cache::INFO;
    let t = registry_problem(op, Kind::BFloat16, rows, hidden, 9_500);
    let before: Vec<Vec<f64>> = t.iter().map(values).chain([Vec::new(), Vec::new()]).collect();
    let (mut partial_v, mut partial_s) = (t[8].copy(), t[9].copy());
    let (layout, mode) = (KvLayout::Nhd, ferrinfer_launch::PosEncodingMode::None);
    let (out, lse) = ft::batch_decode_with_paged_kv_cache(
        &t[0],
        &t[1],
        &t[2],
        &t[3],
        &t[4],
        &t[5],
        &t[6],
        &t[7],
        &mut partial_v,
        &mut partial_s,
        None,
        None,
        layout,
        mode,
        None,
        None,
        None,
        -1,
        None,
        None,
        None,
        None,
        false,
        &TorchStream::Cpu,
    )
    .unwrap();
    assert_eq!(out.size(), t[0].size());
    let written = [values(&partial_v), values(&partial_s), values(&out), values(&lse)];
    reference::check_written(op, DType::Bf16, hidden, &before, &written, &op.examples(rows, hidden)).unwrap();
}

/// Appending to a paged KV cache through tch on the CPU: both caches updated in place as the
/// op's reference says, "NHD".
#[test]
fn torch_append_paged_kv_cache_updates_both_caches() {
    let (rows, hidden) = (40, 64);
    let t = registry_problem(&ferrinfer_launch::append_paged_kv_cache::INFO, Kind::BFloat16, rows, hidden, 9_000);
    let before: Vec<Vec<f64>> = t.iter().map(values).collect();
    let (mut k_cache, mut v_cache) = (t[4].copy(), t[5].copy());
    let layout = ferrinfer_launch::KvLayout::Nhd;
    ft::append_paged_kv_cache(
        &t[0],
        &t[1],
        &t[2],
        &t[3],
        &mut k_cache,
        &mut v_cache,
        &t[6],
        &t[7],
        &t[8],
        layout,
        &TorchStream::Cpu,
    )
    .unwrap();
    let op = &ferrinfer_launch::append_paged_kv_cache::INFO;
    let written = [values(&k_cache), values(&v_cache)];
    reference::check_written(op, DType::Bf16, hidden, &before, &written, &[KvLayout::Nhd.into_scalar()]).unwrap();
    assert_ne!(written[0], before[4], "keys were appended");
}

/// `get_batch_indices_positions` through tch: its int32 outputs allocated `[nnz]` (the count
/// scalar's length, not any input's), past the bounds' tokens −1.
#[test]
fn torch_get_batch_indices_positions_allocates_nnz_outputs() {
    let (indptr, seq_lens) = (Tensor::from_slice(&[0i64, 2, 2, 5]), Tensor::from_slice(&[5i64, 9, 3]));
    let (batch, pos) = ft::get_batch_indices_positions(&indptr, &seq_lens, None, None, 6, &TorchStream::Cpu).unwrap();
    assert_eq!((batch.size(), batch.kind()), (vec![6], Kind::Int));
    assert_eq!(Vec::<i32>::try_from(&batch).unwrap(), [0, 0, 2, 2, 2, -1]);
    assert_eq!(Vec::<i32>::try_from(&pos).unwrap(), [3, 4, 0, 1, 2, -1]);
}
