//! The page family on a CUDA GPU through the public API: `append_paged_kv_cache` for every dtype
//! and index type over head dimensions and token counts (the 64 × 2048 tokens too), both
//! layouts and page sizes 1 to 64, sanitizer-sized cases, and page tables leading outside the
//! caches (those tokens are not written, nothing outside is). Without a CUDA driver or device
//! every test prints that it was skipped and passes (CI has no GPU).

mod support;

use ferrinfer_launch::scalar::ScalarType;
use ferrinfer_launch::{DType, KvLayout};
use support::page::PagedCase;
use support::{Case, Gpu, Runner, family, run_cases};

#[test]
fn page_gpu_grid() {
    let Some(gpu) = Gpu::get("page_gpu_grid") else { return };
    let mut cases = Vec::new();
    for rows in [1, 2, 3, 19, 99, 989, 4096] {
        for head_dim in [1, 7, 64, 128, 256] {
            cases.extend([Case::contiguous(rows, head_dim), Case::strided(rows, head_dim)]);
        }
    }
    // The 64 sequences × 2048 tokens (here dealt to `op::SEGMENTS` sequences; one case:
    // each holds ~9 GB of f64 copies while checked, eight at once).
    cases.push(Case::contiguous(64 * 2048, 128));
    run_cases(&gpu, &family("page"), 5_100_000, &cases);
}

#[test]
fn page_gpu_layouts_and_page_sizes() {
    let Some(gpu) = Gpu::get("page_gpu_layouts_and_page_sizes") else { return };
    for layout in [KvLayout::Nhd, KvLayout::Hnd] {
        for (page_size, prefix) in [(1, 0), (5, 3), (16, 0), (16, 17), (64, 100)] {
            for (tokens, sequences) in [(1, 1), (40, 3), (130, 7), (5000, 64)] {
                for index in [DType::I32, DType::I64] {
                    for dtype in [DType::F16, DType::Bf16, DType::F32] {
                        let (heads, head_dim) = (8, 128);
                        let case = PagedCase { tokens, sequences, heads, head_dim, page_size, layout, index, prefix };
                        case.run(&gpu, dtype, 31).unwrap();
                    }
                }
            }
        }
    }
}

/// Small cases reaching every vector width and a grid that strides, for compute-sanitizer.
#[test]
fn page_gpu_sanitizer_every_kernel_path() {
    let Some(gpu) = Gpu::get("page_gpu_sanitizer_every_kernel_path") else { return };
    let mut cases = Vec::new();
    for head_dim in [1, 2, 4, 8, 12, 128] {
        cases.extend([Case::contiguous(3, head_dim), Case::strided(40, head_dim)]);
    }
    cases.push(Case::contiguous(20_000, 128));
    run_cases(&gpu, &family("page"), 5_200_000, &cases);
}

/// Page tables the GPU cannot check (their values are on the device): a page past the cache, a
/// sequence out of range, a negative position. Those tokens are not written; every other token
/// is, and nothing outside the caches is touched (compute-sanitizer's memcheck sees this test).
#[test]
fn page_gpu_tables_leading_outside_the_caches_write_nothing_there() {
    let Some(gpu) = Gpu::get("page_gpu_tables_leading_outside_the_caches_write_nothing_there") else { return };
    let op = &ferrinfer_launch::append_paged_kv_cache::INFO;
    let case = PagedCase {
        tokens: 12,
        sequences: 3,
        heads: 2,
        head_dim: 16,
        page_size: 4,
        layout: KvLayout::Nhd,
        index: DType::I32,
        prefix: 0,
    };
    let valid = case.buffers(DType::F32, 7);
    let mut expected = valid.clone();
    let layout = [case.layout.into_scalar()];
    Runner::run(&support::Cpu, op, &mut expected, &layout).unwrap();
    // Each sequence holds 4 tokens in one page (`ids[b]`). Sequence 0's page moved past the cache
    // (its tokens 0, 3, 6, 9 lost), token 1's sequence and token 2's position out of range (they
    // held entry 0 of sequences 1's and 2's pages).
    let ids: Vec<i32> = bytemuck::cast_slice(&valid[6].bytes).to_vec();
    let mut broken = valid.clone();
    broken[6] = support::buffer_of(&[1_000_000, ids[1], ids[2]], &[3]);
    broken[2] = support::buffer_of(&[0i32, 3, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2], &[12]);
    broken[3] = support::buffer_of(&[0i32, 0, -1, 1, 1, 1, 2, 2, 2, 3, 3, 3], &[12]);
    gpu.run(op, &mut broken, &layout).unwrap();
    let entry = case.heads * case.head_dim;
    let page = case.page_size * entry;
    for (cache, name) in [(4, "paged_k_cache"), (5, "paged_v_cache")] {
        let (got, before, want) = (broken[cache].values(), valid[cache].values(), expected[cache].values());
        for (i, ((g, b), w)) in got.iter().zip(&before).zip(&want).enumerate() {
            let (page_of, entry_of) = ((i / page) as i32, (i % page) / entry);
            let skipped = page_of == ids[0] || (entry_of == 0 && (page_of == ids[1] || page_of == ids[2]));
            let expect = if skipped { b } else { w };
            assert_eq!(g.to_bits(), expect.to_bits(), "`{name}` element {i} (page {page_of}, entry {entry_of})");
        }
    }
}
