//! The sampling family's test problems: peaked rows, the samplers with their thresholds, which entries a filter keeps.

use super::*;

/// `rows` rows of `vocab` probabilities, softmax of `3 · x` for standard-normal `x` from
/// `seed`: peaked as a language model's, a few hundred entries holding most of a row's mass.
pub fn peaked_probabilities(rows: usize, vocab: usize, seed: u64) -> Vec<f32> {
    let logits: Vec<f32> = reference::random_normal(rows * vocab, seed);
    logits
        .chunks_exact(vocab)
        .flat_map(|row| {
            let weights: Vec<f32> = row.iter().map(|&x| (3.0 * x).exp()).collect();
            let sum: f32 = weights.iter().sum();
            weights.into_iter().map(move |w| w / sum)
        })
        .collect()
}

/// What a sampling test feeds `op` for rows of probabilities: the probabilities, or for an op
/// that draws from logits their logarithms (0 → −∞), whose softmax they are.
pub fn sampling_input(op: &OpInfo, probs: &[f32]) -> Vec<f32> {
    if reads_logits(op) { probs.iter().map(|p| p.ln()).collect() } else { probs.to_vec() }
}

/// Whether a sampling op draws from logits (weighed as softmax's numerators).
pub fn reads_logits(op: &OpInfo) -> bool {
    op.tensors[0].name == "logits"
}

/// Which of `probs` (one row) a sampling op keeps given its `thresholds`, by the ops'
/// definitions (the table's docs), in f32 sums: the support tests' and the expected
/// distributions' set.
pub fn sampling_kept(op: &OpInfo, thresholds: &[Scalar], probs: &[f32]) -> Vec<bool> {
    let max = probs.iter().fold(0.0f32, |m, &p| m.max(p));
    let mut sorted = probs.to_vec();
    sorted.sort_by(|a, b| b.total_cmp(a));
    let given = op.scalars_of(thresholds);
    let top_k = || {
        let k: i32 = given.get("top_k").unwrap();
        probs.iter().map(|&p| p >= sorted[k as usize - 1]).collect::<Vec<bool>>()
    };
    let share = |name| given.get::<f32>(name).unwrap();
    // Top-p among the entries `among` keeps: the mass strictly above an entry short of the share.
    let top_p = |among: &[bool]| {
        let total: f32 = probs.iter().zip(among).filter(|(_, k)| **k).map(|(p, _)| p).sum();
        let above = |p: f32| probs.iter().filter(|&&q| q > p).sum::<f32>();
        probs.iter().zip(among).map(|(&p, &k)| k && above(p) < share("top_p") * total).collect::<Vec<bool>>()
    };
    match op.name.trim_end_matches("_from_probs").trim_end_matches("_from_logits") {
        "top_k_sampling" => top_k(),
        "top_p_sampling" => top_p(&vec![true; probs.len()]),
        "min_p_sampling" => probs.iter().map(|&p| p >= share("min_p") * max).collect(),
        "top_k_top_p_sampling" => top_p(&top_k()),
        _ => probs.iter().map(|&p| p > 0.0).collect(),
    }
}

/// The sampling ops with their thresholds (none for `sampling_from_probs`), chosen so that each
/// filter drops entries of both the CPU tests' 10-entry row and the GPU tests' 16-entry one
/// (top-k then top-p: top-k keeps 3 there, top-p 2 of them).
pub fn sampling_ops() -> [(&'static OpInfo, &'static [Scalar]); 6] {
    use ferrinfer_launch::{
        min_p_sampling_from_probs, sampling_from_probs, top_k_sampling_from_probs, top_k_top_p_sampling_from_logits,
        top_k_top_p_sampling_from_probs, top_p_sampling_from_probs,
    };
    [
        (&sampling_from_probs::INFO, &[]),
        (&top_k_sampling_from_probs::INFO, &[Scalar::I32(3)]),
        (&top_p_sampling_from_probs::INFO, &[Scalar::F32(0.6)]),
        (&min_p_sampling_from_probs::INFO, &[Scalar::F32(0.3)]),
        (&top_k_top_p_sampling_from_probs::INFO, &[Scalar::I32(3), Scalar::F32(0.6)]),
        (&top_k_top_p_sampling_from_logits::INFO, &[Scalar::I32(3), Scalar::F32(0.6)]),
    ]
}
