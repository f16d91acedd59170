//! The sampling family through the public API on the CPU backend: every op for every dtype
//! against its f64 reference over vocabularies from one entry to Llama 3's, strided rows,
//! temperatures (0 included), top-k over ties, signed zeros, infinities and NaN, every k from 1
//! past the vocabulary, top-p over ties and every share; the validation errors (each names its
//! argument and leaves `out` untouched).

mod support;

use ferrinfer_launch::op::OpInfo;
use ferrinfer_launch::reference::{compare, random_normal};
use ferrinfer_launch::{
    DType, Device, Error, Scalar, Stream, TensorView, softmax, top_k_mask_logits, top_k_renorm_probs,
    top_p_renorm_probs,
};
use support::{Case, Cpu, assert_refused, family, run_cases};

fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for rows in [1, 5, 33] {
        for vocab in [1, 7, 64, 1000, 4097, 32000] {
            cases.extend([Case::contiguous(rows, vocab), Case::strided(rows, vocab)]);
        }
    }
    cases.push(Case::strided(2, 128_256));
    // Renormalised probabilities below f16's least normal (~1e−6 an entry).
    cases.push(Case::contiguous(3, 1 << 20));
    cases
}

#[test]
fn sampling_cpu_grid() {
    run_cases(&Cpu, &family("sampling"), 4000, &cases());
}

/// `op` over `input` (rows of `vocab` f32) with its one scalar on the CPU backend: its output.
fn cpu_call(op: &'static OpInfo, input: &[f32], vocab: usize, scalar: Scalar) -> Vec<f32> {
    let shape = [input.len() / vocab, vocab];
    let mut out = vec![f32::NAN; input.len()];
    let x = TensorView::from_slice(input, &shape).unwrap();
    let y = TensorView::from_slice_mut(&mut out, &shape).unwrap();
    op.call(&[&x, &y], &[scalar], Stream::Cpu).unwrap();
    out
}

#[test]
fn softmax_follows_the_temperature_and_zero_weighs_logits_alike() {
    let op = &ferrinfer_launch::softmax::INFO;
    let logits: Vec<f32> = random_normal(3 * 1000, 7);
    let as_f64: Vec<f64> = logits.iter().map(|&x| x as f64).collect();
    for temperature in [0.25f32, 0.7, 1.0, 3.0] {
        let want = &op.reference_of(DType::F32, 1000, &[as_f64.clone(), Vec::new()], &[Scalar::F32(temperature)])[0];
        let got: Vec<f64> =
            cpu_call(&softmax::INFO, &logits, 1000, Scalar::F32(temperature)).iter().map(|&p| p as f64).collect();
        compare(DType::F32, &got, want).unwrap_or_else(|e| panic!("temperature {temperature}: {e}"));
    }
    assert!(cpu_call(&softmax::INFO, &logits, 1000, Scalar::F32(0.0)).iter().all(|&p| p == 1.0 / 1000.0));
    // Masked logits (top_k_mask_logits' −∞) keep nothing at a temperature of 0 too, not NaN.
    let mut masked = logits[..1000].to_vec();
    masked[..996].fill(f32::NEG_INFINITY);
    masked[996..].copy_from_slice(&[-1.8e19, 0.0, 3e-30, 1.8e19]);
    let probs = cpu_call(&softmax::INFO, &masked, 1000, Scalar::F32(0.0));
    assert!(probs[..996].iter().all(|&p| p == 0.0) && probs[996..].iter().all(|&p| p == 0.25), "{:?}", &probs[990..]);
}

#[test]
fn softmax_rows_of_minus_infinity_or_holding_infinity_or_nan_are_nan_and_others_unaffected() {
    let mut logits = vec![0.5f32; 4 * 8];
    logits[..8].fill(f32::NEG_INFINITY);
    logits[8 + 3] = f32::INFINITY;
    logits[16 + 5] = f32::NAN;
    logits[24] = f32::NEG_INFINITY;
    let probs = cpu_call(&softmax::INFO, &logits, 8, Scalar::F32(1.0));
    for (row, probs) in probs.chunks(8).enumerate().take(3) {
        assert!(probs.iter().all(|p| p.is_nan()), "row {row}: {probs:?}");
    }
    assert_eq!(probs[24], 0.0, "a −∞ logit among finite ones has probability 0");
    assert!(probs[25..].iter().all(|&p| (p - 1.0 / 7.0).abs() < 1e-7));
}

#[test]
fn softmax_errors_name_the_argument_and_leave_out_untouched() {
    let x: Vec<f32> = random_normal(4 * 64, 1);
    let xv = TensorView::from_slice(&x, &[4, 64]).unwrap();
    let mut probs = vec![f32::NAN; 4 * 64];
    for temperature in [-1.0, f32::NAN, f32::INFINITY] {
        let result =
            softmax(&xv, &mut TensorView::from_slice_mut(&mut probs, &[4, 64]).unwrap(), temperature, Stream::Cpu);
        assert_refused(result, &probs, &|e| matches!(e, Error::InvalidScalar { argument: "temperature", .. }));
    }
    let result =
        softmax(&xv, &mut TensorView::from_slice_mut(&mut probs[..4 * 32], &[4, 32]).unwrap(), 1.0, Stream::Cpu);
    assert_refused(result, &probs, &|e| {
        matches!(e, Error::ShapeMismatch { argument: "out", .. }) && e.to_string().contains("[4, 64]")
    });
    let mut half_probs = vec![half::bf16::NAN; 4 * 64];
    let error = softmax(&xv, &mut TensorView::from_slice_mut(&mut half_probs, &[4, 64]).unwrap(), 1.0, Stream::Cpu)
        .unwrap_err();
    assert!(matches!(&error, Error::UnsupportedDType { argument: "out", .. }) && error.is_dtype(), "{error}");
    assert!(error.to_string().contains("bf16") && error.to_string().contains("expected f32"), "{error}");
    // Probabilities written over the logits they are computed from: refused.
    let mut data: Vec<f32> = random_normal(4 * 64, 3);
    let before = data.clone();
    let view = |data: &mut Vec<f32>| unsafe {
        TensorView::from_raw_parts(
            data.as_mut_ptr().cast(),
            0,
            DType::F32,
            &[4, 64],
            &[64, 1],
            ferrinfer_launch::Device::Cpu,
        )
    };
    let (logits, mut in_place) = (view(&mut data).unwrap(), view(&mut data).unwrap());
    let error = softmax(&logits, &mut in_place, 1.0, Stream::Cpu).unwrap_err();
    assert!(matches!(error, Error::Overlap { argument: "out", other: "logits" }), "{error}");
    assert_eq!(data, before);
}

#[test]
fn softmax_empty_batches_are_no_work_and_an_empty_vocabulary_an_error() {
    let (x, mut probs) = (Vec::<f32>::new(), Vec::<f32>::new());
    let xv = TensorView::from_slice(&x, &[0, 64]).unwrap();
    softmax(&xv, &mut TensorView::from_slice_mut(&mut probs, &[0, 64]).unwrap(), 1.0, Stream::Cpu).unwrap();
    let empty = TensorView::from_slice(&x, &[3, 0]).unwrap();
    let error = softmax(&empty, &mut TensorView::from_slice_mut(&mut probs, &[3, 0]).unwrap(), 1.0, Stream::Cpu);
    assert!(matches!(error, Err(Error::ShapeMismatch { argument: "logits", .. })), "{error:?}");
}

#[test]
fn top_k_keeps_every_tie_of_the_kth_and_follows_the_reference_for_every_k() {
    // Values on a coarse grid: every value has many ties.
    let vocab = 301;
    let logits: Vec<f32> = random_normal::<f32>(2 * vocab, 5).iter().map(|x| (x * 4.0).round() / 4.0).collect();
    for op in [&top_k_mask_logits::INFO, &top_k_renorm_probs::INFO] {
        let renorm = op.name == "top_k_renorm_probs";
        let input: Vec<f32> = logits.iter().map(|x| if renorm { x.abs() } else { *x }).collect();
        let input_f64: Vec<f64> = input.iter().map(|&x| x as f64).collect();
        let x = TensorView::from_slice(&input, &[2, vocab]).unwrap();
        for k in [1, 2, 3, 17, 50, 299, 300, 301, 302, 100_000] {
            let mut out = vec![f32::NAN; input.len()];
            let y = TensorView::from_slice_mut(&mut out, &[2, vocab]).unwrap();
            let top_k = [Scalar::I32(k as i32)];
            op.call(&[&x, &y], &top_k, Stream::Cpu).unwrap();
            let want = &op.reference_of(DType::F32, vocab, &[input_f64.clone(), Vec::new()], &top_k)[0];
            let got: Vec<f64> = out.iter().map(|&v| v as f64).collect();
            compare(DType::F32, &got, want).unwrap_or_else(|e| panic!("{} k = {k}: {e}", op.name));
            // (A kept probability of 0 looks dropped: count the mask's.)
            for row in out.chunks(vocab).filter(|_| !renorm) {
                let kept = row.iter().filter(|&&v| v != f32::NEG_INFINITY).count();
                assert!(kept >= k.min(vocab), "k = {k}: {kept} kept");
            }
        }
    }
}

#[test]
fn top_k_ranks_by_total_order_signed_zeros_infinities_and_nan() {
    let (inf, nan) = (f32::INFINITY, f32::NAN);
    let logits = [0.0, -0.0, -inf, 1.0, nan, inf, -1.0, -0.0];
    let kept = |k: i32| {
        cpu_call(&top_k_mask_logits::INFO, &logits, logits.len(), Scalar::I32(k))
            .iter()
            .map(|v| *v != f32::NEG_INFINITY)
            .collect::<Vec<_>>()
    };
    // NaN above +∞ above 1 above +0 above −0 (twice) above −1 above −∞.
    assert_eq!(kept(1), [false, false, false, false, true, false, false, false]);
    assert_eq!(kept(3), [false, false, false, true, true, true, false, false]);
    assert_eq!(kept(4), [true, false, false, true, true, true, false, false]);
    assert_eq!(kept(5), [true, true, false, true, true, true, false, true], "both −0 tie");
    let masked = cpu_call(&top_k_mask_logits::INFO, &logits, logits.len(), Scalar::I32(4));
    assert!(masked[4].is_nan() && masked[5] == inf && masked[0].to_bits() == 0 && masked[1] == f32::NEG_INFINITY);
}

#[test]
fn top_k_renorm_divides_the_kept_by_their_sum() {
    let probs = [0.1f32, 0.4, 0.2, 0.3, 0.0];
    let mut out = [f32::NAN; 5];
    let x = TensorView::from_slice(&probs, &[1, 5]).unwrap();
    top_k_renorm_probs(&x, &mut TensorView::from_slice_mut(&mut out, &[1, 5]).unwrap(), 2, Stream::Cpu).unwrap();
    let want = [0.0, 0.4 / 0.7, 0.0, 0.3 / 0.7, 0.0];
    assert!(out.iter().zip(want).all(|(o, w)| (o - w).abs() < 1e-6), "{out:?}");
}

#[test]
fn top_k_errors_name_the_argument_and_leave_out_untouched() {
    let x: Vec<f32> = random_normal(4 * 64, 1);
    let xv = TensorView::from_slice(&x, &[4, 64]).unwrap();
    let mut out = vec![f32::NAN; 4 * 64];
    for op in [&top_k_mask_logits::INFO, &top_k_renorm_probs::INFO] {
        let input = op.tensors[0].name;
        // At most 0; of another type than i32 (a fraction, NaN, ∞); left out.
        let floats = [2.5, f32::NAN, f32::INFINITY].map(Scalar::F32);
        for top_k in [Scalar::I32(0), Scalar::I32(-3)].into_iter().chain(floats).chain([Scalar::Absent]) {
            let y = TensorView::from_slice_mut(&mut out, &[4, 64]).unwrap();
            let result = op.call(&[&xv, &y], &[top_k], Stream::Cpu);
            assert_refused(result, &out, &|e| matches!(e, Error::InvalidScalar { argument: "top_k", .. }));
        }
        let mut half_out = vec![half::bf16::NAN; 4 * 64];
        let y = TensorView::from_slice_mut(&mut half_out, &[4, 64]).unwrap();
        let error = op.call(&[&xv, &y], &[Scalar::I32(5)], Stream::Cpu).unwrap_err();
        assert!(
            matches!(&error, Error::DTypeMismatch { argument: "out", reference, .. } if *reference == input),
            "{error}"
        );
        assert!(half_out.iter().all(|v| v.is_nan()));
        let y = TensorView::from_slice_mut(&mut out[..4 * 32], &[4, 32]).unwrap();
        let result = op.call(&[&xv, &y], &[Scalar::I32(5)], Stream::Cpu);
        assert_refused(result, &out, &|e| matches!(e, Error::ShapeMismatch { argument: "out", .. }));
    }
}

#[test]
fn softmax_takes_a_temperature_a_row() {
    let op = &softmax::INFO;
    let (rows, vocab) = (4, 1000);
    let logits: Vec<f32> = random_normal(rows * vocab, 17);
    let temperatures = [0.25f32, 1.0, 0.0, 3.0];
    let x = TensorView::from_slice(&logits, &[rows, vocab]).unwrap();
    let t = TensorView::from_slice(&temperatures, &[rows]).unwrap();
    let mut probs = vec![f32::NAN; rows * vocab];
    softmax(&x, &mut TensorView::from_slice_mut(&mut probs, &[rows, vocab]).unwrap(), &t, Stream::Cpu).unwrap();
    for (row, &temperature) in temperatures.iter().enumerate() {
        let logits_f64: Vec<f64> = logits[row * vocab..(row + 1) * vocab].iter().map(|&x| x as f64).collect();
        let want = &op.reference_of(DType::F32, vocab, &[logits_f64, Vec::new()], &[Scalar::F32(temperature)])[0];
        let got: Vec<f64> = probs[row * vocab..(row + 1) * vocab].iter().map(|&p| p as f64).collect();
        compare(DType::F32, &got, want).unwrap_or_else(|e| panic!("row {row}, temperature {temperature}: {e}"));
    }
    // The same rows one temperature at a time: bit for bit.
    for (row, &temperature) in temperatures.iter().enumerate() {
        assert_eq!(
            cpu_call(&softmax::INFO, &logits[row * vocab..(row + 1) * vocab], vocab, Scalar::F32(temperature)),
            probs[row * vocab..(row + 1) * vocab]
        );
    }
}

#[test]
fn per_row_temperatures_are_checked_before_anything_is_written() {
    let (rows, vocab) = (3, 64);
    let logits: Vec<f32> = random_normal(rows * vocab, 19);
    let x = TensorView::from_slice(&logits, &[rows, vocab]).unwrap();
    let mut probs = vec![f32::NAN; rows * vocab];
    let mut call = |t: &TensorView| {
        let result = softmax(&x, &mut TensorView::from_slice_mut(&mut probs, &[rows, vocab]).unwrap(), t, Stream::Cpu);
        (result, probs.iter().all(|p| p.is_nan()))
    };
    let bad = [1.0f32, -0.5, 1.0];
    let (result, untouched) = call(&TensorView::from_slice(&bad, &[3]).unwrap());
    assert!(
        untouched
            && matches!(result, Err(Error::InvalidScalar { argument: "temperature", value, .. }) if value == "-0.5")
    );
    let nan = [1.0f32, 1.0, f32::NAN];
    assert!(matches!(call(&TensorView::from_slice(&nan, &[3]).unwrap()).0, Err(Error::InvalidScalar { .. })));
    let short = [1.0f32, 1.0];
    let (result, untouched) = call(&TensorView::from_slice(&short, &[2]).unwrap());
    assert!(
        untouched
            && matches!(&result, Err(Error::ShapeMismatch { argument: "temperature", expected, .. }) if expected.contains("[3]"))
    );
    let halves = [half::f16::ONE; 3];
    let (result, _) = call(&TensorView::from_slice(&halves, &[3]).unwrap());
    assert!(
        matches!(&result, Err(e @ Error::UnsupportedDType { argument: "temperature", .. }) if e.to_string().contains("f32"))
    );
    let spaced = [1.0f32, 9.0, 1.0, 9.0, 1.0];
    let strided = TensorView::from_slice_strided(&spaced, &[3], &[2]).unwrap();
    assert!(matches!(call(&strided).0, Err(Error::UnsupportedLayout { argument: "temperature", .. })));
    // A scalar that is not per row (rmsnorm's `eps`) takes no tensor.
    let (weight, eps) = (vec![1.0f32; vocab], [1e-6f32; 3]);
    let w = TensorView::from_slice(&weight, &[vocab]).unwrap();
    let y = TensorView::from_slice_mut(&mut probs, &[rows, vocab]).unwrap();
    let eps = TensorView::from_slice(&eps, &[3]).unwrap();
    let error = ferrinfer_launch::rmsnorm::INFO
        .call_per_row(&[&x, &w, &y], &[Scalar::F32(1e-6)], &[Some(&eps)], Stream::Cpu)
        .unwrap_err();
    assert!(matches!(error, Error::NotPerRow { op: "rmsnorm", argument: "eps" }), "{error}");
}

#[test]
fn top_k_takes_a_k_a_row_and_one_at_most_zero_keeps_its_row() {
    let (rows, vocab) = (5, 301);
    let logits: Vec<f32> = random_normal::<f32>(rows * vocab, 29).iter().map(|x| (x * 4.0).round() / 4.0).collect();
    let top_ks = [1i32, 5, 0, 1000, -3];
    let x = TensorView::from_slice(&logits, &[rows, vocab]).unwrap();
    let k = TensorView::from_slice(&top_ks, &[rows]).unwrap();
    let mut out = vec![f32::NAN; rows * vocab];
    top_k_mask_logits(&x, &mut TensorView::from_slice_mut(&mut out, &[rows, vocab]).unwrap(), &k, Stream::Cpu).unwrap();
    for (row, &k) in top_ks.iter().enumerate() {
        let kept = if k <= 0 { vocab as i32 } else { k };
        let one = cpu_call(&top_k_mask_logits::INFO, &logits[row * vocab..(row + 1) * vocab], vocab, Scalar::I32(kept));
        assert_eq!(one, out[row * vocab..(row + 1) * vocab], "row {row}, top_k {k}");
    }
    let floats = [5.0f32; 5];
    let mut call = |k: &TensorView| {
        top_k_mask_logits(&x, &mut TensorView::from_slice_mut(&mut out, &[rows, vocab]).unwrap(), k, Stream::Cpu)
    };
    let error = call(&TensorView::from_slice(&floats, &[rows]).unwrap()).unwrap_err();
    assert!(
        matches!(&error, Error::UnsupportedDType { argument: "top_k", .. }) && error.to_string().contains("i32"),
        "{error}"
    );
    let error = call(&TensorView::from_slice(&top_ks[..3], &[3]).unwrap()).unwrap_err();
    assert!(matches!(error, Error::ShapeMismatch { argument: "top_k", .. }), "{error}");
}

#[test]
fn top_p_keeps_the_largest_holding_the_share_with_their_ties_for_every_share() {
    let op = &top_p_renorm_probs::INFO;
    let vocab = 301;
    // A coarse grid: many ties, some zeros.
    let probs: Vec<f32> = random_normal::<f32>(3 * vocab, 31).iter().map(|x| (x.abs() * 4.0).round() / 4.0).collect();
    let as_f64: Vec<f64> = probs.iter().map(|&x| x as f64).collect();
    for top_p in [1e-4f32, 0.05, 0.3, 0.5, 0.77, 0.9, 0.99, 0.999_999, 1.0] {
        let out = cpu_call(&top_p_renorm_probs::INFO, &probs, vocab, Scalar::F32(top_p));
        let want = &op.reference_of(DType::F32, vocab, &[as_f64.clone(), Vec::new()], &[Scalar::F32(top_p)])[0];
        let got: Vec<f64> = out.iter().map(|&v| v as f64).collect();
        compare(DType::F32, &got, want).unwrap_or_else(|e| panic!("top_p {top_p}: {e}"));
        for (row, out) in out.chunks(vocab).enumerate() {
            let row_in = &probs[row * vocab..(row + 1) * vocab];
            let sum: f32 = out.iter().sum();
            assert!((sum - 1.0).abs() < 1e-5, "top_p {top_p}, row {row}: sums to {sum}");
            // Every kept entry's ties are kept, and it ranks above every dropped one.
            let least_kept =
                row_in.iter().zip(out).filter(|(_, o)| **o > 0.0).map(|(x, _)| *x).fold(f32::MAX, f32::min);
            for (x, o) in row_in.iter().zip(out) {
                assert_eq!(*o > 0.0, *x >= least_kept && *x > 0.0, "top_p {top_p}, row {row}: {x} → {o}");
            }
        }
    }
    // The least share keeps the largest entry and its ties only.
    let out = cpu_call(&top_p_renorm_probs::INFO, &[0.5, 2.0, 2.0, 1.0], 4, Scalar::F32(1e-9));
    assert_eq!(out, [0.0, 0.5, 0.5, 0.0]);
}

#[test]
fn top_p_measures_the_share_of_the_rows_own_sum() {
    // 0.4 + 0.3 = 70 % of the mass: top_p 0.69 keeps two entries, top_p 0.71 three — and the
    // same for the row ten times larger (it need not sum to 1).
    let probs = [0.1f32, 0.4, 0.2, 0.3];
    for scale in [1.0f32, 10.0] {
        let row: Vec<f32> = probs.iter().map(|p| p * scale).collect();
        let kept = |top_p| {
            cpu_call(&top_p_renorm_probs::INFO, &row, 4, Scalar::F32(top_p))
                .iter()
                .map(|&o| o > 0.0)
                .collect::<Vec<_>>()
        };
        assert_eq!(kept(0.39), [false, true, false, false], "scale {scale}");
        assert_eq!(kept(0.69), [false, true, false, true], "scale {scale}");
        assert_eq!(kept(0.71), [false, true, true, true], "scale {scale}");
        let out = cpu_call(&top_p_renorm_probs::INFO, &row, 4, Scalar::F32(0.69));
        assert!((out[1] - 4.0 / 7.0).abs() < 1e-6 && (out[3] - 3.0 / 7.0).abs() < 1e-6, "{out:?}");
    }
}

#[test]
fn top_p_takes_a_share_a_row_and_errors_name_the_argument() {
    let (rows, vocab) = (5, 301);
    let probs: Vec<f32> = random_normal::<f32>(rows * vocab, 37).iter().map(|x| x.abs()).collect();
    let top_ps = [0.5f32, 1.0, 0.0, 7.0, f32::NAN];
    let x = TensorView::from_slice(&probs, &[rows, vocab]).unwrap();
    let p = TensorView::from_slice(&top_ps, &[rows]).unwrap();
    let mut out = vec![f32::NAN; rows * vocab];
    top_p_renorm_probs(&x, &mut TensorView::from_slice_mut(&mut out, &[rows, vocab]).unwrap(), &p, Stream::Cpu)
        .unwrap();
    // ≥ 1 keeps the row, ≤ 0 and NaN the largest entry only.
    for (row, &top_p) in top_ps.iter().enumerate() {
        let alone = if top_p >= 1.0 {
            1.0
        } else if top_p > 0.0 {
            top_p
        } else {
            1e-30
        };
        let one =
            cpu_call(&top_p_renorm_probs::INFO, &probs[row * vocab..(row + 1) * vocab], vocab, Scalar::F32(alone));
        assert_eq!(one, out[row * vocab..(row + 1) * vocab], "row {row}, top_p {top_p}");
    }
    let mut out = vec![f32::NAN; rows * vocab];
    for top_p in [0.0, -0.1, 1.5, f32::NAN, f32::INFINITY] {
        let y = TensorView::from_slice_mut(&mut out, &[rows, vocab]).unwrap();
        let result = top_p_renorm_probs::INFO.call(&[&x, &y], &[Scalar::F32(top_p)], Stream::Cpu);
        assert_refused(result, &out, &|e| matches!(e, Error::InvalidScalar { argument: "top_p", .. }));
    }
    let ints = [1i32; 5];
    let y = &mut TensorView::from_slice_mut(&mut out, &[rows, vocab]).unwrap();
    let error = top_p_renorm_probs(&x, y, &TensorView::from_slice(&ints, &[rows]).unwrap(), Stream::Cpu).unwrap_err();
    assert!(matches!(&error, Error::UnsupportedDType { argument: "top_p", .. }) && error.to_string().contains("f32"));
}

#[test]
fn a_renormalised_row_without_mass_is_nan_and_the_other_rows_are_not() {
    let probs = [0.0f32, 0.0, 0.0, 0.0, 0.1, 0.4, 0.2, 0.3];
    for (op, scalar) in [(&top_k_renorm_probs::INFO, Scalar::I32(2)), (&top_p_renorm_probs::INFO, Scalar::F32(0.5))] {
        let out = cpu_call(op, &probs, 4, scalar);
        assert!(out[..4].iter().all(|p| p.is_nan()), "{}: {out:?}", op.name);
        assert!(out[4..].iter().all(|p| p.is_finite()) && (out[4..].iter().sum::<f32>() - 1.0).abs() < 1e-6);
    }
}

/// `op`'s tokens for rows of `probs` (each `vocab` long) on the CPU backend.
fn draw(op: &'static OpInfo, threshold: &[Scalar], probs: &[f32], vocab: usize, seed: u64, offset: u64) -> Vec<i32> {
    let rows = probs.len() / vocab;
    let mut samples = vec![-1i32; rows];
    let input = support::sampling::sampling_input(op, probs);
    let x = TensorView::from_slice(&input, &[rows, vocab]).unwrap();
    let y = TensorView::from_slice_mut(&mut samples, &[rows]).unwrap();
    let scalars: Vec<Scalar> = threshold.iter().copied().chain([Scalar::U64(seed), Scalar::U64(offset)]).collect();
    op.call(&[&x, &y], &scalars, Stream::Cpu).unwrap();
    samples
}

/// Chi-square's critical value for `df` degrees of freedom at p ≈ 1e−6 (Wilson–Hilferty: a
/// false alarm a million runs).
fn chi_square_critical(df: usize) -> f64 {
    let (df, z) = (df as f64, 4.753);
    df * (1.0 - 2.0 / (9.0 * df) + z * (2.0 / (9.0 * df)).sqrt()).powi(3)
}

/// 200 000 draws of each sampling op from one 10-entry distribution (a batch of 5000 copies of
/// the row, 40 offsets): the counts fit the distribution of the kept entries renormalised
/// (chi-square at p ≈ 1e−6), and no entry outside the kept set is ever drawn.
#[test]
fn sampling_ops_draw_the_kept_distribution_and_nothing_else() {
    let row = [0.02f32, 0.25, 0.0, 0.08, 0.3, 0.05, 0.12, 0.1, 0.0, 0.08];
    let (vocab, copies) = (row.len(), 5000);
    let probs: Vec<f32> = row.iter().copied().cycle().take(vocab * copies).collect();
    for (op, threshold) in support::sampling::sampling_ops() {
        let mut counts = vec![0u64; vocab];
        for offset in (0..80).step_by(2) {
            for token in draw(op, threshold, &probs, vocab, 7, offset) {
                counts[token as usize] += 1;
            }
        }
        let kept = support::sampling::sampling_kept(op, threshold, &row);
        let mass: f64 = row.iter().zip(&kept).filter(|(_, k)| **k).map(|(&p, _)| p as f64).sum();
        let draws = counts.iter().sum::<u64>() as f64;
        let mut chi_square = 0.0;
        for (i, (&count, &p)) in counts.iter().zip(&row).enumerate() {
            if !kept[i] || p == 0.0 {
                assert_eq!(count, 0, "{}: entry {i} (not kept) drawn {count} times", op.name);
                continue;
            }
            let expected = draws * p as f64 / mass;
            chi_square += (count as f64 - expected).powi(2) / expected;
        }
        let df = kept.iter().zip(&row).filter(|(k, p)| **k && **p > 0.0).count() - 1;
        assert!(
            chi_square < chi_square_critical(df),
            "{}: chi-square {chi_square:.1} over {df} dof; {counts:?}",
            op.name
        );
    }
}

/// Top-p draws by rejection rounds, alone or among the top-k entries (from probabilities or
/// logits): over peaked rows and small shares most first draws are rejected (the token
/// `top_p = 1` draws from the same first bits lies outside the kept set), and every token is the
/// reference's and one the op keeps.
#[test]
fn top_p_sampling_redraws_above_a_rejected_token_as_the_reference() {
    let (rows, vocab) = (64, 2000);
    let probs = support::sampling::peaked_probabilities(rows, vocab, 5);
    let ops = support::sampling::sampling_ops();
    for (op, top_k) in [(ops[2].0, None), (ops[4].0, Some(200)), (ops[5].0, Some(200))] {
        let thresholds =
            |top_p: f32| -> Vec<Scalar> { top_k.map(Scalar::I32).into_iter().chain([Scalar::F32(top_p)]).collect() };
        let input: Vec<f64> = support::sampling::sampling_input(op, &probs).iter().map(|&x| x as f64).collect();
        let unfiltered = draw(op, &thresholds(1.0), &probs, vocab, 9, 2);
        for top_p in [0.01, 0.3, 0.9] {
            let tokens = draw(op, &thresholds(top_p), &probs, vocab, 9, 2);
            let scalars: Vec<Scalar> = thresholds(top_p).into_iter().chain([Scalar::U64(9), Scalar::U64(2)]).collect();
            let want = &op.reference_of(DType::F32, vocab, &[input.clone(), Vec::new()], &scalars)[0];
            let mut rejected_first = 0;
            for (row, (&token, &first)) in tokens.iter().zip(&unfiltered).enumerate() {
                let kept = support::sampling::sampling_kept(op, &thresholds(top_p), &probs[row * vocab..][..vocab]);
                assert_eq!(token as f64, want[row], "{} top_p {top_p}, row {row}", op.name);
                assert!(kept[token as usize], "{} top_p {top_p}, row {row}: token {token} not kept", op.name);
                rejected_first += !kept[first as usize] as usize;
            }
            if top_p < 0.5 {
                let name = op.name;
                assert!(
                    rejected_first > rows / 2,
                    "{name} top_p {top_p}: {rejected_first} of {rows} first draws rejected"
                );
            }
        }
    }
}

/// Top-k then top-p is each alone at the other's identity: with `top_k ≥ vocab` the tokens of
/// `top_p_sampling_from_probs` (the same rounds from the same bits, by another kernel on the
/// GPU), with `top_p = 1` those of `top_k_sampling_from_probs`.
#[test]
fn top_k_top_p_sampling_is_each_filter_alone_at_the_others_identity() {
    let (rows, vocab) = (32, 3000);
    let probs = support::sampling::peaked_probabilities(rows, vocab, 8);
    let ops = support::sampling::sampling_ops();
    let (top_k, top_p, both) = (ops[1].0, ops[2].0, ops[4].0);
    for share in [0.05, 0.5, 0.95].map(Scalar::F32) {
        let alone = draw(top_p, &[share], &probs, vocab, 3, 6);
        assert_eq!(draw(both, &[Scalar::I32(vocab as i32), share], &probs, vocab, 3, 6), alone, "top_p {share}");
    }
    for k in [1, 40, 2999].map(Scalar::I32) {
        let alone = draw(top_k, &[k], &probs, vocab, 3, 6);
        assert_eq!(draw(both, &[k, Scalar::F32(1.0)], &probs, vocab, 3, 6), alone, "top_k {k}");
    }
}

/// Top-k then top-p with a `top_k` and a `top_p` a row (int32 and f32 tensors): each row as the
/// op at its own pair (a `top_k` ≤ 0 keeps the row); the pair's errors name their argument, an
/// error of the logits op names `logits`, and `samples` stays untouched.
#[test]
fn top_k_top_p_sampling_takes_both_thresholds_a_row_and_names_them_in_errors() {
    let (rows, vocab) = (5, 400);
    let probs = support::sampling::peaked_probabilities(rows, vocab, 12);
    let top_ks: [i32; 5] = [1, 7, 0, 400, 50];
    let top_ps: [f32; 5] = [0.5, 0.9, 0.2, 1.0, 0.05];
    let (k_view, p_view) =
        (TensorView::from_slice(&top_ks, &[rows]).unwrap(), TensorView::from_slice(&top_ps, &[rows]).unwrap());
    let ints = TensorView::from_slice(&top_ks, &[rows]).unwrap();
    for (op, _) in &support::sampling::sampling_ops()[4..] {
        let input = support::sampling::sampling_input(op, &probs);
        let x = TensorView::from_slice(&input, &[rows, vocab]).unwrap();
        let mut samples = vec![-1i32; rows];
        let call = |samples: &mut [i32], (top_k, top_p): (Scalar, Scalar), per_row: [Option<&TensorView>; 4]| {
            let y = TensorView::from_slice_mut(samples, &[samples.len()]).unwrap();
            let scalars = [top_k, top_p, Scalar::U64(3), Scalar::U64(4)];
            op.call_per_row(&[&x, &y], &scalars, &per_row, Stream::Cpu)
        };
        let given_a_row = (Scalar::Absent, Scalar::Absent);
        call(&mut samples, given_a_row, [Some(&k_view), Some(&p_view), None, None]).unwrap();
        for row in 0..rows {
            let k = if top_ks[row] <= 0 { vocab as i32 } else { top_ks[row] };
            let alone = draw(op, &[Scalar::I32(k), Scalar::F32(top_ps[row])], &probs, vocab, 3, 4);
            assert_eq!(samples[row], alone[row], "{}: row {row}", op.name);
        }
        let mut untouched = vec![-1i32; rows];
        for (scalars, per_row, name) in [
            ((Scalar::I32(5), Scalar::F32(0.0)), [None, None, None, None], "top_p"),
            ((Scalar::I32(0), Scalar::F32(0.5)), [None, None, None, None], "top_k"),
            ((Scalar::I32(5), Scalar::Absent), [None, Some(&ints), None, None], "top_p"),
            ((Scalar::Absent, Scalar::F32(0.5)), [Some(&p_view), None, None, None], "top_k"),
        ] {
            let error = call(&mut untouched, scalars, per_row).unwrap_err();
            assert!(error.to_string().contains(name), "{}: {error}", op.name);
        }
        let error = call(&mut untouched[..4], (Scalar::I32(5), Scalar::F32(0.5)), [None; 4]).unwrap_err();
        assert!(matches!(&error, Error::ShapeMismatch { argument: "samples", .. }), "{error}");
        assert!(error.to_string().contains(op.tensors[0].name), "{}: {error}", op.name);
        assert!(untouched.iter().all(|&s| s == -1), "{}: samples written on an error", op.name);
    }
}

/// A draw is a function of (probs, seed, offset, row): repeated calls agree bit for bit, a row's
/// token does not depend on the other rows, another offset or seed draws afresh, and a row
/// without mass (zeros, negatives, NaN; or min-p above 1) gives 0.
#[test]
fn sampling_ops_are_functions_of_seed_offset_and_row() {
    let vocab = 1000;
    let probs: Vec<f32> = random_normal::<f32>(64 * vocab, 3).into_iter().map(f32::abs).collect();
    for (op, threshold) in support::sampling::sampling_ops() {
        let tokens = draw(op, threshold, &probs, vocab, 11, 4);
        assert_eq!(tokens, draw(op, threshold, &probs, vocab, 11, 4), "{}: repeated", op.name);
        let mut changed = probs.clone();
        changed[..vocab].iter_mut().for_each(|p| *p = 1.0 - *p);
        assert_eq!(tokens[1..], draw(op, threshold, &changed, vocab, 11, 4)[1..], "{}: other rows", op.name);
        for (seed, offset) in [(11, 6), (12, 4)] {
            let other = draw(op, threshold, &probs, vocab, seed, offset);
            let same = tokens.iter().zip(&other).filter(|(a, b)| a == b).count();
            // Top-k then top-p keeps 1 to 3 entries a row: about half repeat by chance (three
            // quarters would not); the others keep more.
            let most = if threshold.len() == 2 { 48 } else { 32 };
            assert!(same < most, "{}: seed {seed} offset {offset} repeats {same} of 64 tokens", op.name);
        }
    }
    let empty = [0.0f32, -1.0, f32::NAN, 0.0];
    // +∞ weighs 0 and sets the scale: the finite entries of its row weigh 0 too (min-p's floor
    // `0 · ∞` is NaN, which keeps every entry, as the reference).
    let infinite = [0.5f32, f32::INFINITY, 0.25, 1.0];
    for (op, threshold) in support::sampling::sampling_ops() {
        assert_eq!(draw(op, threshold, &empty, 4, 1, 0), [0], "{}", op.name);
        let threshold: &[Scalar] = if op.name == "min_p_sampling_from_probs" { &[Scalar::F32(0.0)] } else { threshold };
        assert_eq!(draw(op, threshold, &infinite, 4, 1, 0), [0], "{}: a row holding +∞", op.name);
    }
    let (min_p, _) = support::sampling::sampling_ops()[3];
    let ties = [0.5f32, 0.25, 0.5].repeat(100);
    let tokens = draw(min_p, &[Scalar::F32(1.0)], &ties, 3, 1, 0);
    assert!(
        tokens.iter().all(|&t| t != 1) && tokens.contains(&0) && tokens.contains(&2),
        "min_p = 1: the largest's ties"
    );
}

/// The sampling ops' own errors, each naming its argument, `samples` untouched.
#[test]
fn sampling_errors_name_the_argument_and_leave_samples_untouched() {
    use ferrinfer_launch::top_k_sampling_from_probs;
    let probs: Vec<f32> = random_normal::<f32>(4 * 64, 1).into_iter().map(f32::abs).collect();
    let x = TensorView::from_slice(&probs, &[4, 64]).unwrap();
    let op = &top_k_sampling_from_probs::INFO;
    let mut samples = vec![-1i32; 8];
    let refused = |samples: &[i32]| samples.iter().all(|&s| s == -1);
    let mut call = |shape: &[usize], scalars: [Scalar; 3]| {
        let y = TensorView::from_slice_mut(&mut samples[..shape.iter().product::<usize>()], shape).unwrap();
        op.call(&[&x, &y], &scalars, Stream::Cpu).unwrap_err()
    };
    let (top_k, seed, offset) = (Scalar::I32(5), Scalar::U64(1), Scalar::U64(0));
    // A top_k of 0; a seed or offset of another type than u64 (negative, a fraction, NaN), or left out.
    for (scalars, name) in [
        ([Scalar::I32(0), seed, offset], "top_k"),
        ([top_k, Scalar::I32(-1), offset], "seed"),
        ([top_k, Scalar::F32(1.5), offset], "seed"),
        ([top_k, seed, Scalar::Absent], "offset"),
        ([top_k, seed, Scalar::F32(f32::NAN)], "offset"),
    ] {
        let error = call(&[4], scalars);
        assert!(matches!(&error, Error::InvalidScalar { argument, .. } if argument == &name), "{error}");
    }
    let error = call(&[8], [top_k, seed, offset]);
    assert!(matches!(&error, Error::ShapeMismatch { argument: "samples", .. }), "{error}");
    let error = call(&[4, 1], [top_k, seed, offset]);
    assert!(matches!(&error, Error::ShapeMismatch { argument: "samples", .. }), "{error}");
    assert!(refused(&samples));
    let mut floats = vec![f32::NAN; 4];
    let y = TensorView::from_slice_mut(&mut floats, &[4]).unwrap();
    let error = op.call(&[&x, &y], &[top_k, seed, offset], Stream::Cpu).unwrap_err();
    assert!(matches!(&error, Error::UnsupportedDType { argument: "samples", .. }), "{error}");
    let min_p = support::sampling::sampling_ops()[3].0;
    for bad in [-0.1, 1.5, f32::NAN] {
        let y = TensorView::from_slice_mut(&mut samples[..4], &[4]).unwrap();
        let error = min_p.call(&[&x, &y], &[Scalar::F32(bad), seed, offset], Stream::Cpu).unwrap_err();
        assert!(matches!(&error, Error::InvalidScalar { argument: "min_p", .. }), "{error}");
    }
    assert!(refused(&samples));
}

/// `seed` and `offset` take every u64 as numbers (Philox's whole key and position, none rounded):
/// at the largest the CPU backend draws the reference's tokens, and the largest seed draws
/// other tokens than the one below it.
#[test]
fn sampling_takes_every_u64_seed_and_offset_as_a_number() {
    let (rows, vocab) = (64, 300);
    let probs = support::sampling::peaked_probabilities(rows, vocab, 21);
    for (op, threshold) in support::sampling::sampling_ops() {
        let input: Vec<f64> = support::sampling::sampling_input(op, &probs).iter().map(|&x| x as f64).collect();
        for (seed, offset) in [(u64::MAX, 0), (0, u64::MAX), (u64::MAX, u64::MAX)] {
            let tokens: Vec<f64> = draw(op, threshold, &probs, vocab, seed, offset).iter().map(|&t| t as f64).collect();
            let random = [Scalar::U64(seed), Scalar::U64(offset)];
            let scalars: Vec<Scalar> = threshold.iter().copied().chain(random).collect();
            let want = &op.reference_of(DType::F32, vocab, &[input.clone(), Vec::new()], &scalars)[0];
            assert_eq!(&tokens, want, "{}: seed {seed}, offset {offset}", op.name);
        }
        let below = draw(op, threshold, &probs, vocab, u64::MAX - 1, 0);
        assert_ne!(draw(op, threshold, &probs, vocab, u64::MAX, 0), below, "{}: seeds 2^64 − 1 and − 2", op.name);
    }
}

/// `seed` and `offset` as int64 tensors (read by the kernel, as a captured graph needs): a value a
/// row draws row `r` as the numbers `seeds[r]`, `offsets[r]` do, a `[1]` tensor as its one value;
/// a tensor of another dtype or shape is refused by name, `samples` untouched.
#[test]
fn sampling_takes_seeds_and_offsets_from_tensors_a_row_or_one() {
    let (rows, vocab) = (6, 500);
    let probs: Vec<f32> = random_normal::<f32>(rows * vocab, 5).into_iter().map(f32::abs).collect();
    // −1: u64::MAX's bits, the largest seed.
    let seeds: [i64; 6] = [0, 1, 42, 7, -1, 3];
    let offsets: [i64; 6] = [0, 2, 4, 1_000_006, 6, 8];
    let seed_view = TensorView::from_slice(&seeds, &[rows]).unwrap();
    let offset_view = TensorView::from_slice(&offsets, &[rows]).unwrap();
    let one = [9i64];
    let one_view = TensorView::from_slice(&one, &[1]).unwrap();
    for (op, threshold) in support::sampling::sampling_ops() {
        let input = support::sampling::sampling_input(op, &probs);
        let x = TensorView::from_slice(&input, &[rows, vocab]).unwrap();
        let call = |seed: Option<&TensorView>, offset: Option<&TensorView>, numbers: [Scalar; 2]| {
            let mut samples = vec![-1i32; rows];
            let y = TensorView::from_slice_mut(&mut samples, &[rows]).unwrap();
            let scalars: Vec<Scalar> = threshold.iter().copied().chain(numbers).collect();
            let per_row: Vec<Option<&TensorView>> = threshold.iter().map(|_| None).chain([seed, offset]).collect();
            op.call_per_row(&[&x, &y], &scalars, &per_row, Stream::Cpu).map(|()| samples)
        };
        let tokens = call(Some(&seed_view), Some(&offset_view), [Scalar::Absent; 2]).unwrap();
        for row in 0..rows {
            let alone = draw(op, threshold, &probs, vocab, seeds[row] as u64, offsets[row] as u64);
            assert_eq!(tokens[row], alone[row], "{}: row {row}", op.name);
        }
        let broadcast = call(Some(&one_view), None, [Scalar::Absent, Scalar::U64(5)]).unwrap();
        assert_eq!(broadcast, draw(op, threshold, &probs, vocab, 9, 5), "{}: one seed for every row", op.name);
        let mixed = call(None, Some(&one_view), [Scalar::U64(3), Scalar::Absent]).unwrap();
        assert_eq!(mixed, draw(op, threshold, &probs, vocab, 3, 9), "{}: one offset for every row", op.name);
        let int32 = [1i32; 6];
        let int32 = TensorView::from_slice(&int32, &[rows]).unwrap();
        let error = call(Some(&int32), None, [Scalar::Absent, Scalar::U64(0)]).unwrap_err();
        assert!(matches!(&error, Error::UnsupportedDType { argument: "seed", .. }), "{}: {error}", op.name);
        let short = TensorView::from_slice(&seeds[..3], &[3]).unwrap();
        let error = call(None, Some(&short), [Scalar::U64(1), Scalar::Absent]).unwrap_err();
        assert!(matches!(&error, Error::ShapeMismatch { argument: "offset", .. }), "{}: {error}", op.name);
        // Offsets sharing memory with the tokens: the error names `samples`, nothing is written.
        let mut shared = [-1i64; 6];
        let before = shared;
        let base = shared.as_mut_ptr().cast();
        // SAFETY: both views lie in `shared`, which outlives them.
        let (y, offsets) = unsafe {
            let y = TensorView::from_raw_parts(base, 0, DType::I32, &[rows as i64], &[1], Device::Cpu).unwrap();
            (y, TensorView::from_raw_parts(base, 0, DType::I64, &[rows as i64], &[1], Device::Cpu).unwrap())
        };
        let scalars: Vec<Scalar> = threshold.iter().copied().chain([Scalar::U64(1), Scalar::Absent]).collect();
        let per_row: Vec<Option<&TensorView>> = threshold.iter().map(|_| None).chain([None, Some(&offsets)]).collect();
        let error = op.call_per_row(&[&x, &y], &scalars, &per_row, Stream::Cpu).unwrap_err();
        assert!(matches!(&error, Error::Overlap { argument: "samples", other: "offset" }), "{}: {error}", op.name);
        assert_eq!(shared, before, "{}: nothing written on the error path", op.name);
    }
}
