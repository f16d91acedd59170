//! Vector loads and stores: `VEC` elements moved as one aligned access of `VEC · size_of::<T>()`
//! bytes (2, 4, 8 or 16), which the nvptx backend emits as a single `ld`/`st` (`.v4.u32` for 16).
//!
//! The caller guarantees the pointer is aligned to that many bytes; the launcher picks `VEC` so
//! that it is (see `ferrinfer-launch`).

use core::mem::size_of;

#[derive(Clone, Copy)]
#[repr(C, align(16))]
struct Bytes16([u32; 4]);

/// Reads `VEC` consecutive elements at `src` with one access.
///
/// # Safety
/// `src..src+VEC` must be readable and `src` aligned to `VEC · size_of::<T>()` bytes.
#[inline(always)]
pub unsafe fn load<T: Copy, const VEC: usize>(src: *const T) -> [T; VEC] {
    unsafe {
        match VEC * size_of::<T>() {
            16 => bitcast(src.cast::<Bytes16>().read()),
            8 => bitcast(src.cast::<u64>().read()),
            4 => bitcast(src.cast::<u32>().read()),
            2 => bitcast(src.cast::<u16>().read()),
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
            16 => dst.cast::<Bytes16>().write(bitcast(values)),
            8 => dst.cast::<u64>().write(bitcast(values)),
            4 => dst.cast::<u32>().write(bitcast(values)),
            2 => dst.cast::<u16>().write(bitcast(values)),
            _ => dst.cast::<[T; VEC]>().write(values),
        }
    }
}

/// Reinterprets equally sized plain-data values (the match arms above guarantee the sizes).
#[inline(always)]
unsafe fn bitcast<A: Copy, B: Copy>(a: A) -> B {
    unsafe { core::mem::transmute_copy(&a) }
}
