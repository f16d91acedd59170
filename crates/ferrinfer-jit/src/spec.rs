//! `JitSpec`: what one module contains and how it is compiled — FlashInfer's `JitSpec`, as data.
//! Stored as `spec.toml` beside each cache entry; part of the entry's key.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use ferrinfer_kernels::element::DType;

use crate::CudaArch;

/// One PTX module: a set of entry points of one family, for one arch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JitSpec {
    /// Unique module name, e.g. `norm_rmsnorm_bf16`; also names the generated crate.
    pub name: String,
    /// The op family (`norm`): one file of that name in every layer.
    pub family: String,
    pub arch: CudaArch,
    /// Keep line info (for compute-sanitizer, cuda-gdb); optimisation stays on.
    pub debug: bool,
    /// Files of `ferrinfer-kernels/src` the entry points' code comes from (besides the core
    /// files every spec depends on): an edit elsewhere leaves this spec's key unchanged.
    pub sources: Vec<String>,
    /// Compile-time constants the kernels are specialised on, by name (e.g. `HIDDEN`).
    pub constants: BTreeMap<String, u64>,
    /// rustc flags beyond the builder's fixed ones.
    pub flags: Vec<String>,
    pub entry_points: Vec<EntrySpec>,
}

/// One `extern "ptx-kernel"` function: a generic kernel instantiated with concrete arguments.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EntrySpec {
    /// The stable exported name, e.g. `ferrinfer_rmsnorm_bf16_v8_c4`. The launcher addresses entry
    /// points by their index in [`JitSpec::entry_points`], which each family defines.
    pub name: String,
    /// Path of the generic kernel in `ferrinfer_kernels`, e.g. `norm::norm_regs`.
    pub kernel: String,
    /// Its by-value parameter struct, e.g. `norm::NormParams`.
    pub params: String,
    /// Generic arguments, in order, e.g. `["element::Bf16", "8"]`.
    pub generics: Vec<String>,
    /// Register cap (PTX `.maxnreg`) the builder puts on the entry; without one ptxas spends up
    /// to 255 registers on hoisting loads, and occupancy falls. ptxas checks it causes no spill.
    pub max_registers: Option<u32>,
    /// The element type it stores, where that is not its first generic argument (softmax reads
    /// bf16 logits, stores f32 probabilities): what the SASS guard's conversion rule checks.
    /// Absent from the TOML when `None`, so the other specs' keys do not change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stores: Option<String>,
}

/// Hashes the identifying fields only (equal specs still compare in full): an in-process cache
/// lookup then costs a short string hash, not a walk over every entry point.
impl std::hash::Hash for JitSpec {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (&self.name, self.arch, self.debug).hash(state);
    }
}

impl JitSpec {
    /// The canonical TOML form (what `spec.toml` holds and the key hashes).
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a JitSpec always serialises")
    }

    pub fn from_toml(text: &str) -> Result<Self, toml::de::Error> {
        toml::from_str(text)
    }
}

/// The kernels crate's type for a dtype, as a path relative to `ferrinfer_kernels` (`i32` is
/// Rust's: no kernel computes in it).
pub fn element_type(dtype: DType) -> &'static str {
    match dtype {
        DType::F16 => "element::F16",
        DType::Bf16 => "element::Bf16",
        DType::F32 => "f32",
        DType::I32 => "i32",
        DType::I64 => "i64",
    }
}

/// The integer type of a module's index arrays (positions, segment bounds, page tables:
/// FlashInfer's int32, or int64).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IndexType {
    I32,
    I64,
}

impl IndexType {
    pub const ALL: [IndexType; 2] = [IndexType::I32, IndexType::I64];

    /// Its Rust name (the kernels' type parameter, and module names').
    pub fn name(self) -> &'static str {
        match self {
            IndexType::I32 => "i32",
            IndexType::I64 => "i64",
        }
    }
}

/// Vector widths from 16 bytes down to one element.
pub fn vector_widths(dtype: DType) -> impl Iterator<Item = u32> {
    let widest = 16 / dtype.size() as u32;
    (0..=widest.trailing_zeros()).map(move |shift| widest >> shift)
}
