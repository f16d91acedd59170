//! The sampling family on a CUDA GPU through the public API: every op for every dtype over a grid
//! of vocabularies (up to 2^20, odd ones too; rows staged in shared memory or not) and rows,
//! every kernel path at sanitizer-friendly sizes, bitwise determinism (repeated calls, rows
//! permuted, a row alone), temperatures and filter thresholds (one, or one a row from device
//! memory), top-p keeping exactly the CPU's entries, the sampling ops drawing the CPU's tokens
//! bit for bit and, over a million draws, the kept distribution and nothing else, and more than
//! 2^31 elements. Without a CUDA driver or device every test prints
//! that it was skipped and passes (CI has no GPU).

mod support;

use ferrinfer_launch::op::OpInfo;
use ferrinfer_launch::reference::{compare, random_normal};
use ferrinfer_launch::scalar::ScalarType;
use ferrinfer_launch::{
    DType, Error, Scalar, Stream, TensorView, min_p_sampling_from_probs, sampling_from_probs, softmax,
    top_k_mask_logits, top_k_renorm_probs, top_k_sampling_from_probs, top_k_top_p_sampling_from_logits,
    top_k_top_p_sampling_from_probs, top_p_renorm_probs, top_p_sampling_from_probs,
};
use support::{Buffer, Case, Gpu, Runner, buffer_of, family, run_cases};

#[test]
fn sampling_gpu_grid() {
    let Some(gpu) = Gpu::get("sampling_gpu_grid") else { return };
    let mut cases = Vec::new();
    for rows in [1, 7, 64, 257] {
        for vocab in [1, 7, 64, 1000, 4097, 8192, 16385, 32000, 128_256, 151_936, 262_144] {
            cases.extend([Case::contiguous(rows, vocab), Case::strided(rows, vocab)]);
        }
    }
    // A slice too large for shared memory: the top-k passes read global memory each round.
    cases.push(Case::contiguous(3, 1 << 20));
    run_cases(&gpu, &family("sampling"), 5_000_000, &cases);
}

#[test]
fn sampling_gpu_sanitizer_every_kernel_path() {
    let Some(gpu) = Gpu::get("sampling_gpu_sanitizer_every_kernel_path") else { return };
    // Beyond the shared cases: a row across 2, 4 and 8 blocks of a cluster, rows past the grid.
    let mut cases = support::sanitizer_cases();
    cases.extend([Case::strided(3, 16_384), Case::contiguous(2, 40_000), Case::strided(3, 65_543)]);
    cases.extend([Case::contiguous(70_000, 8), Case::contiguous(70_000, 64)]);
    run_cases(&gpu, &family("sampling"), 7_500_000, &cases);
}

/// The filter and sampling kernels' paths at racecheck-friendly sizes (their shared-memory traffic makes the
/// whole sanitizer test outrun racecheck's time limit): a row in one block and across clusters
/// of 2, 4 and 8.
#[test]
fn sampling_gpu_sanitizer_filter_cluster_paths() {
    let Some(gpu) = Gpu::get("sampling_gpu_sanitizer_filter_cluster_paths") else { return };
    let cases = [1000, 16_384, 40_000, 65_543].map(|vocab| Case::contiguous(2, vocab));
    let filters = [
        &top_k_mask_logits::INFO,
        &top_k_renorm_probs::INFO,
        &top_p_renorm_probs::INFO,
        &sampling_from_probs::INFO,
        &top_k_sampling_from_probs::INFO,
        &top_p_sampling_from_probs::INFO,
        &min_p_sampling_from_probs::INFO,
        &top_k_top_p_sampling_from_probs::INFO,
        &top_k_top_p_sampling_from_logits::INFO,
    ];
    run_cases(&gpu, &filters, 7_700_000, &cases);
}

/// The filters' wider blocks (`Plan::filter_split`) on a GPU of 132 multiprocessors (H100,
/// H200): 40 rows of 65543 in two blocks a row, of 1024 threads where the entry can have them
/// (the 16-bit mask's 64 registers), else of 512; 200 rows of 16384 in one block of 512 a row
/// (two waves of them where the split's blocks of 256 take two too). Two blocks of 512 a row at
/// 40 × 16384 is one of the shared sanitizer cases.
#[test]
fn sampling_gpu_sanitizer_filter_wide_block_paths() {
    let Some(gpu) = Gpu::get("sampling_gpu_sanitizer_filter_wide_block_paths") else { return };
    let cases = [Case::contiguous(40, 65_543), Case::contiguous(200, 16_384)];
    let filters = [&top_k_mask_logits::INFO, &top_k_renorm_probs::INFO, &top_p_renorm_probs::INFO];
    run_cases(&gpu, &filters, 7_900_000, &cases);
}

/// `rows` rows of `vocab` f32 values through `op` with scalar `scalar` on the GPU: its output.
fn gpu_call(gpu: &Gpu, op: &'static OpInfo, input: &[f32], vocab: usize, scalar: Scalar) -> Vec<f32> {
    let rows = input.len() / vocab;
    let mut buffers = [buffer_of(input, &[rows, vocab]), buffer_of(&vec![f32::NAN; input.len()], &[rows, vocab])];
    gpu.run(op, &mut buffers, &[scalar]).unwrap();
    bytemuck::cast_slice(&buffers[1].bytes).to_vec()
}

fn gpu_softmax(gpu: &Gpu, logits: &[f32], vocab: usize, temperature: f32) -> Vec<f32> {
    gpu_call(gpu, &softmax::INFO, logits, vocab, Scalar::F32(temperature))
}

/// Bitwise, for every op: the same call twice, the rows in another order, one row alone.
#[test]
fn sampling_gpu_every_op_is_bitwise_deterministic_whatever_the_batch() {
    let Some(gpu) = Gpu::get("sampling_gpu_every_op_is_bitwise_deterministic_whatever_the_batch") else { return };
    let (rows, vocab) = (64, 128_256);
    let logits: Vec<f32> = random_normal(rows * vocab, 11).iter().map(|x: &f32| 4.0 * x).collect();
    let probs: Vec<f32> = logits.iter().map(|x| x.abs()).collect();
    for (op, input, scalar) in [
        (&softmax::INFO, &logits, Scalar::F32(1.0)),
        (&top_k_mask_logits::INFO, &logits, Scalar::I32(50)),
        (&top_k_renorm_probs::INFO, &probs, Scalar::I32(1000)),
        (&top_p_renorm_probs::INFO, &probs, Scalar::F32(0.9)),
    ] {
        let first = gpu_call(&gpu, op, input, vocab, scalar);
        for _ in 0..3 {
            assert!(first == gpu_call(&gpu, op, input, vocab, scalar), "{}: a repeated call differs", op.name);
        }
        let order: Vec<usize> = (0..rows).map(|r| (r * 37 + 5) % rows).collect();
        let permuted: Vec<f32> = order.iter().flat_map(|&r| input[r * vocab..(r + 1) * vocab].to_vec()).collect();
        let permuted_out = gpu_call(&gpu, op, &permuted, vocab, scalar);
        for (i, &r) in order.iter().enumerate() {
            let moved = permuted_out[i * vocab..(i + 1) * vocab] != first[r * vocab..(r + 1) * vocab];
            assert!(!moved, "{}: row {r} moved", op.name);
        }
        let alone = gpu_call(&gpu, op, &input[17 * vocab..18 * vocab], vocab, scalar);
        assert!(alone == first[17 * vocab..18 * vocab], "{}: row 17 alone differs from row 17 in the batch", op.name);
    }
}

#[test]
fn sampling_gpu_softmax_follows_the_temperature() {
    let Some(gpu) = Gpu::get("sampling_gpu_softmax_follows_the_temperature") else { return };
    let op = &softmax::INFO;
    let (rows, vocab) = (3, 32_000);
    let logits: Vec<f32> = random_normal(rows * vocab, 13);
    let as_f64: Vec<f64> = logits.iter().map(|&x| x as f64).collect();
    for temperature in [0.25f32, 0.7, 3.0] {
        let want = &op.reference_of(DType::F32, vocab, &[as_f64.clone(), Vec::new()], &[Scalar::F32(temperature)])[0];
        let got: Vec<f64> = gpu_softmax(&gpu, &logits, vocab, temperature).iter().map(|&p| p as f64).collect();
        compare(DType::F32, &got, want).unwrap_or_else(|e| panic!("temperature {temperature}: {e}"));
    }
    assert!(gpu_softmax(&gpu, &logits, vocab, 0.0).iter().all(|&p| p == 1.0 / vocab as f32));
    // Masked logits (−∞) keep nothing at a temperature of 0, the others exactly alike.
    let mut masked = logits[..vocab].to_vec();
    masked[4..].fill(f32::NEG_INFINITY);
    let probs = gpu_softmax(&gpu, &masked, vocab, 0.0);
    assert!(probs[..4].iter().all(|&p| p == 0.25) && probs[4..].iter().all(|&p| p == 0.0), "{:?}", &probs[..8]);
}

/// A temperature a row from device memory: each row as softmax at that one temperature, bit for
/// bit; the tensor on another device than the logits is refused.
#[test]
fn sampling_gpu_softmax_takes_a_temperature_a_row() {
    let Some(gpu) = Gpu::get("sampling_gpu_softmax_takes_a_temperature_a_row") else { return };
    let (rows, vocab) = (6, 128_256);
    let logits: Vec<f32> = random_normal(rows * vocab, 23).iter().map(|x: &f32| 3.0 * x).collect();
    let temperatures = [0.3f32, 0.7, 1.0, 2.0, 0.0, 1.5];
    let s = &gpu.stream;
    let (x, t) = (s.clone_htod(&logits).unwrap(), s.clone_htod(&temperatures).unwrap());
    let mut probs = s.alloc_zeros::<f32>(rows * vocab).unwrap();
    let (xv, tv) =
        (TensorView::from_cuda(&x, &[rows, vocab], None).unwrap(), TensorView::from_cuda(&t, &[rows], None).unwrap());
    softmax(&xv, &mut TensorView::from_cuda_mut(&mut probs, &[rows, vocab], None).unwrap(), &tv, Stream::Cuda(s))
        .unwrap();
    let probs = s.clone_dtoh(&probs).unwrap();
    for (row, &temperature) in temperatures.iter().enumerate() {
        let alone = gpu_softmax(&gpu, &logits[row * vocab..(row + 1) * vocab], vocab, temperature);
        assert!(alone == probs[row * vocab..(row + 1) * vocab], "row {row} (temperature {temperature})");
    }
    let host = TensorView::from_slice(&temperatures, &[rows]).unwrap();
    let mut out = s.alloc_zeros::<f32>(rows * vocab).unwrap();
    let error =
        softmax(&xv, &mut TensorView::from_cuda_mut(&mut out, &[rows, vocab], None).unwrap(), &host, Stream::Cuda(s))
            .unwrap_err();
    assert!(matches!(error, Error::DeviceMismatch { argument: "temperature", .. }), "{error}");
}

/// `op` with a threshold a row from device memory (`thresholds`): each row bit for bit as the op
/// alone at the threshold `alone(threshold)`.
fn rows_as_alone<T: ferrinfer_launch::HostElement + cudarc::driver::DeviceRepr + ScalarType + std::fmt::Debug>(
    gpu: &Gpu,
    op: &'static OpInfo,
    input: &[f32],
    thresholds: &[T],
    alone: impl Fn(T) -> T,
) {
    let (rows, vocab) = (thresholds.len(), input.len() / thresholds.len());
    let s = &gpu.stream;
    let (x, t) = (s.clone_htod(input).unwrap(), s.clone_htod(thresholds).unwrap());
    let mut out = s.alloc_zeros::<f32>(rows * vocab).unwrap();
    let (xv, tv) =
        (TensorView::from_cuda(&x, &[rows, vocab], None).unwrap(), TensorView::from_cuda(&t, &[rows], None).unwrap());
    let yv = TensorView::from_cuda_mut(&mut out, &[rows, vocab], None).unwrap();
    op.call_per_row(&[&xv, &yv], &[Scalar::Absent], &[Some(&tv)], Stream::Cuda(s)).unwrap();
    let out = s.clone_dtoh(&out).unwrap();
    for (row, &threshold) in thresholds.iter().enumerate() {
        let one = gpu_call(gpu, op, &input[row * vocab..(row + 1) * vocab], vocab, alone(threshold).into_scalar());
        assert!(one == out[row * vocab..(row + 1) * vocab], "{}: row {row} ({threshold:?})", op.name);
    }
}

/// A `top_k` a row from device memory (≤ 0 keeps the row) and a `top_p` a row (≥ 1 keeps the
/// row, ≤ 0 or NaN its largest entries): each row bit for bit as the op at its one threshold.
#[test]
fn sampling_gpu_filters_take_a_threshold_a_row() {
    let Some(gpu) = Gpu::get("sampling_gpu_filters_take_a_threshold_a_row") else { return };
    let vocab = 128_256;
    let logits: Vec<f32> = random_normal(5 * vocab, 31);
    rows_as_alone(&gpu, &top_k_mask_logits::INFO, &logits, &[1i32, 50, 0, 1000, -1], |k| {
        if k > 0 { k } else { vocab as i32 }
    });
    // Six rows: the five and the first again.
    let probs: Vec<f32> = logits.iter().chain(&logits[..vocab]).map(|x| x.abs()).collect();
    let top_ps = [0.9f32, 0.3, 1.0, 5.0, 0.0, f32::NAN];
    rows_as_alone(&gpu, &top_p_renorm_probs::INFO, &probs, &top_ps, |p| {
        if p >= 1.0 {
            1.0
        } else if p > 0.0 {
            p
        } else {
            1e-30
        }
    });
}

/// Top-p's masses are exact integers: the GPU keeps exactly the entries the CPU keeps, whatever
/// the blocks a row is split into (the renormalised values differ only by the sum's rounding).
#[test]
fn sampling_gpu_top_p_keeps_what_the_cpu_keeps() {
    let Some(gpu) = Gpu::get("sampling_gpu_top_p_keeps_what_the_cpu_keeps") else { return };
    let op = &top_p_renorm_probs::INFO;
    for vocab in [1000, 32_000, 128_256, 1 << 20] {
        let probs: Vec<f32> = random_normal(4 * vocab, 41).iter().map(|x: &f32| x.abs().powi(3)).collect();
        for top_p in [0.1f32, 0.5, 0.9, 0.99] {
            let on_gpu = gpu_call(&gpu, op, &probs, vocab, Scalar::F32(top_p));
            let mut on_cpu = vec![f32::NAN; probs.len()];
            let x = TensorView::from_slice(&probs, &[4, vocab]).unwrap();
            let y = TensorView::from_slice_mut(&mut on_cpu, &[4, vocab]).unwrap();
            op.call(&[&x, &y], &[Scalar::F32(top_p)], Stream::Cpu).unwrap();
            let kept = |out: &[f32]| out.iter().map(|&o| o > 0.0).collect::<Vec<_>>();
            assert!(kept(&on_gpu) == kept(&on_cpu), "vocab {vocab}, top_p {top_p}: the kept entries differ");
            let got: Vec<f64> = on_gpu.iter().map(|&v| v as f64).collect();
            let want: Vec<f64> = on_cpu.iter().map(|&v| v as f64).collect();
            compare(DType::F32, &got, &want).unwrap_or_else(|e| panic!("vocab {vocab}, top_p {top_p}: {e}"));
        }
    }
}

/// More than 2^31 logits: every offset must be 64-bit. Checked on slices of rows, on all cores.
#[test]
fn sampling_gpu_over_2_pow_31_elements() {
    let Some(gpu) = Gpu::get("sampling_gpu_over_2_pow_31_elements") else { return };
    let case = Case::contiguous(17_000, 128_256);
    assert!(case.rows * case.hidden > 1 << 31);
    for op in [&softmax::INFO, &top_k_mask_logits::INFO, &top_p_renorm_probs::INFO] {
        let scalars = op.examples(case.rows, case.hidden);
        let before: Vec<Buffer> = support::buffers(op, DType::Bf16, false, &case, 61);
        let mut after = before.clone();
        gpu.run(op, &mut after, &scalars).unwrap();
        let failures = support::check_in_slices(op, DType::Bf16, &case, &before, &after, &scalars, 500);
        assert!(failures.is_empty(), "{}: {failures:?}", op.name);
    }
}

/// `op`'s tokens for rows of `probs` (`vocab` each) on the GPU, or (`gpu` None) on the CPU.
fn tokens(
    gpu: Option<&Gpu>,
    op: &'static OpInfo,
    threshold: &[Scalar],
    probs: &[f32],
    vocab: usize,
    offset: u64,
) -> Vec<i32> {
    let rows = probs.len() / vocab;
    let scalars: Vec<Scalar> = threshold.iter().copied().chain([Scalar::U64(7), Scalar::U64(offset)]).collect();
    let input = support::sampling::sampling_input(op, probs);
    let mut buffers = [buffer_of(&input, &[rows, vocab]), buffer_of(&vec![-1i32; rows], &[rows])];
    match gpu {
        Some(gpu) => gpu.run(op, &mut buffers, &scalars).unwrap(),
        None => support::Cpu.run(op, &mut buffers, &scalars).unwrap(),
    }
    bytemuck::cast_slice(&buffers[1].bytes).to_vec()
}

/// The GPU draws the CPU's tokens bit for bit — rows in one block or across clusters, staged in
/// shared memory or not (2^20), ties and rows without mass — for several offsets, and the same
/// tokens again on a repeated call and for a row alone.
#[test]
fn sampling_gpu_draws_the_cpus_tokens() {
    let Some(gpu) = Gpu::get("sampling_gpu_draws_the_cpus_tokens") else { return };
    // 2^22 + 1: one entry a vector, spans of more than 32 steps a warp in `sampling_from_probs`.
    for (rows, vocab) in [(64, 1000), (64, 32_000), (16, 128_256), (3, 1 << 20), (3, (1 << 22) + 1)] {
        let mut probs: Vec<f32> = random_normal(rows * vocab, 51).iter().map(|x: &f32| x.abs().powi(3)).collect();
        // Ties (a row of equal entries) and a row without mass.
        probs[vocab..2 * vocab].fill(0.5);
        probs[2 * vocab..3 * vocab].fill(0.0);
        if rows > 4 {
            // Probabilities (weighed as they are read), and weights all below 2^−20 (weighed
            // again at their own scale), beside the rows of larger weights.
            let sum: f32 = probs[3 * vocab..4 * vocab].iter().sum();
            probs[3 * vocab..4 * vocab].iter_mut().for_each(|p| *p /= sum);
            probs[4 * vocab..5 * vocab].iter_mut().for_each(|p| *p *= 1e-12);
        }
        for (op, threshold) in support::sampling::sampling_ops() {
            for offset in [0, 2, 1_000_006] {
                let on_gpu = tokens(Some(&gpu), op, threshold, &probs, vocab, offset);
                let on_cpu = tokens(None, op, threshold, &probs, vocab, offset);
                assert_eq!(on_gpu, on_cpu, "{} vocab {vocab} offset {offset}", op.name);
                assert_eq!(on_gpu, tokens(Some(&gpu), op, threshold, &probs, vocab, offset), "{}: repeated", op.name);
                assert_eq!(on_gpu[2], 0, "{}: a row without mass", op.name);
            }
        }
    }
}

/// Top-p's rejection rounds on the GPU, alone (the unstaged kernel) or among the top-k entries
/// (the staged one; probabilities and logits): peaked rows and small shares (most first draws
/// rejected, several rounds a row), in one block or across a cluster: the CPU's tokens.
#[test]
fn sampling_gpu_top_p_redraws_as_the_cpu() {
    let Some(gpu) = Gpu::get("sampling_gpu_top_p_redraws_as_the_cpu") else { return };
    let ops = support::sampling::sampling_ops();
    for (rows, vocab) in [(3, 128_256), (200, 32_000), (64, 128_256)] {
        let probs = support::sampling::peaked_probabilities(rows, vocab, 17);
        for top_p in [0.001f32, 0.3, 0.9] {
            for (op, top_k) in [(ops[2].0, None), (ops[4].0, Some(300)), (ops[5].0, Some(300))] {
                let thresholds: Vec<Scalar> = top_k.map(Scalar::I32).into_iter().chain([Scalar::F32(top_p)]).collect();
                let on_gpu = tokens(Some(&gpu), op, &thresholds, &probs, vocab, 4);
                let on_cpu = tokens(None, op, &thresholds, &probs, vocab, 4);
                assert_eq!(on_gpu, on_cpu, "{} top_p {top_p}, vocab {vocab}", op.name);
            }
            // The staged kernel with every entry in its top-k: the unstaged top-p kernel's tokens.
            let staged =
                tokens(Some(&gpu), ops[4].0, &[Scalar::I32(vocab as i32), Scalar::F32(top_p)], &probs, vocab, 4);
            let unstaged = tokens(Some(&gpu), ops[2].0, &[Scalar::F32(top_p)], &probs, vocab, 4);
            assert_eq!(staged, unstaged, "top-k of the vocabulary, top_p {top_p}, vocab {vocab}");
        }
    }
}

/// More rows than the grid's 65535: a block takes several rows, each staged over the last while
/// the previous draw's thread may still read it (the staging must wait for that read); 512
/// vectors a slice, so a thread's chunk holds keys other threads staged.
#[test]
fn sampling_gpu_draws_the_cpus_tokens_when_blocks_take_several_rows() {
    let Some(gpu) = Gpu::get("sampling_gpu_draws_the_cpus_tokens_when_blocks_take_several_rows") else { return };
    let (rows, vocab) = (70_000, 2048);
    let probs: Vec<f32> = random_normal(rows * vocab, 53).iter().map(|x: &f32| x.abs().powi(3)).collect();
    for (op, threshold) in support::sampling::sampling_ops() {
        let on_gpu = tokens(Some(&gpu), op, threshold, &probs, vocab, 8);
        assert_eq!(on_gpu, tokens(None, op, threshold, &probs, vocab, 8), "{}", op.name);
    }
}

/// A million draws of each sampling op on the GPU (a batch of 2^20 copies of one 16-entry row):
/// no entry outside the kept set is ever drawn, and the counts fit the kept entries' distribution
/// (chi-square at p ≈ 1e−6).
#[test]
fn sampling_gpu_draws_the_kept_distribution_over_a_million_draws() {
    let Some(gpu) = Gpu::get("sampling_gpu_draws_the_kept_distribution_over_a_million_draws") else { return };
    let row: Vec<f32> = (0..16).map(|i| if i % 5 == 2 { 0.0 } else { (1 + i % 7) as f32 / 40.0 }).collect();
    let copies = 1 << 20;
    let probs: Vec<f32> = row.iter().copied().cycle().take(row.len() * copies).collect();
    for (op, threshold) in support::sampling::sampling_ops() {
        let kept = support::sampling::sampling_kept(op, threshold, &row);
        let mut counts = vec![0u64; row.len()];
        for token in tokens(Some(&gpu), op, threshold, &probs, row.len(), 0) {
            counts[token as usize] += 1;
        }
        let mass: f64 = row.iter().zip(&kept).filter(|(_, k)| **k).map(|(&p, _)| p as f64).sum();
        let mut chi_square = 0.0;
        let mut df = 0;
        for (i, (&count, &p)) in counts.iter().zip(&row).enumerate() {
            if !kept[i] || p == 0.0 {
                assert_eq!(count, 0, "{}: entry {i} (not kept) drawn {count} times", op.name);
                continue;
            }
            let expected = copies as f64 * p as f64 / mass;
            chi_square += (count as f64 - expected).powi(2) / expected;
            df += 1;
        }
        // Chi-square's critical value at p ≈ 1e−6 (Wilson–Hilferty), df − 1 degrees of freedom.
        let (dof, z) = ((df - 1) as f64, 4.753);
        let critical = dof * (1.0 - 2.0 / (9.0 * dof) + z * (2.0 / (9.0 * dof)).sqrt()).powi(3);
        assert!(chi_square < critical, "{}: chi-square {chi_square:.1} over {dof} dof; {counts:?}", op.name);
    }
}

/// Seeds and offsets from device memory (int64, a value a row, any 64 bits — past 2^53 and
/// "negative" ones too): the GPU draws the CPU's tokens from the same tensors; the tensors
/// rewritten on the device (as a graph's captured `offset += 2` would) change the draw the next
/// call makes, to the CPU's for the new values; a `[1]` offset serves every row.
#[test]
fn sampling_gpu_takes_seeds_and_offsets_from_device_memory() {
    let Some(gpu) = Gpu::get("sampling_gpu_takes_seeds_and_offsets_from_device_memory") else { return };
    let s = &gpu.stream;
    let (rows, vocab) = (64, 32_000);
    let probs: Vec<f32> = random_normal(rows * vocab, 57).iter().map(|x: &f32| x.abs()).collect();
    let seeds: Vec<i64> = (0..rows as i64).map(|r| r.wrapping_mul(0x9e37_79b9_7f4a_7c15u64 as i64)).collect();
    let seeds_gpu = s.clone_htod(&seeds).unwrap();
    let seed_view = TensorView::from_cuda(&seeds_gpu, &[rows], None).unwrap();
    for (op, threshold) in support::sampling::sampling_ops() {
        let input = support::sampling::sampling_input(op, &probs);
        let x = s.clone_htod(&input).unwrap();
        let xv = TensorView::from_cuda(&x, &[rows, vocab], None).unwrap();
        let draw = |offsets: &[i64]| -> (Vec<i32>, Vec<i32>) {
            // The GPU's tokens, then the CPU's from host copies of the same tensors.
            let offsets_gpu = s.clone_htod(offsets).unwrap();
            let offset_view = TensorView::from_cuda(&offsets_gpu, &[offsets.len()], None).unwrap();
            let mut out = s.alloc_zeros::<i32>(rows).unwrap();
            let yv = TensorView::from_cuda_mut(&mut out, &[rows], None).unwrap();
            let scalars: Vec<Scalar> = threshold.iter().copied().chain([Scalar::Absent; 2]).collect();
            let per_row: Vec<Option<&TensorView>> =
                threshold.iter().map(|_| None).chain([Some(&seed_view), Some(&offset_view)]).collect();
            op.call_per_row(&[&xv, &yv], &scalars, &per_row, Stream::Cuda(s)).unwrap();
            let on_gpu = s.clone_dtoh(&out).unwrap();
            let mut on_cpu = vec![-1i32; rows];
            let (hx, hs, ho) = (
                TensorView::from_slice(&input, &[rows, vocab]).unwrap(),
                TensorView::from_slice(&seeds, &[rows]).unwrap(),
                TensorView::from_slice(offsets, &[offsets.len()]).unwrap(),
            );
            let hy = TensorView::from_slice_mut(&mut on_cpu, &[rows]).unwrap();
            let per_row: Vec<Option<&TensorView>> =
                threshold.iter().map(|_| None).chain([Some(&hs), Some(&ho)]).collect();
            op.call_per_row(&[&hx, &hy], &scalars, &per_row, Stream::Cpu).unwrap();
            (on_gpu, on_cpu)
        };
        let first: Vec<i64> = (0..rows as i64).map(|r| 3 * r).collect();
        let (gpu_first, cpu_first) = draw(&first);
        assert_eq!(gpu_first, cpu_first, "{}: a seed and an offset a row", op.name);
        let advanced: Vec<i64> = first.iter().map(|o| o + 2).collect();
        let (gpu_next, cpu_next) = draw(&advanced);
        assert_eq!(gpu_next, cpu_next, "{}: offsets advanced", op.name);
        let same = gpu_first.iter().zip(&gpu_next).filter(|(a, b)| a == b).count();
        // Top-k keeps 3 a row: ~a third repeat by chance; three quarters would not.
        assert!(same < rows * 3 / 4, "{}: advanced offsets repeat {same} of {rows} tokens", op.name);
        let (gpu_one, cpu_one) = draw(&[-5]);
        assert_eq!(gpu_one, cpu_one, "{}: one offset for every row", op.name);
    }
}
