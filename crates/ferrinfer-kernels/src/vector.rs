//! Vector loads and stores: `VEC` elements moved as aligned accesses of `VEC · size_of::<T>()`
//! bytes (2, 4, 8 or 16 in one instruction; 32 — eight f32 weights beside eight bf16 values — in
//! two), kept packed in 32-bit words ([`Packed`]) until an element is used.
//!
//! On the GPU every access is an explicit `ld.global`/`st.global` (LLVM emits generic `ld`/`st`
//! for pointers it cannot place; the tensors are always global memory), with the cache behaviour
//! the data deserves ([`Load`], [`Store`]). The caller guarantees the pointer is aligned to the
//! access; the launcher picks `VEC` so that it is (see `ferrinfer-launch`).

use core::marker::PhantomData;
use core::mem::size_of;

use crate::element::{Element, half_of};
use crate::math::choose;

/// How a load may be cached. On the host every kind is a plain read.
pub trait Load {
    /// The `BYTES` (2, 4, 8 or 16) bytes at `src` where `read`, else zeros with no access: one
    /// predicated instruction either way, never a branch (a row's last chunks, past its end).
    ///
    /// # Safety
    /// Where `read`: `src` readable and aligned to `BYTES`. The words beyond `BYTES` are 0.
    unsafe fn words_if<const BYTES: usize>(read: bool, src: *const u8) -> [u32; 4];

    /// The `BYTES` bytes at `src`, unguarded.
    ///
    /// # Safety
    /// As [`Load::words_if`] reading.
    unsafe fn words<const BYTES: usize>(src: *const u8) -> [u32; 4];
}

/// Data the kernel reads once and never writes (a row of the input): through the read-only
/// (non-coherent) path, not kept in L1 — nor found in L2 by a later call reading the same data
/// again (ncu, H200: docs/perf/activation.md v3), so activation calls that fit in L2 read their
/// input as `Reused` instead.
pub struct Once;
/// Read-only data many threads read again (weights): through the read-only path, cached in L1.
pub struct Reused;
/// Data this kernel also writes (a state merged in place): a plain coherent load. (With
/// `.L1::no_allocate` it was 1.1 % slower at fused_add_rmsnorm 65536 × 4096 and no faster
/// anywhere: docs/perf/norm.md v7; norm's in-place rows are now [`Lingering`].)
pub struct Coherent;
/// Data staged in the block's shared memory: the "pointer" is a shared-memory address (as
/// `StagingRing::slot` gives it), read with `ld.shared` (and, as a [`Store`], written with
/// `st.shared`). Device code only: on the host, where
/// there is no shared memory, it is an ordinary read.
pub struct Shared;

/// Data this kernel comes back to soon — reads again (a streamed row's statistics pass, then
/// its output pass) or writes back in place (a fused add's rows): a coherent load whose lines
/// L2 keeps first (`evict_last`), so the second access finds them there (docs/perf/norm.md).
pub struct Lingering;
/// The second and last read of [`Lingering`] data: coherent, its lines L2 drops first
/// (`evict_first`).
pub struct LastRead;

/// The PTX that creates an L2 eviction-priority policy (`evict_last`, `evict_first`) in `p`, and
/// the operand that hands it to a `.L2::cache_hint` access. (Created in an asm of its own, LLVM
/// computed it once, but ptxas rebuilt the constant before each access all the same.)
#[cfg(target_arch = "nvptx64")]
macro_rules! l2_policy {
    (setup $priority:literal) => {
        concat!(".reg .b64 p; createpolicy.fractional.L2::", $priority, ".b64 p, 1.0; ")
    };
    (operand $priority:literal) => {
        ", p"
    };
}

/// The PTX guarding an access with `{r}` (a 32-bit operand, nonzero to access): a predicate and
/// the access's prefix.
#[cfg(target_arch = "nvptx64")]
macro_rules! guard {
    (setup $flag:expr) => {
        ".reg .pred q; setp.ne.u32 q, {r}, 0; "
    };
    (prefix $flag:expr) => {
        "@q "
    };
}

/// One load (`$shape`: the vector and its registers, `$dir` their operand direction), under
/// `[$read]` if given, with the kind's state space and policy.
#[cfg(target_arch = "nvptx64")]
macro_rules! load_access {
    ([$($read:expr)?], $src:expr, $to_space:literal, $prefix:literal, [$($priority:literal)?], $shape:literal, $($words:tt)*) => {
        core::arch::asm!(
            concat!(
                "{{ .reg .u64 g; ", $(guard!(setup $read),)? $(l2_policy!(setup $priority),)? $to_space, " g, {a}; ",
                $(guard!(prefix $read),)? $prefix, $shape, " [g]", $(l2_policy!(operand $priority),)? "; }}"
            ),
            $(r = in(reg32) $read as u32,)?
            a = in(reg64) $src,
            $($words)*
            options(pure, readonly, nostack),
        )
    };
}

/// Every width of load for `words` (`$dir` `out`) or `words_if` (`inout`: the zeros it holds
/// where the guard skips the access). A 2-byte load fills a 32-bit register (zero-extended), as
/// PTX allows.
#[cfg(target_arch = "nvptx64")]
macro_rules! load_widths {
    ($bytes:expr, [$($read:expr)?], $src:expr, $to_space:literal, $prefix:literal, [$($priority:literal)?], $dir:ident) => {{
        let (mut w0, mut w1, mut w2, mut w3) = (0u32, 0u32, 0u32, 0u32);
        match $bytes {
            16 => load_access!([$($read)?], $src, $to_space, $prefix, [$($priority)?], ".v4.u32 {{{w0}, {w1}, {w2}, {w3}}},",
                w0 = $dir(reg32) w0, w1 = $dir(reg32) w1, w2 = $dir(reg32) w2, w3 = $dir(reg32) w3,),
            8 => load_access!([$($read)?], $src, $to_space, $prefix, [$($priority)?], ".v2.u32 {{{w0}, {w1}}},",
                w0 = $dir(reg32) w0, w1 = $dir(reg32) w1,),
            4 => load_access!([$($read)?], $src, $to_space, $prefix, [$($priority)?], ".u32 {w0},", w0 = $dir(reg32) w0,),
            _ => load_access!([$($read)?], $src, $to_space, $prefix, [$($priority)?], ".u16 {w0},", w0 = $dir(reg32) w0,),
        }
        [w0, w1, w2, w3]
    }};
}

/// One store (`$shape`: the vector and its registers), under `[$write]` if given.
#[cfg(target_arch = "nvptx64")]
macro_rules! store_access {
    ([$($write:expr)?], $dst:expr, $to_space:literal, $prefix:literal, $shape:literal, $($words:tt)*) => {
        core::arch::asm!(
            concat!("{{ .reg .u64 g; ", $(guard!(setup $write),)? $to_space, " g, {a}; ", $(guard!(prefix $write),)? $prefix, $shape, "; }}"),
            $(r = in(reg32) $write as u32,)?
            a = in(reg64) $dst,
            $($words)*
            options(nostack),
        )
    };
}

/// Every width of store, under `[$write]` if given. A 2-byte store writes the low half of a
/// 32-bit register, as PTX allows.
#[cfg(target_arch = "nvptx64")]
macro_rules! store_widths {
    ($bytes:expr, [$($write:expr)?], $dst:expr, $w:expr, $to_space:literal, $prefix:literal) => {{
        let w: [u32; 4] = $w;
        match $bytes {
            16 => store_access!([$($write)?], $dst, $to_space, $prefix, ".v4.u32 [g], {{{w0}, {w1}, {w2}, {w3}}}",
                w0 = in(reg32) w[0], w1 = in(reg32) w[1], w2 = in(reg32) w[2], w3 = in(reg32) w[3],),
            8 => store_access!([$($write)?], $dst, $to_space, $prefix, ".v2.u32 [g], {{{w0}, {w1}}}",
                w0 = in(reg32) w[0], w1 = in(reg32) w[1],),
            4 => store_access!([$($write)?], $dst, $to_space, $prefix, ".u32 [g], {w0}", w0 = in(reg32) w[0],),
            _ => store_access!([$($write)?], $dst, $to_space, $prefix, ".u16 [g], {w0}", w0 = in(reg32) w[0],),
        }
    }};
}

/// `impl Load` for a kind: `$to_space` turns the pointer into the access's state space (global
/// when left out), `$prefix` is the load instruction (`ld.global.nc`, …), and `policy
/// "evict_last"` adds an L2 policy.
macro_rules! load_kind {
    ($kind:ty, $prefix:literal $(, policy $priority:literal)?) => {
        load_kind!($kind, "cvta.to.global.u64", $prefix $(, policy $priority)?);
    };
    ($kind:ty, $to_space:literal, $prefix:literal $(, policy $priority:literal)?) => {
        impl Load for $kind {
            #[inline(always)]
            unsafe fn words<const BYTES: usize>(src: *const u8) -> [u32; 4] {
                #[cfg(target_arch = "nvptx64")]
                unsafe { load_widths!(BYTES, [], src, $to_space, $prefix, [$($priority)?], out) }
                #[cfg(not(target_arch = "nvptx64"))]
                unsafe { host_words::<BYTES>(src) }
            }

            #[inline(always)]
            unsafe fn words_if<const BYTES: usize>(read: bool, src: *const u8) -> [u32; 4] {
                #[cfg(target_arch = "nvptx64")]
                unsafe { load_widths!(BYTES, [read], src, $to_space, $prefix, [$($priority)?], inout) }
                #[cfg(not(target_arch = "nvptx64"))]
                unsafe { if read { host_words::<BYTES>(src) } else { [0; 4] } }
            }
        }
    };
}

load_kind!(Once, "ld.global.nc.L1::no_allocate");
load_kind!(Reused, "ld.global.nc");
load_kind!(Coherent, "ld.global");
// L2 cache policies (`createpolicy`, `.L2::cache_hint`) need sm_80 and PTX ISA 7.4 (every
// module's ISA is at least that: crates/ferrinfer-jit/src/builder.rs). They were measured on sm_90
// only (docs/perf/norm.md), so sm_90 modules alone use them; elsewhere both kinds are
// plain coherent loads.
#[cfg(not(target_feature = "sm_90"))]
load_kind!(Lingering, "ld.global");
#[cfg(not(target_feature = "sm_90"))]
load_kind!(LastRead, "ld.global");
#[cfg(target_feature = "sm_90")]
load_kind!(Lingering, "ld.global.L2::cache_hint", policy "evict_last");
#[cfg(target_feature = "sm_90")]
load_kind!(LastRead, "ld.global.L2::cache_hint", policy "evict_first");
// A `readonly` read of a slot stays after the stage's wait (asm LLVM must assume writes memory).
load_kind!(Shared, "mov.b64", "ld.shared");

#[cfg(not(target_arch = "nvptx64"))]
#[inline(always)]
unsafe fn host_words<const BYTES: usize>(src: *const u8) -> [u32; 4] {
    let mut bytes = [0u8; 16];
    unsafe { core::ptr::copy_nonoverlapping(src, bytes.as_mut_ptr(), BYTES.min(16)) };
    let word = |i: usize| u32::from_le_bytes([bytes[4 * i], bytes[4 * i + 1], bytes[4 * i + 2], bytes[4 * i + 3]]);
    [word(0), word(1), word(2), word(3)]
}

/// How a store may be cached. On the host every kind is a plain write.
pub trait Store {
    /// Writes the first `BYTES` (2, 4, 8 or 16) bytes of `w` to `dst` with one access where
    /// `write`, else nothing: one predicated instruction, never a branch.
    ///
    /// # Safety
    /// Where `write`: `dst` writable and aligned to `BYTES`.
    unsafe fn words_if<const BYTES: usize>(write: bool, dst: *mut u8, w: [u32; 4]);

    /// Writes the first `BYTES` bytes of `w` to `dst`, unguarded.
    ///
    /// # Safety
    /// `dst` writable and aligned to `BYTES`.
    unsafe fn words<const BYTES: usize>(dst: *mut u8, w: [u32; 4]);
}

/// Output kept in the caches as usual (write-back): what a call that fits in L2 wants, where
/// the next kernel finds it.
pub struct Kept;
/// Output of a call larger than L2, which could not stay there anyway: `st.global.cs`, the
/// written lines first to be evicted rather than competing with the input for L2 (measured:
/// docs/perf/activation.md v2).
pub struct Evicted;

macro_rules! store_kind {
    ($kind:ty, $prefix:literal) => {
        store_kind!($kind, "cvta.to.global.u64", $prefix);
    };
    ($kind:ty, $to_space:literal, $prefix:literal) => {
        impl Store for $kind {
            #[inline(always)]
            unsafe fn words<const BYTES: usize>(dst: *mut u8, w: [u32; 4]) {
                #[cfg(target_arch = "nvptx64")]
                unsafe {
                    store_widths!(BYTES, [], dst, w, $to_space, $prefix)
                }
                #[cfg(not(target_arch = "nvptx64"))]
                unsafe {
                    host_store::<BYTES>(dst, w)
                }
            }

            #[inline(always)]
            unsafe fn words_if<const BYTES: usize>(write: bool, dst: *mut u8, w: [u32; 4]) {
                #[cfg(target_arch = "nvptx64")]
                unsafe {
                    store_widths!(BYTES, [write], dst, w, $to_space, $prefix)
                }
                #[cfg(not(target_arch = "nvptx64"))]
                if write {
                    unsafe { host_store::<BYTES>(dst, w) }
                }
            }
        }
    };
}

#[cfg(not(target_arch = "nvptx64"))]
#[inline(always)]
unsafe fn host_store<const BYTES: usize>(dst: *mut u8, w: [u32; 4]) {
    let bytes = [w[0].to_le_bytes(), w[1].to_le_bytes(), w[2].to_le_bytes(), w[3].to_le_bytes()];
    unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<u8>(), dst, BYTES.min(16)) };
}

store_kind!(Kept, "st.global");
store_kind!(Evicted, "st.global.cs");
store_kind!(Shared, "mov.b64", "st.shared");

/// `VEC` elements of `T` (at most 32 bytes) kept as packed 32-bit words and unpacked only where
/// an element is used. A kernel holding a row in registers as `[T; VEC]` arrays of 16-bit values
/// got each value its own 32-bit register (the f16 kernels spilled at 144 registers); packed,
/// the row costs what it weighs.
#[derive(Clone, Copy)]
pub struct Packed<T, const VEC: usize> {
    words: [u32; 8],
    _element: PhantomData<T>,
}

impl<T: Element, const VEC: usize> Packed<T, VEC> {
    pub const ZERO: Self = Packed { words: [0; 8], _element: PhantomData };
    const BYTES: usize = VEC * size_of::<T>();

    /// Reads `VEC` elements at `src`: one access up to 16 bytes, two for 32.
    ///
    /// # Safety
    /// `src..src+VEC` readable, `src` aligned to `min(VEC · size_of::<T>(), 16)` bytes.
    #[inline(always)]
    pub unsafe fn load<K: Load>(src: *const T) -> Self {
        unsafe { Self::load_if::<K>(true, src) }
    }

    /// [`Packed::load`] where `read`, else zeros with no access (predicated: no branch).
    ///
    /// # Safety
    /// As [`Packed::load`] where `read`.
    #[inline(always)]
    pub unsafe fn load_if<K: Load>(read: bool, src: *const T) -> Self {
        let src = src.cast::<u8>();
        let (low, high) = unsafe {
            match Self::BYTES {
                32 => (K::words_if::<16>(read, src), K::words_if::<16>(read, src.add(16))),
                16 => (K::words_if::<16>(read, src), [0; 4]),
                8 => (K::words_if::<8>(read, src), [0; 4]),
                4 => (K::words_if::<4>(read, src), [0; 4]),
                _ => (K::words_if::<2>(read, src), [0; 4]),
            }
        };
        let words = [low[0], low[1], low[2], low[3], high[0], high[1], high[2], high[3]];
        Packed { words, _element: PhantomData }
    }

    /// Reads `VEC` elements at `src` an element at a time: for a vector off its alignment (a
    /// peeled row's weights), at `VEC` accesses' cost.
    ///
    /// # Safety
    /// `src..src+VEC` readable, `src` aligned to `size_of::<T>()`.
    #[inline(always)]
    pub unsafe fn gather<K: Load>(src: *const T) -> Self {
        let mut words = [0u32; 8];
        for i in 0..VEC {
            let bits = unsafe { Packed::<T, 1>::load::<K>(src.add(i)) }.words[0];
            match size_of::<T>() {
                4 => words[i & 7] = bits,
                _ => words[(i / 2) & 7] |= bits << (16 * (i % 2)),
            }
        }
        Packed { words, _element: PhantomData }
    }

    /// Writes the `VEC` elements at `dst`, cached as `S` says.
    ///
    /// # Safety
    /// As [`Packed::load`], writable.
    #[inline(always)]
    pub unsafe fn store<S: Store>(&self, dst: *mut T) {
        unsafe { self.store_if::<S>(true, dst) }
    }

    /// [`Packed::store`] where `write`, else nothing (predicated: no branch).
    ///
    /// # Safety
    /// As [`Packed::store`] where `write`.
    #[inline(always)]
    pub unsafe fn store_if<S: Store>(&self, write: bool, dst: *mut T) {
        let w = self.words;
        let dst = dst.cast::<u8>();
        unsafe {
            match Self::BYTES {
                32 => {
                    S::words_if::<16>(write, dst, [w[0], w[1], w[2], w[3]]);
                    S::words_if::<16>(write, dst.add(16), [w[4], w[5], w[6], w[7]]);
                }
                16 => S::words_if::<16>(write, dst, [w[0], w[1], w[2], w[3]]),
                8 => S::words_if::<8>(write, dst, [w[0], w[1], 0, 0]),
                4 => S::words_if::<4>(write, dst, [w[0], 0, 0, 0]),
                _ => S::words_if::<2>(write, dst, [w[0], 0, 0, 0]),
            }
        }
    }

    /// Every word holding elements through `f` (for bit-level transforms of packed elements:
    /// `f` sees one f32, or two 16-bit elements, a word).
    #[inline(always)]
    pub fn map_words(mut self, f: impl Fn(u32) -> u32) -> Self {
        for word in self.words.iter_mut().take(Self::BYTES.div_ceil(4)) {
            *word = f(*word);
        }
        self
    }

    /// 0 — computed from every word of every vector of `batch`, so ptxas cannot know it.
    /// XORed into what a batch's arithmetic first reads, it makes ptxas issue all of the
    /// batch's loads before that arithmetic: left to itself it may issue each load right
    /// before its own vector's arithmetic, one in flight at a time (docs/device-code.md,
    /// Memory). Costs a max and a compare-and-select a word, and the XOR.
    #[inline(always)]
    pub fn batch_zero<const N: usize>(batch: &[Self; N]) -> u32 {
        let mut top = 0f32;
        for vector in batch {
            for &word in vector.words.iter().take(Self::BYTES.div_ceil(4)) {
                top = top.max(f32::from_bits(word));
            }
        }
        // `top` is at least 0 (a maximum from 0 that ignores NaN): always 0.0's bits.
        choose(top >= 0.0, 0.0, f32::NAN).to_bits()
    }

    /// Element `i` (< `VEC`; the `& 7` keeps the index provably in bounds, so no panic path).
    #[inline(always)]
    pub fn get(&self, i: usize) -> T {
        match size_of::<T>() {
            4 => T::from_bits(self.words[i & 7]),
            _ => T::from_bits(half_of(self.words[(i / 2) & 7], i % 2)),
        }
    }

    /// Element `i` as f32, converted straight from its word (no 16-bit unpacking for bf16).
    #[inline(always)]
    pub fn get_f32(&self, i: usize) -> f32 {
        match size_of::<T>() {
            4 => self.get(i).to_f32(),
            _ => T::half_to_f32(self.words[(i / 2) & 7], i % 2 == 1),
        }
    }

    /// `VEC` values rounded to `T` and packed: 16-bit types a pair per conversion instruction.
    #[inline(always)]
    pub fn from_f32(values: [f32; VEC]) -> Self {
        let mut words = [0u32; 8];
        match (size_of::<T>(), VEC) {
            (4, _) => {
                for i in 0..VEC {
                    words[i & 7] = T::from_f32(values[i]).to_bits();
                }
            }
            (_, 1) => words[0] = T::from_f32(values[0]).to_bits() & 0xffff,
            _ => {
                for pair in 0..VEC / 2 {
                    words[pair & 7] = T::pack_pair(values[2 * pair], values[2 * pair + 1]);
                }
            }
        }
        Packed { words, _element: PhantomData }
    }

    /// All `VEC` elements as f32.
    #[inline(always)]
    pub fn to_f32(&self) -> [f32; VEC] {
        let mut values = [0.0; VEC];
        for (i, value) in values.iter_mut().enumerate() {
            *value = self.get_f32(i);
        }
        values
    }
}

/// An integer type of index arrays (positions, segment bounds, page tables): int32 or int64,
/// read through the read-only path, cached in L1 ([`Reused`]: every thread of a row reads its
/// row's).
pub trait Index {
    /// Element `i` of the `stride`-spaced values at `base`.
    ///
    /// # Safety
    /// `base` must hold that element.
    unsafe fn read(base: u64, i: u64, stride: u64) -> i64;
}

impl Index for i32 {
    #[inline(always)]
    unsafe fn read(base: u64, i: u64, stride: u64) -> i64 {
        let at = (base as *const f32).wrapping_add((i * stride) as usize);
        unsafe { Packed::<f32, 1>::load::<Reused>(at) }.get(0).to_bits() as i32 as i64
    }
}

impl Index for i64 {
    #[inline(always)]
    unsafe fn read(base: u64, i: u64, stride: u64) -> i64 {
        let at = (base as *const f32).wrapping_add(2 * (i * stride) as usize);
        let words = unsafe { Packed::<f32, 2>::load::<Reused>(at) };
        (words.get(0).to_bits() as u64 | (words.get(1).to_bits() as u64) << 32) as i64
    }
}
