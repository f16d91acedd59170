//! The cascade family at layer 3: [`CascadeModule::spec`] (FlashInfer's `gen_cascade_module`)
//! describes one module per dtype of the values, with one entry point per vector width and
//! count of states — any, or two (`merge_state`'s, unrolled) — (the launcher picks
//! [`CascadeModule::entry`]). Every op of the family (`merge_state`, in place or
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
    /// The entry index of vector width `vec` (elements) merging `states` states — its own entry
    /// for two (`merge_state`), else the one taking any count — if the dtype has that width.
    pub fn entry(&self, vec: u32, states: u32) -> Option<usize> {
        let fixed = FIXED_STATES.iter().position(|&count| count == states).map_or(0, |i| i + 1);
        let widths = vector_widths(self.dtype).count();
        vector_widths(self.dtype).position(|v| v == vec).map(|i| fixed * widths + i)
    }

    /// The module's spec for `arch`: every vector width for any count of states, then for each
    /// fixed count.
    pub fn spec(&self, arch: CudaArch, debug: bool) -> JitSpec {
        let base = format!("merge_{}", self.dtype.name());
        let entry_points = [0]
            .into_iter()
            .chain(FIXED_STATES)
            .flat_map(|states| {
                let suffix = if states == 0 { String::new() } else { format!("_s{states}") };
                let base = &base;
                vector_widths(self.dtype).map(move |vec| EntrySpec {
                    name: format!("ferrinfer_{base}_v{vec}{suffix}"),
                    kernel: "cascade::merge_rows".into(),
                    params: "cascade::MergeParams".into(),
                    generics: vec![element_type(self.dtype).into(), vec.to_string(), states.to_string()],
                    max_registers: None,
                    stores: None,
                })
            })
            .collect();
        FAMILY.spec(format!("cascade_{base}"), arch, debug, entry_points)
    }
}

/// Counts of states with entries of their own (the kernel's `STATES`; 0 is any count).
const FIXED_STATES: [u32; 1] = [2];

/// Every module the cascade family declares: one per dtype of the values.
pub fn declared_specs(arch: CudaArch, debug: bool) -> Vec<JitSpec> {
    DType::ALL.map(|dtype| CascadeModule { dtype }.spec(arch, debug)).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_module_has_an_entry_per_vector_width() {
        let module = CascadeModule { dtype: DType::Bf16 };
        let spec = module.spec(CudaArch::HOPPER, false);
        assert_eq!(spec.name, "cascade_merge_bf16");
        let v8 = &spec.entry_points[module.entry(8, 5).unwrap()];
        assert_eq!(v8.name, "ferrinfer_merge_bf16_v8");
        assert_eq!(v8.generics, ["element::Bf16", "8", "0"]);
        let pair = &spec.entry_points[module.entry(2, 2).unwrap()];
        assert_eq!((pair.name.as_str(), pair.generics[2].as_str()), ("ferrinfer_merge_bf16_v2_s2", "2"));
        assert_eq!(spec.entry_points.len(), 8, "4 widths, any count and 2");
        assert_eq!(CascadeModule { dtype: DType::F32 }.entry(8, 2), None);
        assert_eq!(declared_specs(CudaArch::HOPPER, false).len(), 3);
    }
}
