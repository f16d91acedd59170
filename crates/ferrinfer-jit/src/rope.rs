//! The rope family at layer 3: [`RopeModule::spec`] (FlashInfer's `gen_rope_module`) describes
//! one module per dtype of q/k, dtype of the positions and their source (one a token, segments,
//! or one a token with the angles read from a table), with one entry point per vector width (the
//! launcher picks [`RopeModule::entry`]). Every op of the family runs the one rope kernel.

use ferrinfer_kernels::element::DType;

use crate::spec::{EntrySpec, IndexType, JitSpec, element_type, vector_widths};
use crate::{CudaArch, Family};

/// The rope family: its kernel file and every module it declares (for AOT).
pub const FAMILY: Family = Family { name: "rope", sources: &["rope.rs"], specs: declared_specs };

/// Where a rope module's positions and angles come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RopeSource {
    /// A position a token (`pos_ids`), angles computed.
    Ids,
    /// Positions from segments (`indptr`, `offsets`), angles computed.
    Segments,
    /// A position a token, angles read from a table of cosines and sines (`cos_sin_cache`).
    CachedIds,
}

impl RopeSource {
    pub const ALL: [RopeSource; 3] = [RopeSource::Ids, RopeSource::Segments, RopeSource::CachedIds];

    fn name(self) -> &'static str {
        match self {
            RopeSource::Ids => "ids",
            RopeSource::Segments => "segments",
            RopeSource::CachedIds => "cached_ids",
        }
    }

    /// The kernel's `Positions` and `Angles` type parameters, for positions of `index`.
    fn generics(self, index: IndexType) -> [String; 2] {
        let positions = if self == RopeSource::Segments { "Segments" } else { "Ids" };
        let angles = if self == RopeSource::CachedIds { "Cached" } else { "Computed" };
        [format!("rope::{positions}<{}>", index.name()), format!("rope::{angles}")]
    }
}

/// One rope module.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RopeModule {
    /// q's and k's.
    pub dtype: DType,
    pub positions: IndexType,
    pub source: RopeSource,
}

impl RopeModule {
    /// The entry index of vector width `vec` (elements), if the dtype has it.
    pub fn entry(&self, vec: u32) -> Option<usize> {
        vector_widths(self.dtype).position(|v| v == vec)
    }

    /// The module's spec for `arch`.
    pub fn spec(&self, arch: CudaArch, debug: bool) -> JitSpec {
        let base = format!("rope_{}_{}_{}", self.dtype.name(), self.source.name(), self.positions.name());
        let [positions, angles] = self.source.generics(self.positions);
        let entry_points = vector_widths(self.dtype)
            .map(|vec| EntrySpec {
                name: format!("ferrinfer_{base}_v{vec}"),
                kernel: "rope::rope_rows".into(),
                params: "rope::RopeParams".into(),
                generics: vec![element_type(self.dtype).into(), positions.clone(), angles.clone(), vec.to_string()],
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
        for positions in IndexType::ALL {
            for source in RopeSource::ALL {
                specs.push(RopeModule { dtype, positions, source }.spec(arch, debug));
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
        let module = RopeModule { dtype: DType::Bf16, positions: IndexType::I64, source: RopeSource::Ids };
        let spec = module.spec(CudaArch::HOPPER, false);
        assert_eq!(spec.name, "rope_bf16_ids_i64");
        let v8 = &spec.entry_points[module.entry(8).unwrap()];
        assert_eq!(v8.name, "ferrinfer_rope_bf16_ids_i64_v8");
        assert_eq!(v8.generics, ["element::Bf16", "rope::Ids<i64>", "rope::Computed", "8"]);
        let segments = RopeModule { source: RopeSource::Segments, ..module }.spec(CudaArch::HOPPER, false);
        assert_eq!(segments.entry_points[0].generics[1..3], ["rope::Segments<i64>", "rope::Computed"]);
        let cached = RopeModule { source: RopeSource::CachedIds, ..module }.spec(CudaArch::HOPPER, false);
        assert_eq!(cached.name, "rope_bf16_cached_ids_i64");
        assert_eq!(cached.entry_points[0].generics[1..3], ["rope::Ids<i64>", "rope::Cached"]);
        assert_eq!(declared_specs(CudaArch::HOPPER, false).len(), 18);
    }
}
