//! Element types and their conversions to and from f32, bit-exact with IEEE round-to-nearest-even.
//!
//! The kernels accumulate in f32 whatever the storage type. `Bf16` and `F16` are bare bit
//! patterns (`#[repr(transparent)]` over `u16`), layout-compatible with `half::bf16`/`half::f16`
//! on the host, so host buffers can be reinterpreted without copying.

/// The dtypes of tensors: the floating-point storage types the kernels are instantiated for
/// ([`DType::ALL`]), and `I32` for the integer tensors some ops take beside them (a `top_k` a
/// row), which the kernels read but never compute in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F16,
    Bf16,
    F32,
    I32,
    /// Per-row seeds and offsets of the sampling ops (their bits as u64).
    I64,
}

impl DType {
    /// The floating-point element types, each a kernel instantiation.
    pub const ALL: [DType; 3] = [DType::F16, DType::Bf16, DType::F32];

    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DType::F16 | DType::Bf16 => 2,
            DType::F32 | DType::I32 => 4,
            DType::I64 => 8,
        }
    }

    /// The short name used in entry-point names, specs and CLIs.
    pub const fn name(self) -> &'static str {
        match self {
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
            DType::F32 => "f32",
            DType::I32 => "i32",
            DType::I64 => "i64",
        }
    }

    /// One of [`DType::ALL`]: a type kernels compute in.
    pub const fn is_float(self) -> bool {
        !matches!(self, DType::I32 | DType::I64)
    }
}

/// A storage type the kernels read and write; arithmetic happens in f32.
pub trait Element: Copy + 'static {
    const DTYPE: DType;
    fn to_f32(self) -> f32;
    fn from_f32(value: f32) -> Self;
    /// The bit pattern, zero-extended.
    fn to_bits(self) -> u32;
    /// From the low `8 · size` bits.
    fn from_bits(bits: u32) -> Self;
    /// The f32 value of the low (`high` false) or high half of a word packing two 16-bit
    /// elements (see `vector::Packed`).
    #[inline(always)]
    fn half_to_f32(word: u32, high: bool) -> f32 {
        Self::from_bits(half_of(word, high as usize)).to_f32()
    }
    /// Two values rounded to this (16-bit) type and packed into one word, `low` in the low half:
    /// on the GPU one `cvt.rn.{bf16x2,f16x2}.f32` (sm_80+) for the pair.
    #[inline(always)]
    fn pack_pair(low: f32, high: f32) -> u32 {
        (Self::from_f32(low).to_bits() & 0xffff) | (Self::from_f32(high).to_bits() << 16)
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

/// bfloat16 as its bit pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(transparent)]
pub struct Bf16(pub u16);

/// IEEE binary16 as its bit pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(transparent)]
pub struct F16(pub u16);

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    #[inline(always)]
    fn to_bits(self) -> u32 {
        f32::to_bits(self)
    }
    #[inline(always)]
    fn from_bits(bits: u32) -> Self {
        f32::from_bits(bits)
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline(always)]
    fn from_f32(value: f32) -> Self {
        value
    }
}

impl Element for Bf16 {
    const DTYPE: DType = DType::Bf16;
    #[inline(always)]
    fn to_bits(self) -> u32 {
        self.0 as u32
    }
    #[inline(always)]
    fn from_bits(bits: u32) -> Self {
        Bf16(bits as u16)
    }
    /// A bf16 is the top half of its f32: mask or shift the packed word, never unpack it.
    #[inline(always)]
    fn half_to_f32(word: u32, high: bool) -> f32 {
        #[cfg(target_arch = "nvptx64")]
        return hardware::bf16_half_to_f32(word, high);
        #[cfg(not(target_arch = "nvptx64"))]
        return f32::from_bits(if high { word & 0xffff_0000 } else { word << 16 });
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        #[cfg(target_arch = "nvptx64")]
        return hardware::bf16_to_f32(self.0);
        #[cfg(not(target_arch = "nvptx64"))]
        return f32::from_bits((self.0 as u32) << 16);
    }
    #[inline(always)]
    fn from_f32(value: f32) -> Self {
        #[cfg(all(target_arch = "nvptx64", target_feature = "sm_80"))]
        return Bf16(hardware::f32_to_bf16(value));
        #[cfg(not(all(target_arch = "nvptx64", target_feature = "sm_80")))]
        return Bf16(f32_to_bf16_bits(value));
    }
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_80"))]
    #[inline(always)]
    fn pack_pair(low: f32, high: f32) -> u32 {
        hardware::pack_bf16x2(low, high)
    }
}

impl Element for F16 {
    const DTYPE: DType = DType::F16;
    #[inline(always)]
    fn to_bits(self) -> u32 {
        self.0 as u32
    }
    #[inline(always)]
    fn from_bits(bits: u32) -> Self {
        F16(bits as u16)
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        #[cfg(target_arch = "nvptx64")]
        return hardware::f16_to_f32(self.0);
        #[cfg(not(target_arch = "nvptx64"))]
        return f16_bits_to_f32(self.0);
    }
    #[inline(always)]
    fn from_f32(value: f32) -> Self {
        #[cfg(target_arch = "nvptx64")]
        return F16(hardware::f32_to_f16(value));
        #[cfg(not(target_arch = "nvptx64"))]
        return F16(f32_to_f16_bits(value));
    }
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_80"))]
    #[inline(always)]
    fn pack_pair(low: f32, high: f32) -> u32 {
        hardware::pack_f16x2(low, high)
    }
}

/// The GPU's own f16 conversions (`cvt`), IEEE round-to-nearest-even like the software versions
/// below — which the host tests exhaustively against `half` and the GPU tests against the host —
/// and bf16 widening as one opaque shift.
/// Unrolled over 64 elements, the branchy software conversion needed 255 registers and spilled.
/// Not `pure`: LLVM would then reuse each conversion from the sum for the output and keep every
/// f32 of the row live across the reduction (255 registers again); re-converting costs one `cvt`.
#[cfg(target_arch = "nvptx64")]
mod hardware {
    use core::arch::asm;

    #[inline(always)]
    pub fn f16_to_f32(half: u16) -> f32 {
        let value: f32;
        unsafe { asm!("cvt.f32.f16 {v}, {h};", v = out(reg32) value, h = in(reg16) half, options(nomem, nostack)) };
        value
    }

    /// The same mask or shift as on the host, hidden from LLVM for the reason above.
    #[inline(always)]
    pub fn bf16_half_to_f32(word: u32, high: bool) -> f32 {
        let value: f32;
        unsafe {
            if high {
                asm!("and.b32 {v}, {w}, 0xffff0000;", v = out(reg32) value, w = in(reg32) word, options(nomem, nostack));
            } else {
                asm!("shl.b32 {v}, {w}, 16;", v = out(reg32) value, w = in(reg32) word, options(nomem, nostack));
            }
        }
        value
    }

    /// The same shift as on the host, hidden from LLVM for the reason above.
    #[inline(always)]
    pub fn bf16_to_f32(bits: u16) -> f32 {
        let value: f32;
        let wide = bits as u32;
        unsafe { asm!("shl.b32 {v}, {b}, 16;", v = out(reg32) value, b = in(reg32) wide, options(nomem, nostack)) };
        value
    }

    /// `cvt.rn.bf16.f32` exists from sm_80; older targets keep the software rounding.
    #[cfg(target_feature = "sm_80")]
    #[inline(always)]
    pub fn f32_to_bf16(value: f32) -> u16 {
        let bits: u16;
        unsafe { asm!("cvt.rn.bf16.f32 {h}, {v};", h = out(reg16) bits, v = in(reg32) value, options(nomem, nostack)) };
        bits
    }

    /// Both halves rounded by one instruction (`d.hi = cvt(a)`, `d.lo = cvt(b)`).
    #[cfg(target_feature = "sm_80")]
    #[inline(always)]
    pub fn pack_bf16x2(low: f32, high: f32) -> u32 {
        let word: u32;
        unsafe {
            asm!("cvt.rn.bf16x2.f32 {w}, {h}, {l};", w = out(reg32) word, h = in(reg32) high, l = in(reg32) low, options(nomem, nostack))
        };
        word
    }

    #[cfg(target_feature = "sm_80")]
    #[inline(always)]
    pub fn pack_f16x2(low: f32, high: f32) -> u32 {
        let word: u32;
        unsafe {
            asm!("cvt.rn.f16x2.f32 {w}, {h}, {l};", w = out(reg32) word, h = in(reg32) high, l = in(reg32) low, options(nomem, nostack))
        };
        word
    }

    #[inline(always)]
    pub fn f32_to_f16(value: f32) -> u16 {
        let half: u16;
        unsafe { asm!("cvt.rn.f16.f32 {h}, {v};", h = out(reg16) half, v = in(reg32) value, options(nomem, nostack)) };
        half
    }
}

/// f32 → bf16, round to nearest, ties to even; NaN stays a (quiet) NaN.
#[inline(always)]
pub fn f32_to_bf16_bits(value: f32) -> u16 {
    let bits = value.to_bits();
    if value.is_nan() {
        return ((bits >> 16) | 0x0040) as u16;
    }
    let round_bias = 0x7fff + ((bits >> 16) & 1);
    (bits.wrapping_add(round_bias) >> 16) as u16
}

/// f16 → f32, exact (subnormals, infinities and NaN payloads included).
#[inline(always)]
pub fn f16_bits_to_f32(half: u16) -> f32 {
    let sign = ((half as u32) & 0x8000) << 16;
    let exponent = ((half >> 10) & 0x1f) as u32;
    let mantissa = (half & 0x03ff) as u32;
    let bits = match exponent {
        0 if mantissa == 0 => sign,
        // Subnormal: magnitude = mantissa · 2^-24, exact in f32.
        0 => sign | (mantissa as f32 * TWO_POW_MINUS_24).to_bits(),
        0x1f => sign | 0x7f80_0000 | (mantissa << 13),
        _ => sign | ((exponent + 112) << 23) | (mantissa << 13),
    };
    f32::from_bits(bits)
}

const TWO_POW_MINUS_24: f32 = 1.0 / (1u32 << 24) as f32;

/// f32 → f16, round to nearest, ties to even; overflow gives ±inf, NaN stays a (quiet) NaN.
#[inline(always)]
pub fn f32_to_f16_bits(value: f32) -> u16 {
    let bits = value.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let abs = bits & 0x7fff_ffff;
    if abs >= 0x7f80_0000 {
        let nan = if abs > 0x7f80_0000 { 0x0200 | ((abs >> 13) & 0x03ff) as u16 } else { 0 };
        return sign | 0x7c00 | nan;
    }
    // |value| ≥ 65520 rounds to infinity.
    if abs >= 0x477f_f000 {
        return sign | 0x7c00;
    }
    // Normal range of f16: |value| ≥ 2^-14.
    if abs >= 0x3880_0000 {
        let rebiased = abs - (112 << 23);
        let round_bias = 0x0fff + ((rebiased >> 13) & 1);
        return sign | ((rebiased + round_bias) >> 13) as u16;
    }
    // Subnormal or zero: shift the full significand into place, rounding half to even.
    let exponent = abs >> 23;
    if exponent < 102 {
        return sign; // below half the smallest subnormal: rounds to ±0
    }
    let significand = (abs & 0x007f_ffff) | 0x0080_0000;
    let shift = 126 - exponent; // 14..=24
    let half_ulp = 1u32 << (shift - 1);
    let truncated = significand >> shift;
    let remainder = significand & ((1u32 << shift) - 1);
    let round_up = remainder > half_ulp || (remainder == half_ulp && truncated & 1 == 1);
    sign | (truncated + round_up as u32) as u16
}

// Host-only: on nvptx64 the formatter machinery would be an unresolved function in the PTX.
#[cfg(not(target_arch = "nvptx64"))]
impl core::fmt::Display for DType {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// Runs `$body` with `$t` naming the kernels' element type for `$dtype` (a [`DType`]): the one
/// dtype dispatch of host code that instantiates kernel numerics (the CPU backends). `$dtype`
/// must be a float type ([`DType::is_float`]): the launch layer refuses any other tensor dtype
/// where an op computes (`OpInfo::call`) before a family dispatches.
#[macro_export]
macro_rules! with_element {
    ($dtype:expr, $t:ident => $body:expr) => {
        match $dtype {
            $crate::element::DType::I32 | $crate::element::DType::I64 => {
                unreachable!("integer tensors are refused before any dispatch")
            }
            $crate::element::DType::F16 => {
                type $t = $crate::element::F16;
                $body
            }
            $crate::element::DType::Bf16 => {
                type $t = $crate::element::Bf16;
                $body
            }
            $crate::element::DType::F32 => {
                type $t = f32;
                $body
            }
        }
    };
}
