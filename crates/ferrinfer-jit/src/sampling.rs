//! The sampling family at layer 3: [`SamplingModule::spec`] describes one module per op and
//! logits dtype, with one entry point per vector width (the launcher picks
//! [`SamplingModule::entry`]): `softmax`, `top_k_mask_logits`, `top_k_renorm_probs`,
//! `top_p_renorm_probs` and the sampling ops (`sampling_from_probs`, `top_k_…`, `top_p_…`,
//! `min_p_sampling_from_probs`, `top_k_top_p_sampling_from_probs` and `…_from_logits`).

use ferrinfer_kernels::element::DType;

use crate::spec::{EntrySpec, JitSpec, element_type, vector_widths};
use crate::{CudaArch, Family};

/// The sampling family: its kernel file and every module it declares (for AOT).
pub const FAMILY: Family = Family { name: "sampling", sources: &["sampling/"], specs: declared_specs };

/// The sampling kernels, one per op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SamplingKernel {
    Softmax,
    TopKMaskLogits,
    TopKRenormProbs,
    TopPRenormProbs,
    SamplingFromProbs,
    TopKSamplingFromProbs,
    TopPSamplingFromProbs,
    MinPSamplingFromProbs,
    TopKTopPSamplingFromProbs,
    TopKTopPSamplingFromLogits,
}

impl SamplingKernel {
    pub const ALL: [SamplingKernel; 10] = [
        SamplingKernel::Softmax,
        SamplingKernel::TopKMaskLogits,
        SamplingKernel::TopKRenormProbs,
        SamplingKernel::TopPRenormProbs,
        SamplingKernel::SamplingFromProbs,
        SamplingKernel::TopKSamplingFromProbs,
        SamplingKernel::TopPSamplingFromProbs,
        SamplingKernel::MinPSamplingFromProbs,
        SamplingKernel::TopKTopPSamplingFromProbs,
        SamplingKernel::TopKTopPSamplingFromLogits,
    ];

    /// FlashInfer's name of the op.
    pub fn name(self) -> &'static str {
        match self {
            SamplingKernel::Softmax => "softmax",
            SamplingKernel::TopKMaskLogits => "top_k_mask_logits",
            SamplingKernel::TopKRenormProbs => "top_k_renorm_probs",
            SamplingKernel::TopPRenormProbs => "top_p_renorm_probs",
            SamplingKernel::SamplingFromProbs => "sampling_from_probs",
            SamplingKernel::TopKSamplingFromProbs => "top_k_sampling_from_probs",
            SamplingKernel::TopPSamplingFromProbs => "top_p_sampling_from_probs",
            SamplingKernel::MinPSamplingFromProbs => "min_p_sampling_from_probs",
            SamplingKernel::TopKTopPSamplingFromProbs => "top_k_top_p_sampling_from_probs",
            SamplingKernel::TopKTopPSamplingFromLogits => "top_k_top_p_sampling_from_logits",
        }
    }

    /// The generic kernel and its parameter type in `ferrinfer-kernels`.
    fn kernel(self) -> (&'static str, &'static str) {
        match self {
            SamplingKernel::Softmax => ("sampling::softmax_rows", "sampling::SoftmaxParams"),
            SamplingKernel::TopKMaskLogits => ("sampling::top_k_mask_rows", "sampling::FilterParams"),
            SamplingKernel::TopKRenormProbs => ("sampling::top_k_renorm_rows", "sampling::FilterParams"),
            SamplingKernel::TopPRenormProbs => ("sampling::top_p_renorm_rows", "sampling::FilterParams"),
            SamplingKernel::SamplingFromProbs => ("sampling::sample_rows", "sampling::SampleParams"),
            SamplingKernel::TopKSamplingFromProbs => ("sampling::top_k_sample_rows", "sampling::SampleParams"),
            SamplingKernel::TopPSamplingFromProbs => ("sampling::top_p_sample_rows", "sampling::SampleParams"),
            SamplingKernel::MinPSamplingFromProbs => ("sampling::min_p_sample_rows", "sampling::SampleParams"),
            SamplingKernel::TopKTopPSamplingFromProbs => {
                ("sampling::top_k_top_p_sample_rows", "sampling::SampleParams")
            }
            SamplingKernel::TopKTopPSamplingFromLogits => {
                ("sampling::top_k_top_p_logits_sample_rows", "sampling::SampleParams")
            }
        }
    }

    /// The register cap of an entry of the kernel for `dtype`, so that enough 256-thread blocks
    /// share a multiprocessor (docs/perf/sampling.md, top-k v2): the filters take 80 (three
    /// blocks, as many as a staged f32 slice of a 128k vocabulary, ~71 KB of shared memory,
    /// allows; uncapped, top-p took 86: two), the mask of 16-bit logits 64 (four: its slices
    /// are half the size, and it holds no sum). The ops that weigh a row as they read it
    /// (`sampling_from_probs`, min-p) 80 too (three blocks; they stage nothing; uncapped up to
    /// 108, at 72 it spilled) — but 88 before sm_90, where ptxas spilled 40 bytes of their f32
    /// and f16 entries at 80; top-p's rejection rounds hold a round's state across a weighing:
    /// 96 (uncapped 89–96), 112 before sm_90 (at 96 its f32 entries spilled 8–16 bytes there,
    /// at 104 8 bytes; up to 128 still two blocks of 256);
    /// from sm_90 its f32 entries load twice the steps at once, 128 (still two blocks of 256;
    /// uncapped up to 150; before sm_90 they spilled 80 bytes at 128). The staged sampling
    /// kernels (top-k, and top-k then top-p's rounds) 128, two blocks of 256: under 80 top-k's
    /// entries spilled (88 bytes); uncapped they took 93–122 (top-k) and 118–154 (with top-p:
    /// the one-entry vectors of f32), at 128 none spills.
    fn max_registers(self, dtype: DType, arch: CudaArch) -> Option<u32> {
        match self {
            SamplingKernel::Softmax => None,
            SamplingKernel::TopKSamplingFromProbs
            | SamplingKernel::TopKTopPSamplingFromProbs
            | SamplingKernel::TopKTopPSamplingFromLogits => Some(128),
            SamplingKernel::TopPSamplingFromProbs if arch < (CudaArch { major: 9, minor: 0 }) => Some(112),
            SamplingKernel::TopPSamplingFromProbs if dtype.size() == 4 => Some(128),
            SamplingKernel::TopPSamplingFromProbs => Some(96),
            SamplingKernel::SamplingFromProbs | SamplingKernel::MinPSamplingFromProbs
                if arch < (CudaArch { major: 9, minor: 0 }) =>
            {
                Some(88)
            }
            SamplingKernel::SamplingFromProbs | SamplingKernel::MinPSamplingFromProbs => Some(80),
            SamplingKernel::TopKMaskLogits if dtype.size() == 2 => Some(64),
            SamplingKernel::TopKMaskLogits | SamplingKernel::TopKRenormProbs | SamplingKernel::TopPRenormProbs => {
                Some(80)
            }
        }
    }

    /// The dtype the kernel stores, where it is not the input's: softmax's probabilities are
    /// f32, the sampling ops' tokens i32.
    fn stores(self) -> Option<String> {
        match self {
            SamplingKernel::Softmax => Some("f32".into()),
            SamplingKernel::TopKMaskLogits | SamplingKernel::TopKRenormProbs | SamplingKernel::TopPRenormProbs => None,
            _ => Some("i32".into()),
        }
    }
}

/// One sampling module: an op for an input dtype, every vector width.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SamplingModule {
    pub kernel: SamplingKernel,
    pub dtype: DType,
}

impl SamplingModule {
    /// The entry index of vector width `vec` (elements), if the dtype has it.
    pub fn entry(&self, vec: u32) -> Option<usize> {
        vector_widths(self.dtype).position(|v| v == vec)
    }

    /// The module's spec for `arch`.
    pub fn spec(&self, arch: CudaArch, debug: bool) -> JitSpec {
        let base = format!("{}_{}", self.kernel.name(), self.dtype.name());
        let (kernel, params) = self.kernel.kernel();
        let entry_points = vector_widths(self.dtype)
            .map(|vec| EntrySpec {
                name: format!("ferrinfer_{base}_v{vec}"),
                kernel: kernel.into(),
                params: params.into(),
                generics: vec![element_type(self.dtype).into(), vec.to_string()],
                max_registers: self.kernel.max_registers(self.dtype, arch),
                stores: self.kernel.stores(),
            })
            .collect();
        FAMILY.spec(format!("sampling_{base}"), arch, debug, entry_points)
    }
}

/// Every module the sampling family declares: each op × input dtype.
pub fn declared_specs(arch: CudaArch, debug: bool) -> Vec<JitSpec> {
    SamplingKernel::ALL
        .into_iter()
        .flat_map(|kernel| DType::ALL.map(|dtype| SamplingModule { kernel, dtype }.spec(arch, debug)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_module_has_an_entry_per_vector_width() {
        let module = SamplingModule { kernel: SamplingKernel::Softmax, dtype: DType::Bf16 };
        let spec = module.spec(CudaArch::HOPPER, false);
        assert_eq!(spec.name, "sampling_softmax_bf16");
        let v8 = &spec.entry_points[module.entry(8).unwrap()];
        assert_eq!(v8.name, "ferrinfer_softmax_bf16_v8");
        assert_eq!(v8.generics, ["element::Bf16", "8"]);
        assert_eq!(SamplingModule { kernel: SamplingKernel::Softmax, dtype: DType::F32 }.entry(8), None);
        assert_eq!(declared_specs(CudaArch::HOPPER, false).len(), 30, "10 ops × f16, bf16, f32");
        let top_k =
            SamplingModule { kernel: SamplingKernel::TopKMaskLogits, dtype: DType::F16 }.spec(CudaArch::HOPPER, false);
        assert_eq!(top_k.entry_points[0].kernel, "sampling::top_k_mask_rows");
        assert_eq!(top_k.entry_points[0].stores, None, "the input's dtype");
    }
}
