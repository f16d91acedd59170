//! The norm family, accumulating in f32 whatever the storage type:
//! - rmsnorm: `y = x / √(mean(x²) + eps) · w` (Gemma's: `· (1 + w)`);
//! - fused add + rmsnorm: `residual += x`, then `x = rmsnorm(residual)` — both in place;
//! - layernorm: `y = (x − mean) / √(var + eps) · γ + β`.
//!
//! One parameter struct for every norm kernel, shared with the host; the per-row math of the
//! host's CPU backend ([`norm_row`], exact and portable); and two device kernels, generic over the
//! norm, the element and weight types and the vector width: [`norm_rows`] keeps rows in registers
//! (one pass over global memory; `CHUNKS` vectors per thread, `threads_per_row` threads per row,
//! the next row loaded while the current one is reduced; [`norm_rows_peeled`] the same for rows not
//! 16-byte aligned, read in 16-byte vectors past a per-row head), [`norm_staged`] (sm_90) has whole rows
//! copied ahead into shared memory by the copy engine, and [`norm_stream`] re-reads rows too long
//! for registers. The device code uses the GPU's arithmetic (FMA, reduction trees, `rsqrt.approx`,
//! packed conversions), so its results differ from the CPU backend's by rounding only.
//! Entry points are generated per spec by `ferrinfer-jit`.

use crate::element::Element;
use crate::math::rsqrt_exact;

/// Arguments of every norm kernel, passed by value. Pointers are device (or, for the CPU backend,
/// host) addresses, 0 where an op has no such tensor; strides and counts are in elements and
/// 64-bit, so no offset can overflow.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct NormParams {
    pub input: u64,
    /// Fused add: the residual, read and written in place.
    pub residual: u64,
    pub weight: u64,
    /// Layernorm: β.
    pub bias: u64,
    /// Fused add: the input itself (normalised in place).
    pub output: u64,
    pub rows: u64,
    pub input_row_stride: u64,
    pub residual_row_stride: u64,
    pub output_row_stride: u64,
    pub hidden: u32,
    pub eps: f32,
    /// `norm_rows`: threads per row, a power of two below 32 or whole warps ≤ 1024 (the block holds
    /// `blockDim / threads_per_row` rows at a time). `norm_stream`, `norm_staged`: `blockDim`.
    pub threads_per_row: u32,
    /// `norm_staged`: rows staged ahead in shared memory (1–16); unused elsewhere.
    pub stages: u32,
}

/// Which norm a kernel computes: a type parameter, so each compiles to its own code.
pub trait NormKind: 'static {
    /// `residual += input` first; the norm is of the new residual and overwrites `input`.
    const FUSED_ADD: bool;
    /// Centre on the mean and add a bias (layernorm); else scale by the root mean square.
    const CENTERED: bool;
    /// Gemma: scale by `1 + w` instead of `w`.
    const UNIT_OFFSET: bool;
}

macro_rules! norm_kinds {
    ($($(#[$doc:meta])* $kind:ident: fused $fused:literal, centered $centered:literal, unit_offset $offset:literal;)*) => {$(
        $(#[$doc])*
        pub struct $kind;
        impl NormKind for $kind {
            const FUSED_ADD: bool = $fused;
            const CENTERED: bool = $centered;
            const UNIT_OFFSET: bool = $offset;
        }
    )*};
}

norm_kinds! {
    /// rmsnorm.
    Rms: fused false, centered false, unit_offset false;
    /// Gemma's rmsnorm.
    GemmaRms: fused false, centered false, unit_offset true;
    /// Fused add + rmsnorm.
    FusedAddRms: fused true, centered false, unit_offset false;
    /// Gemma's fused add + rmsnorm.
    GemmaFusedAddRms: fused true, centered false, unit_offset true;
    /// layernorm.
    Layer: fused false, centered true, unit_offset false;
}

/// Vectors narrower than this many bytes (rows of an odd or 2-mod-4 width, or strides and
/// addresses that allow no wider) are *narrow*: the register kernels predicate their chunks past
/// a row's end (but layernorm's), the JIT caps rmsnorm's pipelined 8-chunk entries of them
/// (crates/ferrinfer-jit/src/norm.rs), and the launcher pipelines every op's rows of them
/// (crates/ferrinfer-launch/src/norm.rs).
pub const NARROW_VECTOR_BYTES: usize = 8;

/// How a row's values map to outputs: `y = (x − shift) · scale · w' (+ b)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowScale {
    pub shift: f32,
    pub scale: f32,
}

/// The input value a row's statistics are taken from: for a fused add, the new residual as
/// stored (rounded to T), so the output is exactly the norm of what the residual now holds.
#[inline(always)]
pub fn fused_sum<T: Element>(x: T, residual: T) -> T {
    T::from_f32(x.to_f32() + residual.to_f32())
}

/// The weight as applied: `w`, or Gemma's `1 + w`.
#[inline(always)]
fn applied_weight<K: NormKind>(w: f32) -> f32 {
    if K::UNIT_OFFSET { 1.0 + w } else { w }
}

/// Sum of `f(x)` over a row in eight partial sums (like a vectorised device thread), so long
/// rows lose less to rounding.
fn row_sum<T: Element>(row: *const T, hidden: usize, f: impl Fn(f32) -> f32) -> f32 {
    let mut partial = [0.0f32; 8];
    for i in 0..hidden {
        partial[i % 8] += f(unsafe { row.add(i).read() }.to_f32());
    }
    partial.iter().sum()
}

/// Pointer to element 0 of `row` of a tensor with the given row stride.
#[inline(always)]
fn row_ptr<T>(base: u64, row: u64, stride: u64) -> *mut T {
    (base as *mut T).wrapping_add((row * stride) as usize)
}

/// One row of any norm on the host (the CPU backend's inner loop).
///
/// # Safety
/// `params` must describe valid, writable memory as the launcher validates it: every row of
/// every tensor in bounds; `output` may be `input` (in place), nothing else may overlap.
pub unsafe fn norm_row<K: NormKind, T: Element, W: Element>(params: &NormParams, row: u64) {
    let p = params;
    let hidden = p.hidden as usize;
    let input = row_ptr::<T>(p.input, row, p.input_row_stride);
    // Fused add: the residual row becomes the row the statistics and outputs come from.
    let source = if K::FUSED_ADD {
        let residual = row_ptr::<T>(p.residual, row, p.residual_row_stride);
        for i in 0..hidden {
            unsafe { residual.add(i).write(fused_sum(input.add(i).read(), residual.add(i).read())) };
        }
        residual
    } else {
        input
    };
    let stats = if K::CENTERED {
        let mean = row_sum(source, hidden, |x| x) / hidden as f32;
        let variance = row_sum(source, hidden, |x| (x - mean) * (x - mean)) / hidden as f32;
        RowScale { shift: mean, scale: rsqrt_exact(variance + p.eps) }
    } else {
        RowScale { shift: 0.0, scale: rsqrt_exact(row_sum(source, hidden, |x| x * x) / hidden as f32 + p.eps) }
    };
    let (weight, bias) = (p.weight as *const W, p.bias as *const W);
    let output = row_ptr::<T>(p.output, row, p.output_row_stride);
    for i in 0..hidden {
        unsafe {
            let x = source.add(i).read().to_f32();
            let w = applied_weight::<K>(weight.add(i).read().to_f32());
            let y = if K::CENTERED {
                (x - stats.shift) * stats.scale * w + bias.add(i).read().to_f32()
            } else {
                x * stats.scale * w
            };
            output.add(i).write(T::from_f32(y));
        }
    }
}

#[cfg(all(target_arch = "nvptx64", target_feature = "sm_90"))]
pub use device_kernels::norm_staged;
#[cfg(target_arch = "nvptx64")]
pub use device_kernels::{norm_rows, norm_rows_peeled, norm_stream};

#[cfg(target_arch = "nvptx64")]
mod device_kernels {
    use super::*;
    use crate::device::{RowGroup, block_index, chain_after_prior_grids, grid_size, thread_index};
    #[cfg(target_feature = "sm_90")]
    use crate::device::{StagingRing, block_barrier};
    use crate::math::{mul_add, rsqrt};
    #[cfg(target_feature = "sm_90")]
    use crate::vector::Shared;
    use crate::vector::{Coherent, Kept, LastRead, Lingering, Load, Once, Packed, Reused, Store};

    /// Independent partial sums per thread: one FMA chain each, so the adds overlap.
    const ACCUMULATORS: usize = 8;

    /// The register-resident kernel. Each row belongs to a group of `threads_per_row` threads
    /// (sub-warp, a warp or several warps), each of which holds up to `CHUNKS` vectors of it:
    /// vector `c · threads_per_row + lane` for chunk `c`. Rows are read from global memory once;
    /// each group strides over rows (`gridDim · rows per block` apart); `PIPELINED` groups load
    /// their next row before they reduce the current one (twice the row's registers, for a group
    /// with several rows), others load a row when they get to it. A thread's weights (and β) stay in registers across rows
    /// when they take at most `RESIDENT_WEIGHT_BYTES`; more would cost occupancy (or spill), so
    /// they are read again per row, from L1, after the reduction.
    /// Launcher's guarantees: `threads_per_row` (a power of two below 32, else whole warps)
    /// dividing `blockDim.x` (≤ 1024),
    /// at most 15 multi-warp groups per block (named barriers 1–15);
    /// `hidden ≤ CHUNKS · threads_per_row · VEC`; `hidden`, row strides and pointers multiples of
    /// `VEC` elements (of their own type).
    #[inline(always)]
    pub unsafe fn norm_rows<
        T: Element,
        W: Element,
        K: NormKind,
        const VEC: usize,
        const CHUNKS: usize,
        const PIPELINED: bool,
    >(
        p: &NormParams,
    ) {
        // Rows that fill every chunk of every lane (the common case) need no per-chunk bounds
        // test: a separate copy without them.
        if fills_every_chunk::<VEC, CHUNKS>(p) {
            unsafe { norm_rows_of::<T, W, K, VEC, CHUNKS, true, PIPELINED, false>(p) }
        } else {
            unsafe { norm_rows_of::<T, W, K, VEC, CHUNKS, false, PIPELINED, false>(p) }
        }
    }

    /// [`norm_rows`] for rows whose width (or stride, or address) leaves them off 16-byte
    /// boundaries (an odd width: one row in eight aligned): each row's *head*, the elements
    /// before its first 16-byte boundary, and its *tail* past the last whole vector are read one
    /// element a lane (the group's first lanes); the *body* between them in `VEC`-element
    /// vectors of 16 bytes, as `norm_rows` reads an aligned row. Narrow vectors cost an access
    /// each: 4096 × 4095 bf16 rmsnorm moved 2.6 TB/s read an element at a time, 3.9 at 4096
    /// (docs/perf/norm.md v11, v12). The weights (and β) of a body vector start at the row's
    /// head, off their own alignment: each thread gathers them an element at a time, once if
    /// they stay in its registers across rows.
    /// Launcher's guarantees, beyond `norm_rows`' (but `hidden`, strides and the weights'
    /// address need only element alignment): `VEC · size_of::<T>()` = 16; every row of every
    /// row tensor has the head of the group's first row (the same address mod 16: a group takes
    /// one row, or rows a multiple of 16 bytes apart, and the tensors' addresses and row strides
    /// agree mod 16 bytes); `threads_per_row ≥ 2 · VEC` (head and tail, under `VEC`
    /// elements each, take a lane an element); `hidden ≤ CHUNKS · threads_per_row · VEC`.
    #[inline(always)]
    pub unsafe fn norm_rows_peeled<
        T: Element,
        W: Element,
        K: NormKind,
        const VEC: usize,
        const CHUNKS: usize,
        const PIPELINED: bool,
    >(
        p: &NormParams,
    ) {
        unsafe { norm_rows_of::<T, W, K, VEC, CHUNKS, false, PIPELINED, true>(p) }
    }

    /// Whether a row fills every chunk of every thread of its group exactly.
    #[inline(always)]
    fn fills_every_chunk<const VEC: usize, const CHUNKS: usize>(p: &NormParams) -> bool {
        p.hidden as usize / VEC == CHUNKS * p.threads_per_row as usize
    }

    /// One thread's share of a row: its chunks (and for a fused add, the residual's).
    #[derive(Clone, Copy)]
    struct Share<T, const VEC: usize, const CHUNKS: usize> {
        x: [Packed<T, VEC>; CHUNKS],
        residual: [Packed<T, VEC>; CHUNKS],
        /// A peeled row's head or tail element this thread holds ([`Columns::edge`]; else zero).
        edge: Packed<T, 1>,
        edge_residual: Packed<T, 1>,
    }

    impl<T: Element, const VEC: usize, const CHUNKS: usize> Share<T, VEC, CHUNKS> {
        const ZERO: Self = Share {
            x: [Packed::ZERO; CHUNKS],
            residual: [Packed::ZERO; CHUNKS],
            edge: Packed::ZERO,
            edge_residual: Packed::ZERO,
        };
    }

    /// Where one thread's chunks lie in a row. Offsets are 32-bit (a register row has far fewer
    /// than 2^31 elements) and recomputed at each use: kept for the whole row loop, eight 64-bit
    /// chunk offsets cost sixteen registers.
    #[derive(Clone, Copy)]
    struct Columns<const VEC: usize, const FULL: bool> {
        threads_per_row: u32,
        lane: u32,
        vectors: u32,
        /// Whether the kernel predicates its rows of narrow vectors (a constant LLVM folds): see
        /// [`Columns::predicated`].
        predicates_narrow: bool,
        /// Peeled rows ([`norm_rows_peeled`]; a constant LLVM folds): the weights are gathered.
        peeled: bool,
        /// Elements before the first vector: a peeled row's head, else 0.
        head: u32,
        /// The head or tail element this thread holds, if any (peeled rows only).
        edge: Option<u32>,
    }

    impl<const VEC: usize, const FULL: bool> Columns<VEC, FULL> {
        /// The columns of `group`'s thread, for rows of `p`.
        #[inline(always)]
        fn of<K: NormKind>(p: &NormParams, group: &RowGroup) -> Self {
            let vectors = p.hidden / VEC as u32;
            Columns {
                threads_per_row: p.threads_per_row,
                lane: group.lane,
                vectors,
                predicates_narrow: !K::CENTERED,
                peeled: false,
                head: 0,
                edge: None,
            }
        }

        /// The columns of `group`'s thread for peeled rows of `p` whose first element lies at
        /// `first` (any row the group takes: they share its alignment).
        #[inline(always)]
        fn peeled<K: NormKind, T>(p: &NormParams, group: &RowGroup, first: *const T) -> Self {
            let vector_bytes = (VEC * core::mem::size_of::<T>()) as u32;
            let head =
                (vector_bytes - (first as u64 as u32) % vector_bytes) % vector_bytes / core::mem::size_of::<T>() as u32;
            let head = head.min(p.hidden);
            let vectors = (p.hidden - head) / VEC as u32;
            // Lanes [0, head) take the head; the next ones the tail, after the body.
            let edges = p.hidden - vectors * VEC as u32;
            let lane = group.lane;
            let edge = (lane < edges).then_some(if lane < head { lane } else { lane + vectors * VEC as u32 });
            Columns { vectors, peeled: true, head, edge, ..Self::of::<K>(p, group) }
        }

        /// Element offsets of the chunks, computed afresh (see [`opaque`]).
        #[inline(always)]
        fn offsets<const CHUNKS: usize>(&self) -> [usize; CHUNKS] {
            let stride = opaque(self.threads_per_row * VEC as u32);
            let first = self.head + self.lane * VEC as u32;
            let mut at = [0; CHUNKS];
            for (c, at) in at.iter_mut().enumerate() {
                *at = (first + c as u32 * stride) as usize;
            }
            at
        }

        #[inline(always)]
        fn valid(&self, c: usize) -> bool {
            FULL || c as u32 * self.threads_per_row + self.lane < self.vectors
        }

        /// Whether chunks past the row are skipped by predicated accesses (every access issued,
        /// each under its chunk's predicate) rather than branched around: for rows of narrow
        /// vectors of `E` ([`NARROW_VECTOR_BYTES`]), where a branch costs about what the element it guards does
        /// (three instructions; fused 4095-wide bf16 rows, 8 chunks: 2144 → 1592 instructions),
        /// in every kernel but layernorm's. rmsnorm's predicated 8-chunk pipelined entries need
        /// a 64-register cap (crates/ferrinfer-jit/src/norm.rs) to keep two 512-thread blocks an
        /// SM (uncapped, 72 registers: 4096 × 4095 bf16 31.0 → 43.6 µs; capped, 30.8 → 29.8:
        /// docs/perf/norm.md v10, v11); layernorm's spill under that cap. Wider vectors keep the
        /// branch: predicated, fused 16-byte vectors, 8 chunks, took 130 → 167 registers.
        #[inline(always)]
        fn predicated<E>(&self) -> bool {
            !FULL && self.predicates_narrow && VEC * core::mem::size_of::<E>() < NARROW_VECTOR_BYTES
        }

        /// Chunk `c`'s vector at `src` as `L`; zeros past the row.
        #[inline(always)]
        unsafe fn load<E: Element, L: Load>(&self, c: usize, src: *const E) -> Packed<E, VEC> {
            let valid = self.valid(c);
            if self.predicated::<E>() {
                unsafe { Packed::load_if::<L>(valid, src) }
            } else if valid {
                unsafe { Packed::load::<L>(src) }
            } else {
                Packed::ZERO
            }
        }

        /// Whether chunk `c`'s outputs are computed: where they are written (the row is,
        /// `row_writes`, and the chunk lies in it), or everywhere when predicated.
        #[inline(always)]
        fn computes<E>(&self, c: usize, row_writes: bool) -> bool {
            self.predicated::<E>() || (row_writes && self.valid(c))
        }

        /// Writes chunk `c`'s vector at `dst` as `S` if the row is written (`row_writes`) and
        /// the chunk lies in it.
        #[inline(always)]
        unsafe fn store<E: Element, S: Store>(&self, c: usize, row_writes: bool, value: Packed<E, VEC>, dst: *mut E) {
            let write = row_writes && self.valid(c);
            if self.predicated::<E>() {
                unsafe { value.store_if::<S>(write, dst) }
            } else if write {
                unsafe { value.store::<S>(dst) }
            }
        }
    }

    /// `value`, hidden from LLVM so that what is computed from it is not hoisted out of the row
    /// loop (and kept live in registers across it).
    #[inline(always)]
    fn opaque(value: u32) -> u32 {
        let out: u32;
        unsafe {
            core::arch::asm!("mov.b32 {o}, {i};", o = out(reg32) out, i = in(reg32) value, options(nomem, nostack))
        };
        out
    }

    #[inline(always)]
    unsafe fn norm_rows_of<
        T: Element,
        W: Element,
        K: NormKind,
        const VEC: usize,
        const CHUNKS: usize,
        const FULL: bool,
        const PIPELINED: bool,
        const PEELED: bool,
    >(
        p: &NormParams,
    ) {
        let mut group = RowGroup::of_thread(p.threads_per_row);
        let columns = Columns::<VEC, FULL>::of::<K>(p, &group);
        let rows_per_block = group.per_block() as u64;
        let stride = grid_size() as u64 * rows_per_block;
        // Groups smaller than a warp iterate with their warp (their reductions are the warp's
        // shuffles): `lead` is the row of the warp's first group; a group past the last row
        // computes on zeros and stores nothing.
        let mut lead = block_index() as u64 * rows_per_block + group.first_of_warp() as u64;
        let in_warp = (group.group - group.first_of_warp()) as u64;
        let columns = if PEELED {
            Columns::<VEC, FULL>::peeled::<K, T>(p, &group, row_ptr::<T>(p.input, lead + in_warp, p.input_row_stride))
        } else {
            columns
        };
        chain_after_prior_grids();
        if lead < p.rows {
            let weights = unsafe { kept_weights::<W, K, VEC, CHUNKS, FULL>(p, &columns) };
            let inverse_hidden = 1.0 / p.hidden as f32;
            // An output that is the input (in place, and a fused add's rows always) is written by
            // this kernel: then no non-coherent loads of it, as PTX requires, and where the
            // vectors are wide enough its lines kept in L2 for the write.
            let read_only = p.output != p.input;
            let load = |row| unsafe {
                if read_only {
                    load_share::<T, K, Once, VEC, CHUNKS, FULL>(p, row, &columns)
                } else if VEC * core::mem::size_of::<T>() >= LINGERING_MIN_VECTOR_BYTES {
                    load_share::<T, K, Lingering, VEC, CHUNKS, FULL>(p, row, &columns)
                } else {
                    load_share::<T, K, Coherent, VEC, CHUNKS, FULL>(p, row, &columns)
                }
            };
            let mut share = load(lead + in_warp);
            loop {
                let next = lead + stride;
                let prefetched = if PIPELINED && next < p.rows { load(next + in_warp) } else { Share::ZERO };
                let row = lead + in_warp;
                unsafe {
                    norm_share::<T, W, K, VEC, CHUNKS, FULL>(
                        p,
                        row,
                        share,
                        &weights,
                        &columns,
                        &mut group,
                        inverse_hidden,
                    )
                };
                if next >= p.rows {
                    break;
                }
                lead = next;
                share = if PIPELINED { prefetched } else { load(lead + in_warp) };
            }
        }
    }

    /// Narrowest vector whose in-place rows are read as [`Lingering`]: ptxas rebuilds the L2 policy
    /// before every access (five uniform instructions), an element's worth at 2-byte vectors,
    /// where the hint lost (fused 4096 × 4095 bf16 on an H200: 88.3 µs with it, 81.7 without;
    /// 65536 × 4096, 16-byte vectors: 504.3 with, 525.2 without — docs/perf/norm.md v9).
    const LINGERING_MIN_VECTOR_BYTES: usize = 8;

    /// Most bytes of weights (and β) a thread keeps in registers across its rows.
    const RESIDENT_WEIGHT_BYTES: usize = 64;

    #[inline(always)]
    fn resident_weights<W, K: NormKind, const VEC: usize, const CHUNKS: usize>() -> bool {
        CHUNKS * VEC * core::mem::size_of::<W>() * (1 + K::CENTERED as usize) <= RESIDENT_WEIGHT_BYTES
    }

    /// A thread's weights and β (zeros where the op has none): one pair per chunk, and the pair
    /// of its head or tail element (peeled rows).
    #[derive(Clone, Copy)]
    struct Weights<W, const VEC: usize, const CHUNKS: usize> {
        chunks: [(Packed<W, VEC>, Packed<W, VEC>); CHUNKS],
        edge: (Packed<W, 1>, Packed<W, 1>),
    }

    impl<W: Element, const VEC: usize, const CHUNKS: usize> Weights<W, VEC, CHUNKS> {
        const ZERO: Self =
            Weights { chunks: [(Packed::ZERO, Packed::ZERO); CHUNKS], edge: (Packed::ZERO, Packed::ZERO) };
    }

    /// The weights (and β) a thread keeps across its rows: its chunks where they are few enough
    /// ([`resident_weights`]), else zeros (each row reads them again).
    #[inline(always)]
    unsafe fn kept_weights<W: Element, K: NormKind, const VEC: usize, const CHUNKS: usize, const FULL: bool>(
        p: &NormParams,
        columns: &Columns<VEC, FULL>,
    ) -> Weights<W, VEC, CHUNKS> {
        if resident_weights::<W, K, VEC, CHUNKS>() {
            unsafe { load_weights::<W, K, VEC, CHUNKS, FULL>(p, columns) }
        } else {
            Weights::ZERO
        }
    }

    /// This thread's chunks of the weights (and β): read-only, shared by every row, kept in L1.
    /// A peeled row's start at the row's head, off their own alignment: gathered an element at a
    /// time (aligned 16-byte blocks shifted into place measured slower: 65536 × 4095 bf16
    /// rmsnorm 296.8 → 301.5 µs, f32 4096 × 4095 37.0 → 39.4; docs/perf/norm.md v12).
    #[inline(always)]
    unsafe fn load_weights<W: Element, K: NormKind, const VEC: usize, const CHUNKS: usize, const FULL: bool>(
        p: &NormParams,
        columns: &Columns<VEC, FULL>,
    ) -> Weights<W, VEC, CHUNKS> {
        let mut weights = Weights::<W, VEC, CHUNKS>::ZERO;
        let offsets = columns.offsets::<CHUNKS>();
        let load = |c: usize, tensor: u64| unsafe {
            let at = (tensor as *const W).wrapping_add(offsets[c]);
            match columns.peeled {
                true if columns.valid(c) => Packed::gather::<Reused>(at),
                true => Packed::ZERO,
                false => columns.load::<W, Reused>(c, at),
            }
        };
        for (c, slot) in weights.chunks.iter_mut().enumerate() {
            slot.0 = load(c, p.weight);
            if K::CENTERED {
                slot.1 = load(c, p.bias);
            }
        }
        if let Some(at) = columns.edge {
            let load = |tensor: u64| unsafe { Packed::load::<Reused>((tensor as *const W).wrapping_add(at as usize)) };
            weights.edge = (load(p.weight), if K::CENTERED { load(p.bias) } else { Packed::ZERO });
        }
        weights
    }

    /// Loads this thread's chunks of `row` as `L` (chunks past the row are zeros: see
    /// [`Columns::predicated`]); a fused add's input and residual, both written back in place, alike
    /// ([`Lingering`] where the vectors allow, so the writes find their lines in L2:
    /// fused_add_rmsnorm 65536 × 4096 on an H200, 521.5 → 501.7 µs, docs/perf/norm.md v8).
    #[inline(always)]
    unsafe fn load_share<T: Element, K: NormKind, L: Load, const VEC: usize, const CHUNKS: usize, const FULL: bool>(
        p: &NormParams,
        row: u64,
        columns: &Columns<VEC, FULL>,
    ) -> Share<T, VEC, CHUNKS> {
        let mut share = Share::ZERO;
        if row >= p.rows {
            return share;
        }
        let input = row_ptr::<T>(p.input, row, p.input_row_stride);
        let residual = row_ptr::<T>(p.residual, row, p.residual_row_stride);
        let offsets = columns.offsets::<CHUNKS>();
        for c in 0..CHUNKS {
            share.x[c] = unsafe { columns.load::<T, L>(c, input.wrapping_add(offsets[c])) };
            if K::FUSED_ADD {
                share.residual[c] = unsafe { columns.load::<T, L>(c, residual.wrapping_add(offsets[c])) };
            }
        }
        if let Some(at) = columns.edge {
            share.edge = unsafe { Packed::load::<L>(input.wrapping_add(at as usize)) };
            if K::FUSED_ADD {
                share.edge_residual = unsafe { Packed::load::<L>(residual.wrapping_add(at as usize)) };
            }
        }
        share
    }

    /// Sum over the thread's values of `f` (its chunks, and its head or tail element `edge`), in
    /// `ACCUMULATORS` FMA chains and a tree.
    #[inline(always)]
    fn thread_sum<T: Element, const VEC: usize, const CHUNKS: usize>(
        x: &[Packed<T, VEC>; CHUNKS],
        edge: Option<f32>,
        valid: impl Fn(usize) -> bool,
        term: impl Fn(f32, f32) -> f32,
    ) -> f32 {
        let mut acc = [0.0f32; ACCUMULATORS];
        if let Some(x) = edge {
            acc[ACCUMULATORS - 1] = term(x, 0.0);
        }
        for c in 0..CHUNKS {
            if valid(c) {
                for i in 0..VEC {
                    // A compile-time index (an index counted at run time puts `acc` on the stack).
                    let k = (c * VEC + i) % ACCUMULATORS;
                    acc[k] = term(x[c].get_f32(i), acc[k]);
                }
            }
        }
        let mut width = ACCUMULATORS / 2;
        while width > 0 {
            for j in 0..width {
                acc[j] += acc[j + width];
            }
            width /= 2;
        }
        acc[0]
    }

    /// Normalises one row from this thread's share and writes its chunks (fused: also the new
    /// residual); a `row` past the last computes on zeros, for its warp's reductions, and writes
    /// nothing.
    #[inline(always)]
    unsafe fn norm_share<
        T: Element,
        W: Element,
        K: NormKind,
        const VEC: usize,
        const CHUNKS: usize,
        const FULL: bool,
    >(
        p: &NormParams,
        row: u64,
        mut share: Share<T, VEC, CHUNKS>,
        weights: &Weights<W, VEC, CHUNKS>,
        columns: &Columns<VEC, FULL>,
        group: &mut RowGroup,
        inverse_hidden: f32,
    ) {
        let offsets = columns.offsets::<CHUNKS>();
        let writes = row < p.rows;
        if K::FUSED_ADD {
            let residual = row_ptr::<T>(p.residual, row, p.residual_row_stride);
            for c in 0..CHUNKS {
                if columns.computes::<T>(c, writes) {
                    let (x, r) = (share.x[c].to_f32(), share.residual[c].to_f32());
                    let mut sum = [0.0f32; VEC];
                    for i in 0..VEC {
                        sum[i] = x[i] + r[i];
                    }
                    share.x[c] = Packed::from_f32(sum);
                    unsafe { columns.store::<T, Kept>(c, writes, share.x[c], residual.wrapping_add(offsets[c])) };
                }
            }
            if let Some(at) = columns.edge.filter(|_| writes) {
                share.edge = Packed::from_f32([share.edge.get_f32(0) + share.edge_residual.get_f32(0)]);
                unsafe { share.edge.store::<Kept>(residual.wrapping_add(at as usize)) };
            }
        }
        // Chunks past the row hold zeros: nothing to Σx or Σx² (predicated, every chunk is summed
        // rather than each tested), but not to Σ(x − mean)².
        let (every, valid) = (|c| columns.predicated::<T>() || columns.valid(c), |c| columns.valid(c));
        let edge = columns.edge.map(|_| share.edge.get_f32(0));
        let stats = if K::CENTERED {
            let mean = group.sum(thread_sum(&share.x, edge, every, |x, acc| acc + x)) * inverse_hidden;
            let centered = thread_sum(&share.x, edge, valid, |x, acc| mul_add(x - mean, x - mean, acc));
            RowScale { shift: mean, scale: rsqrt(mul_add(group.sum(centered), inverse_hidden, p.eps)) }
        } else {
            let squares = thread_sum(&share.x, edge, every, |x, acc| mul_add(x, x, acc));
            RowScale { shift: 0.0, scale: rsqrt(mul_add(group.sum(squares), inverse_hidden, p.eps)) }
        };
        let output = row_ptr::<T>(p.output, row, p.output_row_stride);
        let reloaded = if resident_weights::<W, K, VEC, CHUNKS>() {
            None
        } else {
            Some(unsafe { load_weights::<W, K, VEC, CHUNKS, FULL>(p, columns) })
        };
        let weights = reloaded.as_ref().unwrap_or(weights);
        if let (Some(at), Some(x), true) = (columns.edge, edge, writes) {
            let (w, b) = weights.edge;
            let y = Packed::<T, 1>::from_f32([normalized::<K>(x, stats, w.get_f32(0), b.get_f32(0))]);
            unsafe { y.store::<Kept>(output.wrapping_add(at as usize)) };
        }
        for c in 0..CHUNKS {
            if columns.computes::<T>(c, writes) {
                let (w, b) = weights.chunks[c];
                let mut y = [0.0f32; VEC];
                for i in 0..VEC {
                    y[i] = normalized::<K>(share.x[c].get_f32(i), stats, w.get_f32(i), b.get_f32(i));
                }
                let y = Packed::<T, VEC>::from_f32(y);
                unsafe { columns.store::<T, Kept>(c, writes, y, output.wrapping_add(offsets[c])) };
            }
        }
    }

    /// The staged kernel (sm_90): a block is one row group (`threads_per_row == blockDim.x`, a
    /// multiple of 32) and takes rows `blockIdx.x + k · gridDim.x`. Its first thread has the copy
    /// engine bring `stages` rows ahead (input and, fused, residual) into a [`StagingRing`] of
    /// dynamic shared memory; every thread takes its chunks from the slot (as `norm_rows` lays
    /// them out), and once the row's reduction shows every thread has read them, the slot is
    /// refilled with the row `stages` ahead. Bytes in flight are `stages` rows a block, not
    /// bounded by registers. Launcher's guarantees: as `norm_rows`, and `VEC · size_of::<T>()` =
    /// 16, the dynamic shared memory `STAGING_HEADER_BYTES + stages · rows' bytes` (× 2 fused).
    #[cfg(target_feature = "sm_90")]
    #[inline(always)]
    pub unsafe fn norm_staged<T: Element, W: Element, K: NormKind, const VEC: usize, const CHUNKS: usize>(
        p: &NormParams,
    ) {
        if fills_every_chunk::<VEC, CHUNKS>(p) {
            unsafe { norm_staged_of::<T, W, K, VEC, CHUNKS, true>(p) }
        } else {
            unsafe { norm_staged_of::<T, W, K, VEC, CHUNKS, false>(p) }
        }
    }

    #[cfg(target_feature = "sm_90")]
    #[inline(always)]
    unsafe fn norm_staged_of<
        T: Element,
        W: Element,
        K: NormKind,
        const VEC: usize,
        const CHUNKS: usize,
        const FULL: bool,
    >(
        p: &NormParams,
    ) {
        let mut group = RowGroup::of_thread(p.threads_per_row);
        let columns = Columns::<VEC, FULL>::of::<K>(p, &group);
        let row_bytes = p.hidden * core::mem::size_of::<T>() as u32;
        let ring = StagingRing::new(p.stages, row_bytes * (1 + K::FUSED_ADD as u32));
        let (first, step) = (block_index() as u64, grid_size() as u64);
        let leader = thread_index() == 0;
        let fill = |stage: u32, row: u64| unsafe {
            ring.expect(stage, row_bytes * (1 + K::FUSED_ADD as u32));
            let input = row_ptr::<T>(p.input, row, p.input_row_stride) as *const u8;
            ring.copy(stage, 0, input, row_bytes);
            if K::FUSED_ADD {
                let residual = row_ptr::<T>(p.residual, row, p.residual_row_stride) as *const u8;
                ring.copy(stage, row_bytes, residual, row_bytes);
            }
        };
        if leader {
            ring.init();
        }
        block_barrier();
        chain_after_prior_grids();
        if leader {
            for stage in 0..p.stages {
                let row = first + stage as u64 * step;
                if row < p.rows {
                    fill(stage, row);
                }
            }
        }
        let weights = unsafe { kept_weights::<W, K, VEC, CHUNKS, FULL>(p, &columns) };
        let inverse_hidden = 1.0 / p.hidden as f32;
        let (mut row, mut stage, mut use_count) = (first, 0, 0);
        while row < p.rows {
            ring.wait(stage, use_count);
            let share = unsafe { staged_share::<T, K, VEC, CHUNKS, FULL>(ring.slot(stage), row_bytes, &columns) };
            unsafe {
                norm_share::<T, W, K, VEC, CHUNKS, FULL>(p, row, share, &weights, &columns, &mut group, inverse_hidden)
            };
            // Every thread has read the slot: the reduction in `norm_share` waited for them all.
            // A one-warp block's reduction is shuffles alone, which order the reads by their data
            // but no barrier: racecheck reported the refill's copy racing them
            // (docs/perf/gpu-correctness.md), so such a block meets at one.
            if p.threads_per_row <= 32 {
                block_barrier();
            }
            let ahead = row + p.stages as u64 * step;
            if leader && ahead < p.rows {
                fill(stage, ahead);
            }
            row += step;
            stage += 1;
            if stage == p.stages {
                (stage, use_count) = (0, use_count + 1);
            }
        }
    }

    /// This thread's chunks of a staged row (`slot`: a shared-memory address; fused, the
    /// residual follows the input at `row_bytes`).
    #[cfg(target_feature = "sm_90")]
    #[inline(always)]
    unsafe fn staged_share<T: Element, K: NormKind, const VEC: usize, const CHUNKS: usize, const FULL: bool>(
        slot: u32,
        row_bytes: u32,
        columns: &Columns<VEC, FULL>,
    ) -> Share<T, VEC, CHUNKS> {
        let mut share = Share::ZERO;
        let offsets = columns.offsets::<CHUNKS>();
        let at = |offset: u32, c: usize| (offset as usize + offsets[c] * core::mem::size_of::<T>()) as *const T;
        for c in 0..CHUNKS {
            if columns.valid(c) {
                share.x[c] = unsafe { Packed::load::<Shared>(at(slot, c)) };
                if K::FUSED_ADD {
                    share.residual[c] = unsafe { Packed::load::<Shared>(at(slot + row_bytes, c)) };
                }
            }
        }
        share
    }

    /// One output value in f32, with FMAs: `(x − shift) · scale · w' + b`.
    #[inline(always)]
    fn normalized<K: NormKind>(x: f32, row: RowScale, w: f32, b: f32) -> f32 {
        if K::CENTERED {
            mul_add((x - row.shift) * row.scale, w, b)
        } else if K::UNIT_OFFSET {
            let scaled = x * row.scale;
            mul_add(scaled, w, scaled)
        } else {
            x * row.scale * w
        }
    }

    /// The streaming kernel, for rows too long for registers: one row per block at a time (the
    /// grid strides over rows), each thread taking every `blockDim`-th vector. The row is read
    /// once per statistics pass with its lines kept in L2 ([`Lingering`]) and once more, from L2,
    /// for the outputs ([`LastRead`]); a fused add computes the new residual in each pass and
    /// writes it in the last, beside the output, so no pass reads what another wrote
    /// (torch.compile's shape for fused_add_rmsnorm: docs/perf/norm.md).
    /// `blockDim.x` whole warps, 32 to 1024, and `threads_per_row == blockDim.x`.
    #[inline(always)]
    pub unsafe fn norm_stream<T: Element, W: Element, K: NormKind, const VEC: usize>(p: &NormParams) {
        let mut group = RowGroup::of_thread(p.threads_per_row);
        let vectors = p.hidden as usize / VEC;
        let (first, step) = (thread_index() as usize, p.threads_per_row as usize);
        let inverse_hidden = 1.0 / p.hidden as f32;
        let mut row = block_index() as u64;
        chain_after_prior_grids();
        while row < p.rows {
            let input = row_ptr::<T>(p.input, row, p.input_row_stride);
            let residual = row_ptr::<T>(p.residual, row, p.residual_row_stride);
            // Pass 1: Σx or Σx² (fused: of the new residual).
            let mut sum = 0.0;
            let mut v = first;
            while v < vectors {
                let x = unsafe { stream_vector::<T, K, Lingering, VEC>(input, residual, v * VEC) };
                for i in 0..VEC {
                    let value = x.get_f32(i);
                    sum = if K::CENTERED { sum + value } else { mul_add(value, value, sum) };
                }
                v += step;
            }
            let total = group.sum(sum);
            let stats = if K::CENTERED {
                let mean = total * inverse_hidden;
                let mut centered = 0.0;
                let mut v = first;
                while v < vectors {
                    let x = unsafe { stream_vector::<T, K, Lingering, VEC>(input, residual, v * VEC) };
                    for i in 0..VEC {
                        let d = x.get_f32(i) - mean;
                        centered = mul_add(d, d, centered);
                    }
                    v += step;
                }
                RowScale { shift: mean, scale: rsqrt(mul_add(group.sum(centered), inverse_hidden, p.eps)) }
            } else {
                RowScale { shift: 0.0, scale: rsqrt(mul_add(total, inverse_hidden, p.eps)) }
            };
            let output = row_ptr::<T>(p.output, row, p.output_row_stride);
            let mut v = first;
            while v < vectors {
                let x = unsafe { stream_vector::<T, K, LastRead, VEC>(input, residual, v * VEC) };
                if K::FUSED_ADD {
                    unsafe { x.store::<Kept>(residual.add(v * VEC)) };
                }
                let w = unsafe { Packed::<W, VEC>::load::<Reused>((p.weight as *const W).add(v * VEC)) };
                let b = if K::CENTERED {
                    unsafe { Packed::<W, VEC>::load::<Reused>((p.bias as *const W).add(v * VEC)) }
                } else {
                    w
                };
                let mut y = [0.0f32; VEC];
                for i in 0..VEC {
                    y[i] = normalized::<K>(x.get_f32(i), stats, w.get_f32(i), b.get_f32(i));
                }
                unsafe { Packed::<T, VEC>::from_f32(y).store::<Kept>(output.add(v * VEC)) };
                v += step;
            }
            row += grid_size() as u64;
        }
    }

    /// The row's `VEC` values at element `at` as the statistics see them: the input, or for a
    /// fused add the new residual (`input + residual`, rounded as it is stored).
    #[inline(always)]
    unsafe fn stream_vector<T: Element, K: NormKind, L: Load, const VEC: usize>(
        input: *const T,
        residual: *const T,
        at: usize,
    ) -> Packed<T, VEC> {
        let x = unsafe { Packed::<T, VEC>::load::<L>(input.add(at)) };
        if !K::FUSED_ADD {
            return x;
        }
        let (x, r) = (x.to_f32(), unsafe { Packed::<T, VEC>::load::<L>(residual.add(at)) }.to_f32());
        let mut sum = [0.0f32; VEC];
        for i in 0..VEC {
            sum[i] = x[i] + r[i];
        }
        Packed::from_f32(sum)
    }
}
