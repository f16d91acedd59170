//! The peers' standard grids, per op family: `(T, H)` pairs, H outer.

/// The grid of `family`'s peers' benchmark (`../shared/peers/peers.py`), if it has one.
pub fn peers(family: &str) -> Option<Vec<(usize, usize)>> {
    let (hidden, tokens): (&[usize], &[usize]) = match family {
        "norm" => (&[4096, 8192], &[1, 16, 128, 1024, 4096, 16384, 65536]),
        "activation" => (&[4096, 11008, 14336], &[1, 16, 128, 1024, 4096, 16384]),
        // The sampling issue's points: Llama 3's vocabulary, batch 1 to 256 (and 32000, Llama 2's).
        "sampling" => (&[32000, 128256], &[1, 64, 256]),
        // The cascade issue's points: 32 heads of head_dim 128, seq ∈ {1, 128, 2048, 16384} —
        // rows are (token, head) pairs.
        "cascade" => (&[128], &[32, 128 * 32, 2048 * 32, 16384 * 32]),
        // The rope issue's points: head_dim 128, tokens ∈ {1, 128, 2048, 16384} (q's 32 heads,
        // k's 8: `op::QUERY_HEADS`, `op::KV_HEADS`).
        "rope" => (&[128], &[1, 128, 2048, 16384]),
        // The paged-KV append issue's points: {1, 128, 2048} tokens for each of 64 sequences,
        // head_dim 128 (8 heads, pages of 16: `op::KV_HEADS`, `page::PAGE_SIZE`; the problems deal
        // the tokens to `op::SEGMENTS` sequences — the kernel's work does not depend on how many).
        "page" => (&[128], &[64, 64 * 128, 64 * 2048]),
        _ => return None,
    };
    Some(hidden.iter().flat_map(|&h| tokens.iter().map(move |&t| (t, h))).collect())
}
