//! The norm family at layer 3: `gen_norm_spec` (FlashInfer's `gen_norm_module`) describes one
//! module per op, dtype and weight dtype, holding for every vector width a register-resident
//! kernel per chunk count and a streaming kernel (rows of any length).

use std::collections::BTreeMap;

use ferrinfer_kernels::element::DType;

use crate::spec::{EntrySpec, JitSpec};
use crate::{CudaArch, Family};

/// The norm family: its kernel file and every module it declares (for AOT).
pub const FAMILY: Family = Family { name: "norm", sources: &["norm.rs"], specs: declared_specs };

/// Register chunk counts compiled: each thread holds up to 16 vectors (64 registers of data), so
/// one warp holds a 4096-wide bf16 row.
pub const CHUNK_COUNTS: [u32; 5] = [1, 2, 4, 8, 16];

/// The norm ops with a kernel of their own (Gemma's variants are these with a weight offset).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NormOp {
    RmsNorm,
    FusedAddRmsNorm,
    LayerNorm,
}

impl NormOp {
    pub const ALL: [NormOp; 3] = [NormOp::RmsNorm, NormOp::FusedAddRmsNorm, NormOp::LayerNorm];

    pub fn name(self) -> &'static str {
        match self {
            NormOp::RmsNorm => "rmsnorm",
            NormOp::FusedAddRmsNorm => "fused_add_rmsnorm",
            NormOp::LayerNorm => "layernorm",
        }
    }

    /// The `NormKind` type the kernels are instantiated with.
    fn kind(self) -> &'static str {
        match self {
            NormOp::RmsNorm => "norm::Rms",
            NormOp::FusedAddRmsNorm => "norm::FusedAddRms",
            NormOp::LayerNorm => "norm::Layer",
        }
    }

    /// Weight dtypes the op accepts with `dtype` input: its own, and f32 for layernorm.
    pub fn weight_dtypes(self, dtype: DType) -> Vec<DType> {
        match self {
            NormOp::LayerNorm if dtype != DType::F32 => vec![dtype, DType::F32],
            _ => vec![dtype],
        }
    }
}

/// Register cap (`.maxnreg`) of a register-resident kernel with up to 8 chunks: 96 for
/// everything else plus the row's registers (2× for 16-bit types, 1.5× for f32, which layernorm
/// reads twice), rounded to 8 — without a cap ptxas spends registers on hoisting loads and fewer
/// rows stay resident. 16 chunks get no cap: at 128 they spilled (ptxas), and ptxas's own choice
/// (about 190 for 16-bit types) spills nothing. Streaming kernels need none.
fn register_cap(dtype: DType, vec: u32, chunks: u32) -> Option<u32> {
    let row_registers = chunks * vec * dtype.size() as u32 / 4;
    let row_registers = if dtype.size() == 2 { row_registers * 2 } else { row_registers * 3 / 2 };
    (1..=8).contains(&chunks).then(|| (96 + row_registers).next_multiple_of(8).min(255))
}

/// The kernels crate's type for a dtype, as a path relative to `ferrinfer_kernels`.
fn element_type(dtype: DType) -> &'static str {
    match dtype {
        DType::F16 => "element::F16",
        DType::Bf16 => "element::Bf16",
        DType::F32 => "f32",
    }
}

/// Vector widths from 16 bytes down to one element.
pub fn vector_widths(dtype: DType) -> impl Iterator<Item = u32> {
    let widest = 16 / dtype.size() as u32;
    (0..=widest.trailing_zeros()).map(move |shift| widest >> shift)
}

/// The module of `op` for `dtype` input and `weight` dtype on `arch`.
pub fn gen_norm_spec(op: NormOp, dtype: DType, weight: DType, arch: CudaArch, debug: bool) -> JitSpec {
    let weight_suffix = if weight == dtype { String::new() } else { format!("_w{}", weight.name()) };
    let base = format!("{}_{}{weight_suffix}", op.name(), dtype.name());
    let types = [element_type(dtype).to_string(), element_type(weight).into(), op.kind().into()];
    let entry = |vec: u32, chunks: u32| {
        let (kernel, suffix, mut generics) = match chunks {
            0 => ("norm::norm_stream", "stream".to_string(), types.to_vec()),
            _ => ("norm::norm_regs", format!("c{chunks}"), types.to_vec()),
        };
        generics.push(vec.to_string());
        if chunks > 0 {
            generics.push(chunks.to_string());
        }
        EntrySpec {
            name: format!("ferrinfer_{base}_v{vec}_{suffix}"),
            kernel: kernel.into(),
            params: "norm::NormParams".into(),
            generics,
            vec,
            chunks,
            max_registers: register_cap(dtype, vec, chunks),
        }
    };
    let entry_points = vector_widths(dtype)
        .flat_map(|vec| CHUNK_COUNTS.into_iter().chain([0]).map(move |chunks| (vec, chunks)))
        .map(|(vec, chunks)| entry(vec, chunks))
        .collect();
    JitSpec {
        name: format!("norm_{base}"),
        family: FAMILY.name.into(),
        dtype: dtype.name().into(),
        arch,
        debug,
        sources: FAMILY.sources.iter().map(|s| s.to_string()).collect(),
        constants: BTreeMap::new(),
        flags: Vec::new(),
        entry_points,
    }
}

/// Every module the norm family declares: each op × dtype × weight dtype.
pub fn declared_specs(arch: CudaArch, debug: bool) -> Vec<JitSpec> {
    let mut specs = Vec::new();
    for op in NormOp::ALL {
        for dtype in DType::ALL {
            for weight in op.weight_dtypes(dtype) {
                specs.push(gen_norm_spec(op, dtype, weight, arch, debug));
            }
        }
    }
    specs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_width_has_a_kernel_per_chunk_count_and_a_streaming_one() {
        let spec = gen_norm_spec(NormOp::RmsNorm, DType::Bf16, DType::Bf16, CudaArch::HOPPER, false);
        assert_eq!(spec.entry_points.len(), 4 * 6);
        assert_eq!(spec.entry_point(8, 16).unwrap().name, "ferrinfer_rmsnorm_bf16_v8_c16");
        assert_eq!(spec.entry_point(1, 0).unwrap().generics, ["element::Bf16", "element::Bf16", "norm::Rms", "1"]);
        let f32_widths: Vec<u32> = vector_widths(DType::F32).collect();
        assert_eq!(f32_widths, [4, 2, 1]);
    }

    #[test]
    fn layernorm_takes_f32_weights_with_half_inputs() {
        let specs = declared_specs(CudaArch::HOPPER, false);
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        assert!(names.contains(&"norm_layernorm_bf16_wf32") && names.contains(&"norm_layernorm_f32"));
        assert_eq!(specs.len(), 3 + 3 + 5);
    }
}
