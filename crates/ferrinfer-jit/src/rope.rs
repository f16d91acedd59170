//! The rope family at layer 3: [`RopeModule::spec`] (FlashInfer's `gen_rope_module`) describes
//! one module per dtype of q/k, dtype of the positions and their source (one a token, or
//! segments), with one entry point per vector width (the launcher picks [`RopeModule::entry`]).
//! Every op of the family runs the one rope kernel.

use ferrinfer_kernels::element::DType;

use crate::spec::{EntrySpec, JitSpec, element_type, vector_widths};
use crate::{CudaArch, Family};

/// The rope family: its kernel file and every module it declares (for AOT).
pub const FAMILY: Family = Family { name: "rope", sources: &["rope.rs"], specs: declared_specs };

/// The integer type of the positions (FlashInfer's `pos_ids`: int32 or int64).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PositionType {
    I32,
    I64,
}

impl PositionType {
    pub const ALL: [PositionType; 2] = [PositionType::I32, PositionType::I64];

    fn name(self) -> &'static str {
        match self {
            PositionType::I32 => "i32",
            PositionType::I64 => "i64",
        }
    }
}

/// One rope module.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RopeModule {
    /// q's and k's.
    pub dtype: DType,
    pub positions: PositionType,
    /// Positions from segments (`indptr`, `offsets`), not one a token.
    pub segmented: bool,
}

impl RopeModule {
    /// The entry index of vector width `vec` (elements), if the dtype has it.
    pub fn entry(&self, vec: u32) -> Option<usize> {
        vector_widths(self.dtype).position(|v| v == vec)
    }

    /// The module's spec for `arch`.
    pub fn spec(&self, arch: CudaArch, debug: bool) -> JitSpec {
        let source = if self.segmented { "segments" } else { "ids" };
        let base = format!("rope_{}_{source}_{}", self.dtype.name(), self.positions.name());
        let entry_points = vector_widths(self.dtype)
            .map(|vec| EntrySpec {
                name: format!("ferrinfer_{base}_v{vec}"),
                kernel: "rope::rope_rows".into(),
                params: "rope::RopeParams".into(),
                generics: vec![
                    element_type(self.dtype).into(),
                    format!("rope::{}<{}>", if self.segmented { "Segments" } else { "Ids" }, self.positions.name()),
                    vec.to_string(),
                ],
                max_registers: None,
                stores: None,
            })
            .collect();
        FAMILY.spec(base, arch, debug, entry_points)
    }
}

/// Every module the rope family declares: each dtype × position type × source.
pub fn declared_specs(arch: CudaArch, debug: bool) -> Vec<JitSpec> {
    let mut specs = Vec::new();
    for dtype in DType::ALL {
        for positions in PositionType::ALL {
            for segmented in [false, true] {
                specs.push(RopeModule { dtype, positions, segmented }.spec(arch, debug));
            }
        }
    }
    specs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_module_has_an_entry_per_vector_width() {
        let module = RopeModule { dtype: DType::Bf16, positions: PositionType::I64, segmented: false };
        let spec = module.spec(CudaArch::HOPPER, false);
        assert_eq!(spec.name, "rope_bf16_ids_i64");
        let v8 = &spec.entry_points[module.entry(8).unwrap()];
        assert_eq!(v8.name, "ferrinfer_rope_bf16_ids_i64_v8");
        assert_eq!(v8.generics, ["element::Bf16", "rope::Ids<i64>", "8"]);
        let segments = RopeModule { segmented: true, ..module }.spec(CudaArch::HOPPER, false);
        assert_eq!(segments.entry_points[0].generics[1], "rope::Segments<i64>");
        assert_eq!(declared_specs(CudaArch::HOPPER, false).len(), 12);
    }
}
