//! Layer 5 of ferrinfer: the kernels. Device entry points (`extern "ptx-kernel"`, compiled by
//! rustc's nvptx64 backend) and the per-element and per-row numerics they are built from.
//!
//! This crate is `#![no_std]` and has no dependencies at all: never `std`, never `alloc`, never a
//! host, CUDA or framework crate — not even optionally. Everything here takes raw pointers and
//! integers. The numerics (dtype conversions and rounding, reductions' combine steps, the op math)
//! are plain functions compiled for the host too, so the host's CPU backend uses the very same
//! code and the host's tests cover it. Parameter structs shared with the host are `#[repr(C)]`
//! and live here, so host and device can never disagree on their layout.
//!
//! Device-only code lives behind `cfg(target_arch = "nvptx64")`; it must be generic or
//! `#[inline]` (docs/device-code.md: non-inline functions of another crate stay unresolved in PTX) and
//! must contain no panicking path (a panic would be an unresolved `.extern .func`). This crate
//! declares no entry points: `ferrinfer-jit` generates a tiny crate per spec that instantiates the
//! generic kernels here as `extern "ptx-kernel"` functions with stable names.
#![no_std]
#![cfg_attr(target_arch = "nvptx64", feature(stdarch_nvptx, asm_experimental_arch, core_intrinsics))]
#![cfg_attr(target_arch = "nvptx64", allow(internal_features))]

pub mod activation;
pub mod cascade;
pub mod decode;
pub mod element;
pub mod math;
pub mod norm;
pub mod page;
pub mod random;
pub mod rope;
pub mod sampling;
pub mod vector;

#[cfg(target_arch = "nvptx64")]
pub mod device;
#[cfg(target_arch = "nvptx64")]
pub mod matrix;

/// Bytes at the start of a staging ring's dynamic shared memory (`device::StagingRing`) that
/// hold its stages' mbarriers, 8 bytes each, keeping the slots after them 16-byte aligned. Here,
/// not in the device-only module, because the launcher sizes the ring with it.
pub const STAGING_HEADER_BYTES: u32 = 128;

/// Most stages a staging ring has: one mbarrier each in [`STAGING_HEADER_BYTES`].
pub const MAX_STAGING_STAGES: u32 = STAGING_HEADER_BYTES / 8;

/// Most blocks of a thread-block cluster the kernels use (CUDA's portable cluster size): the
/// blocks sharing a softmax row (`sampling::SoftmaxParams::slices`).
pub const MAX_CLUSTER_BLOCKS: u32 = 8;

/// 32-bit words of a block's slot in a cluster exchange (`device::ClusterExchange`): a pair of
/// f32.
pub const CLUSTER_SLOT_WORDS: u32 = 2;

/// Dynamic shared memory a cluster exchange needs (`device::ClusterExchange`): two sets of one
/// slot per block. Here, not in the device-only module, because the launcher sizes the launch
/// with it.
pub const CLUSTER_EXCHANGE_BYTES: u32 = 2 * MAX_CLUSTER_BLOCKS * CLUSTER_SLOT_WORDS * 4;

/// Bins of a cluster histogram (`device::ClusterHistogram`): one per value of a byte.
pub const HISTOGRAM_BINS: u32 = 256;

/// Dynamic shared memory a cluster histogram needs: the block's own u64 bins and two sets of the
/// cluster's sums, used alternately (as a cluster exchange's slots).
pub const CLUSTER_HISTOGRAM_BYTES: u32 = 3 * HISTOGRAM_BINS * 8;

/// This crate's source files, `(path under src/, contents)` (see `build.rs`), for the host:
/// `ferrinfer-jit` hashes them into its cache keys and compiles them for the device.
#[cfg(not(target_arch = "nvptx64"))]
pub static SOURCES: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/kernel_sources.rs"));

#[cfg(target_arch = "nvptx64")]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // Unreachable by construction (no kernel has a panicking path; the builder rejects PTX with
    // unresolved functions), but a no_std crate built on its own needs a handler.
    unsafe { core::arch::nvptx::trap() }
}
