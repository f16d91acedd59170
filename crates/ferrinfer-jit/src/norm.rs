//! The norm family at layer 3: `gen_norm_spec` (FlashInfer's `gen_norm_module`) describes one
//! module per op and dtype, holding an entry point per vector width.

use std::collections::BTreeMap;

use ferrinfer_kernels::element::DType;

use crate::spec::{EntrySpec, JitSpec};
use crate::{CudaArch, Family};

/// The norm family: its kernel file and every module it declares (for AOT).
pub const FAMILY: Family = Family { name: "norm", sources: &["norm.rs"], specs: declared_specs };

/// The norm ops, each a generic kernel in `ferrinfer_kernels::norm`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NormOp {
    RmsNorm,
}

impl NormOp {
    pub const ALL: [NormOp; 1] = [NormOp::RmsNorm];

    fn name(self) -> &'static str {
        match self {
            NormOp::RmsNorm => "rmsnorm",
        }
    }

    fn kernel(self) -> &'static str {
        match self {
            NormOp::RmsNorm => "norm::rmsnorm_block",
        }
    }
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
fn vector_widths(dtype: DType) -> impl Iterator<Item = u32> {
    let widest = 16 / dtype.size() as u32;
    (0..=widest.trailing_zeros()).map(move |shift| widest >> shift)
}

/// The module of `op` for `dtype` on `arch`.
pub fn gen_norm_spec(op: NormOp, dtype: DType, arch: CudaArch, debug: bool) -> JitSpec {
    let entry_points = vector_widths(dtype)
        .map(|vec| EntrySpec {
            name: format!("ferrinfer_{}_{}_v{vec}", op.name(), dtype.name()),
            kernel: op.kernel().into(),
            params: "norm::NormParams".into(),
            generics: vec![element_type(dtype).into(), vec.to_string()],
            vec,
        })
        .collect();
    JitSpec {
        name: format!("norm_{}_{}", op.name(), dtype.name()),
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

/// Every module the norm family declares: each op × dtype.
pub fn declared_specs(arch: CudaArch, debug: bool) -> Vec<JitSpec> {
    NormOp::ALL
        .into_iter()
        .flat_map(|op| DType::ALL.into_iter().map(move |dtype| gen_norm_spec(op, dtype, arch, debug)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_width_from_16_bytes_down_has_an_entry() {
        let spec = gen_norm_spec(NormOp::RmsNorm, DType::Bf16, CudaArch::HOPPER, false);
        let widths: Vec<u32> = spec.entry_points.iter().map(|e| e.vec).collect();
        assert_eq!(widths, [8, 4, 2, 1]);
        assert_eq!(spec.entry_point(4).unwrap().name, "ferrinfer_rmsnorm_bf16_v4");
        let f32_widths: Vec<u32> = vector_widths(DType::F32).collect();
        assert_eq!(f32_widths, [4, 2, 1]);
    }
}
