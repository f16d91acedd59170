//! The decode family at layer 3: [`DecodeModule::spec`] (FlashInfer's `gen_batch_decode_module`)
//! describes one module per dtype of the query and caches, integer type of the page table and
//! head size, with an entry for each count of query heads a thread takes, with and without RoPE
//! in the kernel (the launcher picks [`DecodeModule::entry`]), the merge of a request's partial
//! states ([`DecodeModule::MERGE`]) and, for f16 and bf16, the items' kernel on tensor cores
//! ([`DecodeModule::tensor_core_entry`]).

use ferrinfer_kernels::decode::mma_row_passes;
use ferrinfer_kernels::element::DType;

use crate::spec::{EntrySpec, IndexType, JitSpec, element_type};
use crate::{CudaArch, Family};

/// The decode family: its kernel file and every module it declares (for AOT).
pub const FAMILY: Family = Family { name: "decode", sources: &["decode.rs"], specs: declared_specs };

/// Head sizes with modules.
pub const HEAD_DIMS: [u32; 3] = [64, 128, 256];

/// Query heads a thread of the items' kernel may take (each an entry).
pub const HEADS_PER_THREAD: [u32; 3] = [1, 2, 4];

/// One decode module.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DecodeModule {
    /// The query's, the caches' and the output's.
    pub dtype: DType,
    /// The page table's.
    pub index: IndexType,
    pub head_dim: u32,
}

impl DecodeModule {
    /// The merge kernel's entry.
    pub const MERGE: usize = 0;

    /// Elements a lane loads at once: 16 bytes, but at most 32 lanes a head.
    pub fn vec(&self) -> u32 {
        (16 / self.dtype.size() as u32).max(self.head_dim / 32)
    }

    /// The entry of the items' kernel taking `heads` query heads a thread, with RoPE or not.
    pub fn entry(&self, heads: u32, rope: bool) -> Option<usize> {
        let i = HEADS_PER_THREAD.iter().position(|&h| h == heads)?;
        Some(1 + 2 * i + rope as usize)
    }

    /// The entry of the items' kernel on tensor cores (no RoPE), after the others: in modules
    /// of f16 and bf16 for sm_80 on (mma.sync on 16-bit inputs, cp.async) — but bf16 at head_dim
    /// 256, whose three terms of each weight do not fit the registers the output leaves (ptxas
    /// spills at sm_80 and sm_90a, even with two of them waiting in shared memory).
    pub fn tensor_core_entry(&self, arch: CudaArch) -> Option<usize> {
        let ampere = CudaArch { major: 8, minor: 0 };
        let fits = !(self.dtype == DType::Bf16 && self.head_dim > 128);
        (self.dtype.size() == 2 && arch >= ampere && fits).then_some(1 + 2 * HEADS_PER_THREAD.len())
    }

    /// The module's spec for `arch`: the merge, then [`DecodeModule::entry`]'s order, then
    /// [`DecodeModule::tensor_core_entry`].
    pub fn spec(&self, arch: CudaArch, debug: bool) -> JitSpec {
        let base = format!("decode_{}_{}_d{}", self.dtype.name(), self.index.name(), self.head_dim);
        let element = element_type(self.dtype);
        let merge = EntrySpec {
            name: format!("ferrinfer_{base}_merge"),
            kernel: "decode::merge_items".into(),
            params: "decode::DecodeParams".into(),
            generics: vec![element.into()],
            max_registers: None,
            stores: None,
        };
        let items = HEADS_PER_THREAD.into_iter().flat_map(|heads| {
            [false, true].map(|rope| EntrySpec {
                name: format!("ferrinfer_{base}_h{heads}{}", if rope { "_rope" } else { "" }),
                kernel: "decode::decode_items".into(),
                params: "decode::DecodeParams".into(),
                generics: vec![
                    element.into(),
                    self.index.name().into(),
                    self.head_dim.to_string(),
                    self.vec().to_string(),
                    heads.to_string(),
                    rope.to_string(),
                ],
                max_registers: None,
                stores: None,
            })
        });
        let tensor_cores = self.tensor_core_entry(arch).map(|_| EntrySpec {
            name: format!("ferrinfer_{base}_mma"),
            kernel: "decode::decode_items_mma".into(),
            params: "decode::DecodeParams".into(),
            generics: vec![
                element.into(),
                self.index.name().into(),
                self.head_dim.to_string(),
                mma_row_passes(self.head_dim).to_string(),
                (self.head_dim / 8).to_string(),
            ],
            max_registers: None,
            stores: None,
        });
        let entry_points = [merge].into_iter().chain(items).chain(tensor_cores).collect();
        FAMILY.spec(base, arch, debug, entry_points)
    }
}

/// Every module the decode family declares: each dtype × index type × head size.
pub fn declared_specs(arch: CudaArch, debug: bool) -> Vec<JitSpec> {
    let modules = DType::ALL.into_iter().flat_map(|dtype| {
        IndexType::ALL
            .into_iter()
            .flat_map(move |index| HEAD_DIMS.map(|head_dim| DecodeModule { dtype, index, head_dim }))
    });
    modules.map(|module| module.spec(arch, debug)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_module_has_the_merge_then_an_entry_per_heads_with_and_without_rope() {
        let module = DecodeModule { dtype: DType::Bf16, index: IndexType::I32, head_dim: 128 };
        let spec = module.spec(CudaArch::HOPPER, false);
        assert_eq!(spec.name, "decode_bf16_i32_d128");
        assert_eq!(spec.entry_points[DecodeModule::MERGE].name, "ferrinfer_decode_bf16_i32_d128_merge");
        let entry = &spec.entry_points[module.entry(4, true).unwrap()];
        assert_eq!(entry.name, "ferrinfer_decode_bf16_i32_d128_h4_rope");
        assert_eq!(entry.generics, ["element::Bf16", "i32", "128", "8", "4", "true"]);
        assert_eq!(module.entry(3, false), None);
        assert_eq!(spec.entry_points.len(), 8);
        assert_eq!(
            spec.entry_points[module.tensor_core_entry(CudaArch::HOPPER).unwrap()].name,
            "ferrinfer_decode_bf16_i32_d128_mma"
        );
        let f32_module = DecodeModule { dtype: DType::F32, index: IndexType::I32, head_dim: 128 };
        assert_eq!(
            (
                f32_module.tensor_core_entry(CudaArch::HOPPER),
                f32_module.spec(CudaArch::HOPPER, false).entry_points.len()
            ),
            (None, 7)
        );
        let turing = CudaArch { major: 7, minor: 5 };
        assert_eq!((module.tensor_core_entry(turing), module.spec(turing, false).entry_points.len()), (None, 7));
        let wide =
            |dtype| DecodeModule { dtype, index: IndexType::I32, head_dim: 256 }.tensor_core_entry(CudaArch::HOPPER);
        assert_eq!((wide(DType::Bf16), wide(DType::F16).is_some()), (None, true), "bf16's three terms at 256");
        assert_eq!(
            DecodeModule { dtype: DType::F32, index: IndexType::I64, head_dim: 256 }.vec(),
            8,
            "32 lanes at most"
        );
        assert_eq!(declared_specs(CudaArch::HOPPER, false).len(), 18);
    }
}
