//! The norm family at layer 3: [`NormModule::spec`] (FlashInfer's `gen_norm_module`) describes one
//! module per kernel (rmsnorm, Gemma's, the fused adds, layernorm), dtype, weight dtype and vector
//! width, holding register-resident kernels per chunk count ([`CHUNK_COUNTS`]), each plain and
//! pipelined (the next row loaded during the current one's reduction), a streaming kernel (rows of
//! any length) and, on sm_90 with 16-byte vectors, staged kernels per [`STAGED_CHUNK_COUNTS`]
//! (rows copied ahead into shared memory); with vectors of 2 bytes (4 for the fused ops: rows off
//! 16-byte boundaries), peeled register kernels per [`PEELED_CHUNK_COUNTS`] instead (rows read in
//! 16-byte vectors past a per-row head). Small modules keep a cold JIT build short; the launcher picks the
//! entry by [`NormModule::register_entry`] / [`NormModule::STREAM_ENTRY`] /
//! [`NormModule::staged_entry`] / [`NormModule::peeled_entry`].

use ferrinfer_kernels::element::DType;
use ferrinfer_kernels::norm::NARROW_VECTOR_BYTES;

use crate::spec::{EntrySpec, JitSpec, element_type, vector_widths};
use crate::{CudaArch, Family};

/// The norm family: its kernel file and every module it declares (for AOT).
pub const FAMILY: Family = Family { name: "norm", sources: &["norm.rs"], specs: declared_specs };

/// Register chunk counts compiled: each thread holds up to 8 vectors of its row (128 bytes).
pub const CHUNK_COUNTS: [u32; 4] = [1, 2, 4, 8];

/// Chunk counts of the staged kernels (sm_90): the rows they take are long (many rows, each
/// row's threads a warp or more), where a few vectors per thread suffice.
pub const STAGED_CHUNK_COUNTS: [u32; 2] = [2, 4];

/// Chunk counts of the peeled register kernels (16-byte vectors, up to 4 a thread: the weights
/// of rmsnorm's 16-bit rows, 64 bytes, stay in registers across rows — layernorm's γ and β, or f32
/// weights, are gathered again per row — and rows to 16384 2-byte elements fit 512 threads).
/// Each plain and pipelined.
pub const PEELED_CHUNK_COUNTS: [u32; 2] = [2, 4];

/// Widest vector, in bytes, of a module with peeled kernels: rows of 2-byte vectors lose most to
/// their narrow accesses (4096 × 4095 bf16 rmsnorm on an H200, 25.9 µs read narrow, 20.9 peeled;
/// fused 50.8 → 37.6)…
const PEELED_MAX_VECTOR_BYTES: usize = 2;
/// …and the fused ops' rows of 4-byte vectors too (4096 × 4094 bf16 38.4 → 37.6 µs, f32 4096 ×
/// 4095 79.9 → 65.4), not rmsnorm's or layernorm's (bf16 4096 × 4094 rmsnorm 19.1 → 20.8;
/// docs/perf/norm.md v12).
const PEELED_MAX_FUSED_VECTOR_BYTES: usize = 4;

/// Register cap of rmsnorm's pipelined 8-chunk entries at vectors under 8 bytes, whose chunks
/// are predicated (crates/ferrinfer-kernels/src/norm.rs, `Columns::predicated`), on sm_90: ptxas
/// gave them 72 registers uncapped, one 512-thread block an SM instead of two (4096 × 4095 bf16
/// on an H200: 43.6 µs; capped, no spills, 29.8: docs/perf/norm.md v11). sm_80 and sm_89 spill
/// under it (f16, 4-byte vectors: 8 bytes), so there ptxas's own count stands (not measured).
const NARROW_RMS_C8P_REGISTERS: u32 = 64;

/// Register cap of rmsnorm's (and Gemma's) staged entries of 4 vectors a thread on sm_90: ptxas
/// gave the 16-bit ones 89 registers (f32's 71), two 256-thread blocks an SM (ncu: 25 %
/// occupancy at 4096 × 8192 bf16, where FlashInfer's rmsnorm runs 9 blocks of 128); at 80, no
/// spills, three. H200, bf16, µs: 16384 × 8192 134.2 → 132.1, 65536 × 8192 527.9 → 521.4, f16
/// 16384 × 8192 133.1 → 132.1; 1024 × 8192 5.87 → 6.12, a wave of blocks taking 3 rows where they
/// took 4 (the planner's rows a block follow the blocks an SM holds); elsewhere within 1 %
/// (docs/perf/norm.md v13).
const RMS_STAGED_C4_REGISTERS: u32 = 80;
/// Register cap of rmsnorm's (and Gemma's) unpipelined 8-chunk entries of 16-byte vectors on
/// sm_90: 125 uncapped in bf16/f16 (f32's 109), two 192-thread blocks an SM for a 12288-wide bf16
/// row; at 112, no spills (104 spilled f16's), three. H200, bf16: 4096 × 12288 55.0 → 54.5 µs,
/// 16384 × 12288 210.4 → 208.7; elsewhere within 0.5 % (docs/perf/norm.md v13). Not on 8-byte
/// vectors: ptxas, given 112, took 102 registers for entries it gives 72 uncapped.
const RMS_WIDE_C8_REGISTERS: u32 = 112;

/// The norm kernels (`NormKind` types of `ferrinfer-kernels`), one per op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NormKernel {
    Rms,
    GemmaRms,
    FusedAddRms,
    GemmaFusedAddRms,
    Layer,
}

impl NormKernel {
    pub const ALL: [NormKernel; 5] = [
        NormKernel::Rms,
        NormKernel::GemmaRms,
        NormKernel::FusedAddRms,
        NormKernel::GemmaFusedAddRms,
        NormKernel::Layer,
    ];

    /// FlashInfer's name of the op it computes.
    pub fn name(self) -> &'static str {
        match self {
            NormKernel::Rms => "rmsnorm",
            NormKernel::GemmaRms => "gemma_rmsnorm",
            NormKernel::FusedAddRms => "fused_add_rmsnorm",
            NormKernel::GemmaFusedAddRms => "gemma_fused_add_rmsnorm",
            NormKernel::Layer => "layernorm",
        }
    }

    /// The `NormKind` type, relative to `ferrinfer_kernels`.
    fn kind(self) -> &'static str {
        match self {
            NormKernel::Rms => "norm::Rms",
            NormKernel::GemmaRms => "norm::GemmaRms",
            NormKernel::FusedAddRms => "norm::FusedAddRms",
            NormKernel::GemmaFusedAddRms => "norm::GemmaFusedAddRms",
            NormKernel::Layer => "norm::Layer",
        }
    }

    /// Whether it reads and writes a residual (two row tensors in registers).
    pub fn is_fused(self) -> bool {
        matches!(self, NormKernel::FusedAddRms | NormKernel::GemmaFusedAddRms)
    }

    /// Weight dtypes it takes with `dtype` input: its own, and f32 for layernorm (none for an
    /// integer input, which no norm takes).
    pub fn weight_dtypes(self, dtype: DType) -> &'static [DType] {
        match (self, dtype) {
            (NormKernel::Layer, DType::F16) => &[DType::F16, DType::F32],
            (NormKernel::Layer, DType::Bf16) => &[DType::Bf16, DType::F32],
            (_, DType::F16) => &[DType::F16],
            (_, DType::Bf16) => &[DType::Bf16],
            (_, DType::F32) => &[DType::F32],
            (_, DType::I32 | DType::I64) => &[],
        }
    }
}

/// One norm module: a kernel for a dtype, a weight dtype and a vector width.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NormModule {
    pub kernel: NormKernel,
    pub dtype: DType,
    pub weight: DType,
    /// Elements per vector access.
    pub vec: u32,
}

impl NormModule {
    /// The streaming kernel's entry index (after the register kernels).
    pub const STREAM_ENTRY: usize = 2 * CHUNK_COUNTS.len();

    /// The entry index of the register kernel holding `chunks` vectors per thread, pipelined or
    /// not.
    pub fn register_entry(chunks: u32, pipelined: bool) -> Option<usize> {
        CHUNK_COUNTS.iter().position(|&c| c == chunks).map(|i| 2 * i + pipelined as usize)
    }

    /// The entry index of the staged kernel holding `chunks` vectors per thread; the module has
    /// it only where [`NormModule::has_staged`].
    pub fn staged_entry(chunks: u32) -> Option<usize> {
        STAGED_CHUNK_COUNTS.iter().position(|&c| c == chunks).map(|i| Self::STREAM_ENTRY + 1 + i)
    }

    /// The entry index of the peeled register kernel holding `chunks` 16-byte vectors per
    /// thread, pipelined or not; the module has it only where [`NormModule::has_peeled`] (never
    /// beside staged kernels, whose place after the streaming kernel it takes).
    pub fn peeled_entry(chunks: u32, pipelined: bool) -> Option<usize> {
        let index = PEELED_CHUNK_COUNTS.iter().position(|&c| c == chunks)?;
        Some(Self::STREAM_ENTRY + 1 + 2 * index + pipelined as usize)
    }

    /// Whether the module for `arch` has staged kernels: bulk copies need sm_90 and move rows
    /// whose addresses and lengths are multiples of 16 bytes (the vector).
    pub fn has_staged(&self, arch: CudaArch) -> bool {
        arch >= CudaArch::HOPPER && self.vector_bytes() == 16
    }

    /// Whether the module has peeled register kernels (16-byte vectors after a per-row head):
    /// for rows whose own vectors are narrow (see [`PEELED_MAX_VECTOR_BYTES`]).
    pub fn has_peeled(&self) -> bool {
        let widest = if self.kernel.is_fused() { PEELED_MAX_FUSED_VECTOR_BYTES } else { PEELED_MAX_VECTOR_BYTES };
        self.vector_bytes() <= widest
    }

    /// Elements of a peeled kernel's vector: 16 bytes.
    pub fn peeled_vec(&self) -> u32 {
        16 / self.dtype.size() as u32
    }

    fn vector_bytes(&self) -> usize {
        self.vec as usize * self.dtype.size()
    }

    /// The register cap on `arch` of the entry holding `chunks` vectors a thread, pipelined or
    /// not.
    fn register_cap(&self, arch: CudaArch, chunks: u32, pipelined: bool) -> Option<u32> {
        let vector_bytes = self.vector_bytes();
        match (self.capped_on(arch) && chunks == 8, pipelined) {
            (true, true) if vector_bytes < NARROW_VECTOR_BYTES => Some(NARROW_RMS_C8P_REGISTERS),
            (true, false) if vector_bytes == 16 => Some(RMS_WIDE_C8_REGISTERS),
            _ => None,
        }
    }

    /// The register cap on `arch` of the staged entry holding `chunks` vectors a thread (16-byte
    /// vectors: the only staged ones).
    fn staged_cap(&self, arch: CudaArch, chunks: u32) -> Option<u32> {
        (self.capped_on(arch) && chunks == 4).then_some(RMS_STAGED_C4_REGISTERS)
    }

    /// Whether some of the module's entries carry a register cap on `arch`: rmsnorm's and
    /// Gemma's on sm_90 and later, where the caps were measured.
    fn capped_on(&self, arch: CudaArch) -> bool {
        arch >= CudaArch::HOPPER && matches!(self.kernel, NormKernel::Rms | NormKernel::GemmaRms)
    }

    /// The module's spec for `arch`.
    pub fn spec(&self, arch: CudaArch, debug: bool) -> JitSpec {
        let weight_suffix = if self.weight == self.dtype { String::new() } else { format!("_w{}", self.weight.name()) };
        let base = format!("{}_{}{weight_suffix}_v{}", self.kernel.name(), self.dtype.name(), self.vec);
        let types = [element_type(self.dtype), element_type(self.weight), self.kernel.kind()].map(String::from);
        let register = CHUNK_COUNTS.into_iter().flat_map(|chunks| [false, true].map(|pipelined| (chunks, pipelined)));
        let register = register.map(|(chunks, pipelined)| EntrySpec {
            name: format!("ferrinfer_{base}_c{chunks}{}", if pipelined { "p" } else { "" }),
            kernel: "norm::norm_rows".into(),
            params: "norm::NormParams".into(),
            generics: [types.to_vec(), vec![self.vec.to_string(), chunks.to_string(), pipelined.to_string()]].concat(),
            max_registers: self.register_cap(arch, chunks, pipelined),
            stores: None,
        });
        let stream = EntrySpec {
            name: format!("ferrinfer_{base}_stream"),
            kernel: "norm::norm_stream".into(),
            params: "norm::NormParams".into(),
            generics: [types.to_vec(), vec![self.vec.to_string()]].concat(),
            max_registers: None,
            stores: None,
        };
        let staged = STAGED_CHUNK_COUNTS.into_iter().filter(|_| self.has_staged(arch)).map(|chunks| EntrySpec {
            name: format!("ferrinfer_{base}_s{chunks}"),
            kernel: "norm::norm_staged".into(),
            params: "norm::NormParams".into(),
            generics: [types.to_vec(), vec![self.vec.to_string(), chunks.to_string()]].concat(),
            max_registers: self.staged_cap(arch, chunks),
            stores: None,
        });
        let peeled = PEELED_CHUNK_COUNTS.into_iter().filter(|_| self.has_peeled());
        let peeled = peeled.flat_map(|chunks| [false, true].map(|pipelined| (chunks, pipelined)));
        let peeled = peeled.map(|(chunks, pipelined)| EntrySpec {
            name: format!("ferrinfer_{base}_c{chunks}{}_peeled", if pipelined { "p" } else { "" }),
            kernel: "norm::norm_rows_peeled".into(),
            params: "norm::NormParams".into(),
            generics: [types.to_vec(), vec![self.peeled_vec().to_string(), chunks.to_string(), pipelined.to_string()]]
                .concat(),
            max_registers: None,
            stores: None,
        });
        let entries = register.chain([stream]).chain(staged).chain(peeled).collect();
        FAMILY.spec(format!("norm_{base}"), arch, debug, entries)
    }
}

/// Every module the norm family declares: each kernel × dtype × weight dtype × vector width.
pub fn declared_specs(arch: CudaArch, debug: bool) -> Vec<JitSpec> {
    let mut specs = Vec::new();
    for kernel in NormKernel::ALL {
        for dtype in DType::ALL {
            for &weight in kernel.weight_dtypes(dtype) {
                for vec in vector_widths(dtype) {
                    specs.push(NormModule { kernel, dtype, weight, vec }.spec(arch, debug));
                }
            }
        }
    }
    specs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_module_holds_a_kernel_per_chunk_count_then_the_streaming_one() {
        let module = NormModule { kernel: NormKernel::Rms, dtype: DType::Bf16, weight: DType::Bf16, vec: 8 };
        let spec = module.spec(CudaArch::HOPPER, false);
        assert_eq!(spec.entry_points.len(), 2 * CHUNK_COUNTS.len() + 1 + STAGED_CHUNK_COUNTS.len());
        let c4 = &spec.entry_points[NormModule::register_entry(4, false).unwrap()];
        assert_eq!(c4.name, "ferrinfer_rmsnorm_bf16_v8_c4");
        assert_eq!(c4.generics, ["element::Bf16", "element::Bf16", "norm::Rms", "8", "4", "false"]);
        let c4p = &spec.entry_points[NormModule::register_entry(4, true).unwrap()];
        assert_eq!((c4p.name.as_str(), c4p.generics[5].as_str()), ("ferrinfer_rmsnorm_bf16_v8_c4p", "true"));
        assert_eq!(spec.entry_points[NormModule::STREAM_ENTRY].name, "ferrinfer_rmsnorm_bf16_v8_stream");
        assert_eq!(NormModule::register_entry(16, false), None);
        let s4 = &spec.entry_points[NormModule::staged_entry(4).unwrap()];
        assert_eq!((s4.name.as_str(), s4.kernel.as_str()), ("ferrinfer_rmsnorm_bf16_v8_s4", "norm::norm_staged"));
        assert_eq!(s4.generics, ["element::Bf16", "element::Bf16", "norm::Rms", "8", "4"]);
        let ampere = module.spec(CudaArch { major: 8, minor: 0 }, false);
        assert_eq!(ampere.entry_points.len(), NormModule::STREAM_ENTRY + 1, "bulk copies need sm_90");
        let narrow = NormModule { vec: 4, ..module }.spec(CudaArch::HOPPER, false);
        assert_eq!(narrow.entry_points.len(), NormModule::STREAM_ENTRY + 1, "8-byte vectors: not staged, not peeled");
        let f32_widths: Vec<u32> = vector_widths(DType::F32).collect();
        assert_eq!(f32_widths, [4, 2, 1]);
    }

    #[test]
    fn modules_of_narrow_vectors_hold_peeled_kernels_after_the_streaming_one() {
        for vec in [1, 2] {
            let module = NormModule { kernel: NormKernel::FusedAddRms, dtype: DType::F16, weight: DType::F16, vec };
            let spec = module.spec(CudaArch::HOPPER, false);
            assert_eq!(spec.entry_points.len(), NormModule::STREAM_ENTRY + 1 + 2 * PEELED_CHUNK_COUNTS.len());
            let c4p = &spec.entry_points[NormModule::peeled_entry(4, true).unwrap()];
            assert_eq!(c4p.name, format!("ferrinfer_fused_add_rmsnorm_f16_v{vec}_c4p_peeled"));
            assert_eq!(c4p.kernel, "norm::norm_rows_peeled");
            assert_eq!(c4p.generics, ["element::F16", "element::F16", "norm::FusedAddRms", "8", "4", "true"]);
            assert_eq!(spec.entry_points[NormModule::peeled_entry(2, false).unwrap()].generics[4], "2");
        }
        assert_eq!(NormModule::peeled_entry(8, false), None);
        // Staged and peeled kernels take the same places: a module never has both.
        for spec in declared_specs(CudaArch::HOPPER, false) {
            let peeled = spec.entry_points.iter().any(|e| e.kernel == "norm::norm_rows_peeled");
            let staged = spec.entry_points.iter().any(|e| e.kernel == "norm::norm_staged");
            assert!(!(peeled && staged), "{}", spec.name);
        }
        let f32_odd = NormModule { kernel: NormKernel::FusedAddRms, dtype: DType::F32, weight: DType::F32, vec: 1 };
        assert_eq!(f32_odd.spec(CudaArch::HOPPER, false).entry_points.last().unwrap().generics[3], "4");
        let rms = |dtype, vec| NormModule { kernel: NormKernel::Rms, dtype, weight: dtype, vec }.has_peeled();
        assert!(rms(DType::Bf16, 1) && !rms(DType::Bf16, 2) && !rms(DType::F32, 1), "rmsnorm: 2-byte vectors only");
    }

    #[test]
    fn layernorm_takes_f32_weights_with_half_inputs() {
        let specs = declared_specs(CudaArch::HOPPER, false);
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        assert!(names.contains(&"norm_layernorm_bf16_wf32_v8") && names.contains(&"norm_layernorm_f32_v4"));
        // 5 kernels × (4 + 4 + 3 widths), plus layernorm's f32 weights with f16/bf16 (4 + 4).
        assert_eq!(specs.len(), 5 * 11 + 8);
    }
}
