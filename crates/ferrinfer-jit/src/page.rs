//! The page family at layer 3: [`PageModule::spec`] (FlashInfer's `gen_page_module`) describes
//! one module per dtype of the keys and values and integer type of the page tables, with one
//! entry point per vector width (the launcher picks [`PageModule::entry`]), which
//! `append_paged_kv_cache` runs; and [`PositionsModule`], one per index type, for
//! `get_batch_indices_positions`.

use ferrinfer_kernels::element::DType;

use crate::spec::{EntrySpec, IndexType, JitSpec, element_type, vector_widths};
use crate::{CudaArch, Family};

/// The page family: its kernel file and every module it declares (for AOT).
pub const FAMILY: Family = Family { name: "page", sources: &["page.rs"], specs: declared_specs };

/// One append module.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PageModule {
    /// The keys' and values' (and caches').
    pub dtype: DType,
    /// The page tables' (`batch_indices`, `positions`, `kv_indices`, `kv_indptr`).
    pub index: IndexType,
}

impl PageModule {
    /// The entry index of vector width `vec` (elements), if the dtype has it.
    pub fn entry(&self, vec: u32) -> Option<usize> {
        vector_widths(self.dtype).position(|v| v == vec)
    }

    /// The module's spec for `arch`.
    pub fn spec(&self, arch: CudaArch, debug: bool) -> JitSpec {
        let base = format!("append_{}_{}", self.dtype.name(), self.index.name());
        let entry_points = vector_widths(self.dtype)
            .map(|vec| EntrySpec {
                name: format!("ferrinfer_{base}_v{vec}"),
                kernel: "page::append_rows".into(),
                params: "page::AppendParams".into(),
                generics: vec![element_type(self.dtype).into(), self.index.name().into(), vec.to_string()],
                max_registers: None,
                // A copy: it stores the values' bits as read, no conversion for the SASS
                // guard's rule to look for.
                stores: Some("bits".into()),
            })
            .collect();
        FAMILY.spec(format!("page_{base}"), arch, debug, entry_points)
    }
}

/// The module of `get_batch_indices_positions` for one index type: one entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PositionsModule {
    pub index: IndexType,
}

impl PositionsModule {
    /// The module's spec for `arch`.
    pub fn spec(&self, arch: CudaArch, debug: bool) -> JitSpec {
        let base = format!("batch_indices_positions_{}", self.index.name());
        let entry = EntrySpec {
            name: format!("ferrinfer_{base}"),
            kernel: "page::batch_indices_positions".into(),
            params: "page::PositionsParams".into(),
            generics: vec![self.index.name().into()],
            max_registers: None,
            stores: Some("i32".into()),
        };
        FAMILY.spec(format!("page_{base}"), arch, debug, vec![entry])
    }
}

/// Every module the page family declares: the append's for each dtype × index type, the
/// positions' for each index type.
pub fn declared_specs(arch: CudaArch, debug: bool) -> Vec<JitSpec> {
    let append = DType::ALL.into_iter().flat_map(|dtype| IndexType::ALL.map(|index| PageModule { dtype, index }));
    let positions = IndexType::ALL.map(|index| PositionsModule { index }.spec(arch, debug));
    append.map(|module| module.spec(arch, debug)).chain(positions).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_module_has_an_entry_per_vector_width() {
        let module = PageModule { dtype: DType::Bf16, index: IndexType::I32 };
        let spec = module.spec(CudaArch::HOPPER, false);
        assert_eq!(spec.name, "page_append_bf16_i32");
        let v8 = &spec.entry_points[module.entry(8).unwrap()];
        assert_eq!(v8.name, "ferrinfer_append_bf16_i32_v8");
        assert_eq!(v8.generics, ["element::Bf16", "i32", "8"]);
        assert_eq!(PageModule { dtype: DType::F32, index: IndexType::I64 }.entry(8), None);
        let positions = PositionsModule { index: IndexType::I64 }.spec(CudaArch::HOPPER, false);
        assert_eq!(positions.name, "page_batch_indices_positions_i64");
        assert_eq!(positions.entry_points[0].generics, ["i64"]);
        assert_eq!(declared_specs(CudaArch::HOPPER, false).len(), 8);
    }
}
