//! Vector loads and stores: `VEC` elements moved as one aligned access of `VEC · size_of::<T>()`
//! bytes (2, 4, 8 or 16), which the nvptx backend emits as a single `ld`/`st` (`.v4.u32` for 16);
//! 32 bytes (8 f32 weights beside 8 bf16 values) as two 16-byte accesses.
//!
//! The caller guarantees the pointer is aligned to that many bytes; the launcher picks `VEC` so
//! that it is (see `ferrinfer-launch`).

use core::marker::PhantomData;
use core::mem::size_of;

use crate::element::Element;

#[derive(Clone, Copy)]
#[repr(C, align(16))]
struct Bytes16([u32; 4]);

/// One aligned access of 16, 8, 4 or 2 bytes. On the GPU an explicit `ld.global`/`st.global`
/// (LLVM emits generic `ld`/`st` for pointers it cannot place; the tensors are always global
/// memory); on the host a plain read or write.
trait Access: Copy {
    unsafe fn read_from(src: *const Self) -> Self;
    unsafe fn write_to(self, dst: *mut Self);
}

macro_rules! global_access {
    ($t:ty, $load:literal, $store:literal, ($($r:ident),+), $class:ident, |$v:ident| $split:expr, |$($p:ident),+| $join:expr) => {
        impl Access for $t {
            #[inline(always)]
            unsafe fn read_from(src: *const Self) -> Self {
                #[cfg(target_arch = "nvptx64")]
                {
                    $(let $r;)+
                    unsafe {
                        core::arch::asm!(
                            concat!("{{ .reg .u64 g; cvta.to.global.u64 g, {a}; ", $load, " }}"),
                            a = in(reg64) src, $($r = out($class) $r,)+ options(pure, readonly, nostack),
                        );
                    }
                    let ($($p,)+) = ($($r,)+);
                    $join
                }
                #[cfg(not(target_arch = "nvptx64"))]
                unsafe { src.read() }
            }

            #[inline(always)]
            unsafe fn write_to(self, dst: *mut Self) {
                #[cfg(target_arch = "nvptx64")]
                {
                    let $v = self;
                    let ($($r,)+) = $split;
                    unsafe {
                        core::arch::asm!(
                            concat!("{{ .reg .u64 g; cvta.to.global.u64 g, {a}; ", $store, " }}"),
                            a = in(reg64) dst, $($r = in($class) $r,)+ options(nostack),
                        );
                    }
                }
                #[cfg(not(target_arch = "nvptx64"))]
                unsafe { dst.write(self) }
            }
        }
    };
}

global_access!(
    Bytes16,
    "ld.global.v4.u32 {{{w0}, {w1}, {w2}, {w3}}}, [g];",
    "st.global.v4.u32 [g], {{{w0}, {w1}, {w2}, {w3}}};",
    (w0, w1, w2, w3),
    reg32,
    |v| (v.0[0], v.0[1], v.0[2], v.0[3]),
    |a, b, c, d| Bytes16([a, b, c, d])
);
global_access!(u64, "ld.global.u64 {w0}, [g];", "st.global.u64 [g], {w0};", (w0), reg64, |v| (v,), |a| a);
global_access!(u32, "ld.global.u32 {w0}, [g];", "st.global.u32 [g], {w0};", (w0), reg32, |v| (v,), |a| a);
global_access!(u16, "ld.global.u16 {w0}, [g];", "st.global.u16 [g], {w0};", (w0), reg16, |v| (v,), |a| a);

/// Reads `VEC` consecutive elements at `src` with one access.
///
/// # Safety
/// `src..src+VEC` must be readable and `src` aligned to `VEC · size_of::<T>()` bytes.
#[inline(always)]
pub unsafe fn load<T: Copy, const VEC: usize>(src: *const T) -> [T; VEC] {
    unsafe {
        match VEC * size_of::<T>() {
            32 => bitcast([Bytes16::read_from(src.cast()), Bytes16::read_from(src.cast::<Bytes16>().add(1))]),
            16 => bitcast(Bytes16::read_from(src.cast())),
            8 => bitcast(u64::read_from(src.cast())),
            4 => bitcast(u32::read_from(src.cast())),
            2 => bitcast(u16::read_from(src.cast())),
            _ => src.cast::<[T; VEC]>().read(),
        }
    }
}

/// Writes `VEC` consecutive elements at `dst` with one access.
///
/// # Safety
/// `dst..dst+VEC` must be writable and `dst` aligned to `VEC · size_of::<T>()` bytes.
#[inline(always)]
pub unsafe fn store<T: Copy, const VEC: usize>(dst: *mut T, values: [T; VEC]) {
    unsafe {
        match VEC * size_of::<T>() {
            32 => {
                let halves: [Bytes16; 2] = bitcast(values);
                halves[0].write_to(dst.cast());
                halves[1].write_to(dst.cast::<Bytes16>().add(1));
            }
            16 => Bytes16::write_to(bitcast(values), dst.cast()),
            8 => u64::write_to(bitcast(values), dst.cast()),
            4 => u32::write_to(bitcast(values), dst.cast()),
            2 => u16::write_to(bitcast(values), dst.cast()),
            _ => dst.cast::<[T; VEC]>().write(values),
        }
    }
}

/// Reinterprets equally sized plain-data values (the match arms above guarantee the sizes).
#[inline(always)]
unsafe fn bitcast<A: Copy, B: Copy>(a: A) -> B {
    unsafe { core::mem::transmute_copy(&a) }
}

/// `VEC` elements of `T` (at most 16 bytes) kept as packed 32-bit words and unpacked only where
/// an element is used. A kernel holding a row in registers as `[T; VEC]` arrays of 16-bit values
/// got each value its own 32-bit register (the f16 kernels spilled at 144 registers); packed,
/// the row costs what it weighs.
#[derive(Clone, Copy)]
pub struct Packed<T, const VEC: usize> {
    words: [u32; 4],
    _element: PhantomData<T>,
}

impl<T: Element, const VEC: usize> Packed<T, VEC> {
    pub const ZERO: Self = Packed { words: [0; 4], _element: PhantomData };

    /// Reads `VEC` elements with one access straight into words (through `[T; VEC]`, LLVM split
    /// the halves apart again).
    ///
    /// # Safety
    /// As [`load`].
    #[inline(always)]
    pub unsafe fn load(src: *const T) -> Self {
        let words = unsafe {
            match VEC * size_of::<T>() {
                16 => bitcast(Bytes16::read_from(src.cast())),
                8 => {
                    let pair = u64::read_from(src.cast());
                    [pair as u32, (pair >> 32) as u32, 0, 0]
                }
                4 => [u32::read_from(src.cast()), 0, 0, 0],
                _ => [u16::read_from(src.cast()) as u32, 0, 0, 0],
            }
        };
        Packed { words, _element: PhantomData }
    }

    /// Writes the `VEC` elements with one access.
    ///
    /// # Safety
    /// As [`store`].
    #[inline(always)]
    pub unsafe fn store(&self, dst: *mut T) {
        let w = self.words;
        unsafe {
            match VEC * size_of::<T>() {
                16 => Bytes16::write_to(bitcast(w), dst.cast()),
                8 => u64::write_to(w[0] as u64 | (w[1] as u64) << 32, dst.cast()),
                4 => u32::write_to(w[0], dst.cast()),
                _ => u16::write_to(w[0] as u16, dst.cast()),
            }
        }
    }

    /// Element `i` (< `VEC`; the `& 3` keeps the index provably in bounds, so no panic path).
    #[inline(always)]
    pub fn get(&self, i: usize) -> T {
        match size_of::<T>() {
            4 => T::from_bits(self.words[i & 3]),
            _ => T::from_bits(half_of(self.words[(i / 2) & 3], i % 2)),
        }
    }

    /// Element `i` as f32, converted straight from its word (no 16-bit unpacking for bf16).
    #[inline(always)]
    pub fn get_f32(&self, i: usize) -> f32 {
        match size_of::<T>() {
            4 => self.get(i).to_f32(),
            _ => T::half_to_f32(self.words[(i / 2) & 3], i % 2 == 1),
        }
    }

    #[inline(always)]
    pub fn set(&mut self, i: usize, value: T) {
        match size_of::<T>() {
            4 => self.words[i & 3] = value.to_bits(),
            _ => {
                let shift = 16 * (i % 2) as u32;
                let word = &mut self.words[(i / 2) & 3];
                *word = (*word & !(0xffff << shift)) | (value.to_bits() & 0xffff) << shift;
            }
        }
    }
}

/// The low (`which` = 0) or high half of `word`. On the GPU an opaque `mov` at the point of use:
/// visible to LLVM, the halves were split off right after the load and kept live separately.
#[inline(always)]
pub(crate) fn half_of(word: u32, which: usize) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let (low, high): (u16, u16);
        unsafe {
            core::arch::asm!("mov.b32 {{{l}, {h}}}, {w};", l = out(reg16) low, h = out(reg16) high, w = in(reg32) word, options(nomem, nostack));
        }
        if which == 0 { low as u32 } else { high as u32 }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        (word >> (16 * which as u32)) & 0xffff
    }
}
