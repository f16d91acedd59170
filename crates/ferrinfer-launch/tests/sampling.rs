//! The sampling family through the public API on the CPU backend: softmax for every logits dtype
//! against its f64 reference over vocabularies from one entry to Llama 3's, strided rows,
//! temperatures (0 included); the validation errors (each names its argument and leaves `out`
//! untouched).

mod support;

use ferrinfer_launch::reference::{compare, random_normal};
use ferrinfer_launch::{DType, Error, Stream, TensorView, softmax};
use support::{Case, Cpu, assert_refused, family, run_cases};

fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for rows in [1, 5, 33] {
        for vocab in [1, 7, 64, 1000, 4097, 32000] {
            cases.extend([Case::contiguous(rows, vocab), Case::strided(rows, vocab)]);
        }
    }
    cases.push(Case::strided(2, 128_256));
    cases
}

#[test]
fn sampling_cpu_grid() {
    run_cases(&Cpu, &family("sampling"), 4000, &cases());
}

/// Softmax of `logits` (rows of `vocab`) at `temperature` on the CPU backend.
fn cpu_softmax(logits: &[f32], vocab: usize, temperature: f32) -> Vec<f32> {
    let shape = [logits.len() / vocab, vocab];
    let mut probs = vec![f32::NAN; logits.len()];
    let x = TensorView::from_slice(logits, &shape).unwrap();
    softmax(&x, &mut TensorView::from_slice_mut(&mut probs, &shape).unwrap(), temperature, Stream::Cpu).unwrap();
    probs
}

#[test]
fn softmax_follows_the_temperature_and_zero_weighs_logits_alike() {
    let op = &ferrinfer_launch::softmax::INFO;
    let logits: Vec<f32> = random_normal(3 * 1000, 7);
    let as_f64: Vec<f64> = logits.iter().map(|&x| x as f64).collect();
    for temperature in [0.25f32, 0.7, 1.0, 3.0] {
        let want = &op.reference_of(DType::F32, 1000, &[as_f64.clone(), Vec::new()], &[temperature as f64])[0];
        let got: Vec<f64> = cpu_softmax(&logits, 1000, temperature).iter().map(|&p| p as f64).collect();
        compare(DType::F32, &got, want).unwrap_or_else(|e| panic!("temperature {temperature}: {e}"));
    }
    assert!(cpu_softmax(&logits, 1000, 0.0).iter().all(|&p| p == 1.0 / 1000.0));
}

#[test]
fn softmax_rows_of_minus_infinity_or_holding_infinity_or_nan_are_nan_and_others_unaffected() {
    let mut logits = vec![0.5f32; 4 * 8];
    logits[..8].fill(f32::NEG_INFINITY);
    logits[8 + 3] = f32::INFINITY;
    logits[16 + 5] = f32::NAN;
    logits[24] = f32::NEG_INFINITY;
    let probs = cpu_softmax(&logits, 8, 1.0);
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
