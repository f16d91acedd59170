//! Warp-level matrix instructions (sm_80+): asynchronous 16-byte copies into shared memory
//! (`cp.async`), 8 × 8 tiles of 16-bit elements from shared memory into the tensor cores' register
//! fragments (`ldmatrix`), and the 16 × 8 × 16 multiply-add (`mma.sync`) on f16 or bf16 with f32
//! accumulation. Fragment layouts are PTX's (ISA, "Matrix fragments for mma.m16n8k16"): with
//! `g = lane / 4` and `c = lane % 4`, an A fragment holds row `g` and `g + 8` at columns
//! `2c, 2c + 1` and `8 + 2c, 9 + 2c`; a B fragment column `g` at rows `2c, 2c + 1` and
//! `8 + 2c, 9 + 2c`; an accumulator rows `g` and `g + 8` at columns `2c, 2c + 1`.
//! Like every warp-level `asm!` here, none is `pure`/`nomem` (see [`crate::device`]).

use core::arch::asm;

use crate::element::{DType, Element};

/// Copies 16 bytes from global `src` to shared `dst` without waiting (both 16-byte aligned),
/// or, with `fill` false, writes 16 zero bytes there (`src` is then not read, but must be a
/// global address). Completes at [`wait_copies`] after [`commit_copies`].
///
/// # Safety
/// With `fill`, `src .. src + 16` readable global memory; `dst` inside the block's shared memory.
#[inline(always)]
pub unsafe fn copy_async_16(dst: u32, src: *const u8, fill: bool) {
    let bytes: u32 = if fill { 16 } else { 0 };
    unsafe {
        asm!(
            "{{ .reg .u64 g; cvta.to.global.u64 g, {src}; cp.async.cg.shared.global [{dst}], [g], 16, {n}; }}",
            dst = in(reg32) dst,
            src = in(reg64) src,
            n = in(reg32) bytes,
            options(nostack),
        )
    };
}

/// Closes the group of this thread's copies issued since the last commit.
#[inline(always)]
pub fn commit_copies() {
    unsafe { asm!("cp.async.commit_group;", options(nostack)) };
}

/// Waits until at most `PENDING` of this thread's committed copy groups are still in flight
/// (the oldest complete first). Other threads' copies need a barrier after.
#[inline(always)]
pub fn wait_copies<const PENDING: u32>() {
    unsafe { asm!("cp.async.wait_group {n};", n = const PENDING, options(nostack)) };
}

/// Four 8 × 8 tiles of 16-bit elements: lane `l` gives the address of row `l % 8` of tile
/// `l / 8` (16 contiguous bytes); register `i` holds tile `i`'s row `lane / 4`, columns
/// `2 (lane % 4)` and the next. `TRANSPOSED`: each tile transposed on the way (register `i`
/// holds tile `i`'s column `lane / 4`, rows `2 (lane % 4)` and the next).
#[inline(always)]
pub fn load_tiles<const TRANSPOSED: bool>(address: u32) -> [u32; 4] {
    let (r0, r1, r2, r3): (u32, u32, u32, u32);
    unsafe {
        if TRANSPOSED {
            asm!(
                "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {{{r0}, {r1}, {r2}, {r3}}}, [{a}];",
                r0 = out(reg32) r0, r1 = out(reg32) r1, r2 = out(reg32) r2, r3 = out(reg32) r3,
                a = in(reg32) address,
                options(nostack),
            )
        } else {
            asm!(
                "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{{r0}, {r1}, {r2}, {r3}}}, [{a}];",
                r0 = out(reg32) r0, r1 = out(reg32) r1, r2 = out(reg32) r2, r3 = out(reg32) r3,
                a = in(reg32) address,
                options(nostack),
            )
        }
    };
    [r0, r1, r2, r3]
}

/// `acc += a · b` for a 16 × 16 A fragment and a 16 × 8 B fragment of `T` (f16 or bf16; the
/// element type the tensor cores read), accumulated in f32.
#[inline(always)]
pub fn multiply_add<T: Element>(acc: &mut [f32; 4], a: [u32; 4], b: [u32; 2]) {
    let [mut d0, mut d1, mut d2, mut d3] = *acc;
    macro_rules! mma {
        ($ty:literal) => {
            unsafe {
                asm!(
                    concat!(
                        "mma.sync.aligned.m16n8k16.row.col.f32.", $ty, ".", $ty, ".f32 ",
                        "{{{d0}, {d1}, {d2}, {d3}}}, {{{a0}, {a1}, {a2}, {a3}}}, {{{b0}, {b1}}}, ",
                        "{{{d0}, {d1}, {d2}, {d3}}};"
                    ),
                    d0 = inout(reg32) d0, d1 = inout(reg32) d1, d2 = inout(reg32) d2, d3 = inout(reg32) d3,
                    a0 = in(reg32) a[0], a1 = in(reg32) a[1], a2 = in(reg32) a[2], a3 = in(reg32) a[3],
                    b0 = in(reg32) b[0], b1 = in(reg32) b[1],
                    options(nostack),
                )
            }
        };
    }
    match T::DTYPE {
        DType::Bf16 => mma!("bf16"),
        _ => mma!("f16"),
    }
    *acc = [d0, d1, d2, d3];
}

/// The shared-memory address of element `column` (a multiple of 8) of `row` in a tile of rows
/// of `row_bytes` (a multiple of 128) starting at `base`, its 16-byte chunks swizzled by the
/// row (chunk `c` stored at `c ^ (row % 8)`): the eight rows an `ldmatrix` tile or a warp's
/// copies touch then fall in distinct banks.
#[inline(always)]
pub fn swizzled(base: u32, row_bytes: u32, row: u32, column: u32) -> u32 {
    let chunk = column / 8;
    base + row * row_bytes + ((chunk ^ (row % 8)) * 16)
}
