//! The cascade family at layer 3: [`CascadeModule::spec`] (FlashInfer's `gen_cascade_module`)
//! describes one module per dtype of the values, with one entry point per vector width, vectors
//! a lane merges at once and count of states — any, or two (`merge_state`'s, one step) — (the
//! launcher picks [`CascadeModule::entry`]). Every op of the family (`merge_state`, in place or
//! not, `merge_states`) runs the one merge kernel.

use ferrinfer_kernels::element::DType;

use crate::spec::{EntrySpec, JitSpec, element_type, vector_widths};
use crate::{CudaArch, Family};

/// The cascade family: its kernel file and every module it declares (for AOT).
pub const FAMILY: Family = Family { name: "cascade", sources: &["cascade.rs"], specs: declared_specs };

/// The merge kernel for one dtype of the values, every vector width.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CascadeModule {
    pub dtype: DType,
}

impl CascadeModule {
    /// The entry index merging `states` states — its own entry for two (`merge_state`'s, and
    /// `merge_states`' of two states, heads or not), else the one taking any count —
    /// in vectors of `vec` elements, `unroll` of them at once, if the module has it (every width
    /// the dtype has, one at a time; for two states the widest also [`UNROLLED`] at once).
    pub fn entry(&self, vec: u32, unroll: u32, states: u32) -> Option<usize> {
        let fixed = if FIXED_STATES.contains(&states) { states } else { 0 };
        self.entries().position(|entry| entry == MergeEntry { vec, unroll, states: fixed })
    }

    /// Every entry, in the module's order: any count of states, then each fixed count, its
    /// widest vector unrolled first. (Not the any-count merge: unrolled, ptxas issued 5 of its
    /// 12 loads together, where the 16-bit `v8` entry of one vector a lane issues all 8 — and
    /// `merge_states` is bound by memory, not instructions.)
    fn entries(&self) -> impl Iterator<Item = MergeEntry> + use<> {
        let dtype = self.dtype;
        let widest = vector_widths(dtype).next();
        [0].into_iter().chain(FIXED_STATES).flat_map(move |states| {
            let unrolled = widest.filter(|_| states != 0).map(|vec| MergeEntry { vec, unroll: UNROLLED, states });
            unrolled.into_iter().chain(vector_widths(dtype).map(move |vec| MergeEntry { vec, unroll: 1, states }))
        })
    }

    /// The module's spec for `arch`: [`CascadeModule::entries`].
    pub fn spec(&self, arch: CudaArch, debug: bool) -> JitSpec {
        let base = format!("merge_{}", self.dtype.name());
        let entry_points = self
            .entries()
            .map(|MergeEntry { vec, unroll, states }| {
                let unrolled = if unroll == 1 { String::new() } else { format!("x{unroll}") };
                let fixed = if states == 0 { String::new() } else { format!("_s{states}") };
                EntrySpec {
                    name: format!("ferrinfer_{base}_v{vec}{unrolled}{fixed}"),
                    kernel: "cascade::merge_rows".into(),
                    params: "cascade::MergeParams".into(),
                    generics: vec![
                        element_type(self.dtype).into(),
                        vec.to_string(),
                        unroll.to_string(),
                        states.to_string(),
                    ],
                    max_registers: None,
                    stores: None,
                }
            })
            .collect();
        FAMILY.spec(format!("cascade_{base}"), arch, debug, entry_points)
    }
}

/// One entry point's kernel generics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct MergeEntry {
    /// Elements a vector.
    vec: u32,
    /// Vectors a lane merges at once.
    unroll: u32,
    /// States merged (0: any count).
    states: u32,
}

/// Counts of states with entries of their own (the kernel's `STATES`; 0 is any count).
const FIXED_STATES: [u32; 1] = [2];

/// Vectors a lane merges at once in the unrolled entries.
pub const UNROLLED: u32 = 2;

/// Every module the cascade family declares: one per dtype of the values.
pub fn declared_specs(arch: CudaArch, debug: bool) -> Vec<JitSpec> {
    DType::ALL.map(|dtype| CascadeModule { dtype }.spec(arch, debug)).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_module_has_an_entry_per_vector_width_and_an_unrolled_widest() {
        let module = CascadeModule { dtype: DType::Bf16 };
        let spec = module.spec(CudaArch::HOPPER, false);
        assert_eq!(spec.name, "cascade_merge_bf16");
        let v8 = &spec.entry_points[module.entry(8, 1, 5).unwrap()];
        assert_eq!(v8.name, "ferrinfer_merge_bf16_v8");
        assert_eq!(v8.generics, ["element::Bf16", "8", "1", "0"]);
        let pair = &spec.entry_points[module.entry(2, 1, 2).unwrap()];
        assert_eq!((pair.name.as_str(), pair.generics[3].as_str()), ("ferrinfer_merge_bf16_v2_s2", "2"));
        let unrolled = &spec.entry_points[module.entry(8, UNROLLED, 2).unwrap()];
        assert_eq!((unrolled.name.as_str(), unrolled.generics[2].as_str()), ("ferrinfer_merge_bf16_v8x2_s2", "2"));
        assert_eq!(module.entry(4, UNROLLED, 2), None, "only the widest vector unrolled");
        assert_eq!(module.entry(8, UNROLLED, 3), None, "only two states' merge unrolled");
        assert_eq!(spec.entry_points.len(), 9, "any count: 4 widths; 2: 4 and the widest unrolled");
        let f32_module = CascadeModule { dtype: DType::F32 };
        assert_eq!(f32_module.entry(8, 1, 2), None);
        assert_eq!(spec_name(&f32_module, 4, UNROLLED, 2), "ferrinfer_merge_f32_v4x2_s2");
        assert_eq!(declared_specs(CudaArch::HOPPER, false).len(), 3);
    }

    fn spec_name(module: &CascadeModule, vec: u32, unroll: u32, states: u32) -> String {
        module.spec(CudaArch::HOPPER, false).entry_points[module.entry(vec, unroll, states).unwrap()].name.clone()
    }
}
