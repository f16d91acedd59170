//! The rope family on a CUDA GPU through the public API: every op and dtype (int32 and int64
//! positions) over head dimensions, token counts that fill the device and more, the scalar
//! variants of the CPU tests (interleaved, partial rotary), cos/sin tables narrower than the
//! head and positions outside them, every kernel path at sanitizer-friendly sizes, and more than
//! 2^31 elements of q. Without a CUDA driver or device
//! every test prints that it was skipped and passes (CI has no GPU).

mod support;

use ferrinfer_launch::DType;
use support::rope::rope_scalar_variants as variants;
use support::{Case, Gpu, Runner, family, run_cases_with};

#[test]
fn rope_gpu_grid() {
    let Some(gpu) = Gpu::get("rope_gpu_grid") else { return };
    let mut cases = Vec::new();
    for tokens in [1, 19, 128, 2048] {
        for dim in [2, 6, 64, 72, 100, 128, 256] {
            cases.extend([Case::contiguous(tokens, dim), Case::strided(tokens, dim)]);
        }
    }
    cases.push(Case::contiguous(16384, 128));
    // Every scalar variant up to 128 tokens; the defaults beyond (the host's f64 references of
    // the large cases dominate the test's time).
    let scalars = |op: &_, case: &Case| match case.rows <= 128 {
        true => variants(op, case),
        false => vec![op.examples(case.rows, case.hidden)],
    };
    run_cases_with(&gpu, &family("rope"), 5_100_000, &cases, &scalars);
}

#[test]
fn rope_gpu_sanitizer_every_kernel_path() {
    let Some(gpu) = Gpu::get("rope_gpu_sanitizer_every_kernel_path") else { return };
    // Every vector width of f16/bf16 (6: one element; 100: two — half of it rotated: one; 72:
    // four; 128: eight), contiguous and strided, in as few launches as the sanitizers allow.
    let cases = [Case::contiguous(3, 6), Case::strided(5, 100), Case::strided(3, 72), Case::contiguous(3, 128)];
    run_cases_with(&gpu, &family("rope"), 7_700_000, &cases, &variants);
}

/// More than 2^31 elements of q: every offset must be 64-bit. Checked on slices of tokens, on
/// all cores.
#[test]
fn rope_gpu_over_2_pow_31_elements() {
    let Some(gpu) = Gpu::get("rope_gpu_over_2_pow_31_elements") else { return };
    let case = Case::contiguous(530_000, 128);
    assert!(case.rows * ferrinfer_launch::op::QUERY_HEADS * case.hidden > 1 << 31);
    let op = &ferrinfer_launch::apply_rope_pos_ids::INFO;
    let scalars = op.examples(case.rows, case.hidden);
    let before = support::buffers(op, DType::Bf16, false, &case, 53);
    let mut after = before.clone();
    gpu.run(op, &mut after, &scalars).unwrap();
    let failures = support::check_in_slices(op, DType::Bf16, &case, &before, &after, &scalars, 20_000);
    assert!(failures.is_empty(), "{failures:?}");
}

/// The cache ops with tables narrower than the head (partial rotary), as on the CPU.
#[test]
fn rope_gpu_cos_sin_cache_narrow_tables() {
    let Some(gpu) = Gpu::get("rope_gpu_cos_sin_cache_narrow_tables") else { return };
    let cases: Vec<Case> =
        [6, 64, 100, 128, 256].into_iter().flat_map(|d| [Case::contiguous(19, d), Case::strided(300, d)]).collect();
    support::rope::run_narrow_tables(&gpu, 5_300_000, &cases);
}

/// A position outside the table (which the GPU path cannot check before the launch) reads
/// nothing and turns its token's pairs into NaN; the other tokens come out as they should.
#[test]
fn rope_gpu_cos_sin_cache_positions_outside_the_table_give_nan() {
    let Some(gpu) = Gpu::get("rope_gpu_cos_sin_cache_positions_outside_the_table_give_nan") else { return };
    let op = &ferrinfer_launch::apply_rope_with_cos_sin_cache::INFO;
    let case = Case::contiguous(4, 64);
    let scalars = op.examples(case.rows, case.hidden);
    let outside = [0i32, ferrinfer_launch::op::TABLE_ROWS as i32, 5, -1];
    let inside = [0i32, 1, 5, 2];
    let mut runs = [outside, inside].map(|positions| {
        let mut buffers = support::buffers(op, DType::F32, false, &case, 71);
        buffers[0] = support::buffer_of(&positions, &[positions.len()]);
        gpu.run(op, &mut buffers, &scalars).unwrap();
        buffers
    });
    let [outside_run, inside_run] = &mut runs;
    let width = ferrinfer_launch::op::QUERY_HEADS * case.hidden;
    for (token, bad) in [false, true, false, true].into_iter().enumerate() {
        let row = |run: &[support::Buffer]| run[4].logical()[token * width..(token + 1) * width].to_vec();
        match bad {
            true => assert!(row(outside_run).iter().all(|v| v.is_nan()), "token {token}: not NaN"),
            false => assert_eq!(row(outside_run), row(inside_run), "token {token}"),
        }
    }
}
