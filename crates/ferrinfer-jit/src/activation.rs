//! The activation family at layer 3: [`ActivationModule::spec`] (FlashInfer's
//! `gen_act_and_mul_module`) describes one module per activation and dtype, with one entry point
//! per vector width (the launcher picks [`ActivationModule::entry`]).

use ferrinfer_kernels::element::DType;

use crate::spec::{EntrySpec, JitSpec, element_type, vector_widths};
use crate::{CudaArch, Family};

/// The activation family: its kernel file and every module it declares (for AOT).
pub const FAMILY: Family = Family { name: "activation", sources: &["activation.rs"], specs: declared_specs };

/// The gated activations (`Activation` types of `ferrinfer-kernels`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ActivationKernel {
    Silu,
    Gelu,
    GeluTanh,
}

impl ActivationKernel {
    pub const ALL: [ActivationKernel; 3] = [ActivationKernel::Silu, ActivationKernel::Gelu, ActivationKernel::GeluTanh];

    /// FlashInfer's name of the op (`silu_and_mul`, …).
    pub fn name(self) -> &'static str {
        match self {
            ActivationKernel::Silu => "silu_and_mul",
            ActivationKernel::Gelu => "gelu_and_mul",
            ActivationKernel::GeluTanh => "gelu_tanh_and_mul",
        }
    }

    fn kind(self) -> &'static str {
        match self {
            ActivationKernel::Silu => "activation::Silu",
            ActivationKernel::Gelu => "activation::Gelu",
            ActivationKernel::GeluTanh => "activation::GeluTanh",
        }
    }
}

/// One activation module: an activation for a dtype, every vector width.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ActivationModule {
    pub kernel: ActivationKernel,
    pub dtype: DType,
}

impl ActivationModule {
    /// The entry index of vector width `vec` (elements), if the dtype has it.
    pub fn entry(&self, vec: u32) -> Option<usize> {
        vector_widths(self.dtype).position(|v| v == vec)
    }

    /// The module's spec for `arch`.
    pub fn spec(&self, arch: CudaArch, debug: bool) -> JitSpec {
        let base = format!("{}_{}", self.kernel.name(), self.dtype.name());
        let entry_points = vector_widths(self.dtype)
            .map(|vec| EntrySpec {
                name: format!("ferrinfer_{base}_v{vec}"),
                kernel: "activation::act_and_mul_rows".into(),
                params: "activation::ActivationParams".into(),
                generics: vec![self.kernel.kind().into(), element_type(self.dtype).into(), vec.to_string()],
                max_registers: None,
                stores: None,
            })
            .collect();
        FAMILY.spec(format!("activation_{base}"), arch, debug, entry_points)
    }
}

/// Every module the activation family declares: each activation × dtype.
pub fn declared_specs(arch: CudaArch, debug: bool) -> Vec<JitSpec> {
    ActivationKernel::ALL
        .into_iter()
        .flat_map(|kernel| DType::ALL.map(|dtype| ActivationModule { kernel, dtype }.spec(arch, debug)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_module_has_an_entry_per_vector_width() {
        let module = ActivationModule { kernel: ActivationKernel::Silu, dtype: DType::Bf16 };
        let spec = module.spec(CudaArch::HOPPER, false);
        assert_eq!(spec.name, "activation_silu_and_mul_bf16");
        let v8 = &spec.entry_points[module.entry(8).unwrap()];
        assert_eq!(v8.name, "ferrinfer_silu_and_mul_bf16_v8");
        assert_eq!(v8.generics, ["activation::Silu", "element::Bf16", "8"]);
        assert_eq!(ActivationModule { kernel: ActivationKernel::Gelu, dtype: DType::F32 }.entry(8), None);
        assert_eq!(declared_specs(CudaArch::HOPPER, false).len(), 9);
    }
}
