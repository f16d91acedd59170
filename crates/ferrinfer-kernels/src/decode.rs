//! The decode family: attention of one query token a request over that request's keys and
//! values in a paged KV cache (FlashInfer's `BatchDecodeWithPagedKVCacheWrapper.run`,
//! `single_decode_with_kv_cache`). For query head `h` of request `b`, over its keys `kⱼ` and
//! values `vⱼ` (`j < kv_len`, kv head `h / group`):
//!
//! `sⱼ = log₂e · z(q·kⱼ)`, `lse = log₂ Σⱼ 2^sⱼ`, `o = Σⱼ 2^(sⱼ − lse) vⱼ`,
//!
//! `z(x) = sm_scale · x`, or with a soft cap `c`, `c · tanh(sm_scale · x / c)`; keys before
//! `kv_len − 1 − window_left` are left out when `window_left ≥ 0`; with RoPE (llama's, the halves
//! of the head rotated) the query is turned to position `kv_len − 1` and key `j` to `j` first.
//! No key (an empty request): `o = 0`, `lse = −∞`.
//!
//! A request's keys may be cut into work items (the plan's: `[request, first token, end token]`
//! each, consecutive items per request), each giving a partial state `(o, lse)` of its range;
//! a request of one item writes its output directly, a request of several writes partial states
//! that a second kernel merges (the cascade family's arithmetic). The host's CPU backend runs the
//! same items and the same merge, a value at a time.
//!
//! One parameter struct shared with the host, the per-token math both sides run, the host's
//! item and merge functions, and three device kernels: the items' on CUDA cores (generic over the
//! element, the index type, the head size, the query heads a thread takes and RoPE), the items'
//! on tensor cores (f16 and bf16 without RoPE: a block's query heads are the rows of mma.sync
//! tiles, keys and values staged through shared memory) and the merge.

use crate::element::Element;
use crate::math::{FastDivisor, choose, exp2, exp2_f64, log2, mul_add, reciprocal, sin_cos, tanh};
use crate::vector::{Index, Kept, Packed, Reused};

/// Arguments of the decode kernels, passed by value. Strides in elements; the page table's in
/// its own index type's elements.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct DecodeParams {
    /// `[batch, qo_heads, head_dim]` by `q_strides`.
    pub q: u64,
    /// The caches, entry `(page, slot, kv_head)` at `page · kv_strides[0] + slot · kv_strides[1]
    /// + kv_head · kv_strides[2]` (NHD and HND differ only in strides).
    pub k: u64,
    pub v: u64,
    /// The page table (`kv_indices`, `kv_indptr`, `kv_last_page_len`), by `index_strides`; with
    /// `kv_indices` 0 the cache is one contiguous sequence of `kv_len` entries (single decode:
    /// page 0, slot `j`).
    pub kv_indices: u64,
    pub kv_indptr: u64,
    pub kv_last_page_len: u64,
    /// The plan: int32 `[items, 3]` (request, first token, end token), contiguous, and int32
    /// `[batch + 1]`: each request's first item. Both 0: one item, request 0's every key.
    pub work: u64,
    pub work_indptr: u64,
    /// `[batch, qo_heads, head_dim]` and f32 `[batch, qo_heads]`.
    pub out: u64,
    pub lse: u64,
    /// f32 `[items, qo_heads, head_dim]` and `[items, qo_heads]`, contiguous: the partial states
    /// of requests of several items.
    pub partial_v: u64,
    pub partial_s: u64,
    pub q_strides: [u64; 2],
    pub kv_strides: [u64; 3],
    pub out_strides: [u64; 2],
    pub lse_strides: [u64; 2],
    pub index_strides: [u64; 3],
    /// Pages of each cache, and entries of `kv_indices`: a page table entry outside them is read
    /// as no key.
    pub pages: u64,
    pub page_ids: u64,
    /// Entries of the contiguous cache (`kv_indices` 0).
    pub kv_len: u64,
    pub batch: u32,
    pub qo_heads: u32,
    /// Query heads a kv head (`qo_heads / kv_heads`).
    pub group: u32,
    pub head_dim: u32,
    pub page_size: u32,
    /// Keys left of the query's position kept (negative: every key).
    pub window_left: i32,
    /// `sm_scale · log₂e` (no soft cap), else `soft_cap · log₂e`.
    pub score_scale: f32,
    /// `sm_scale / soft_cap`, 0 without a soft cap.
    pub cap_scale: f32,
    /// What the outputs' values are multiplied by (`v_scale`; 1 without one).
    pub v_scale: f32,
    /// Nonzero: RoPE (llama's) applied to the query and the keys in the kernel.
    pub rope: u32,
    /// Tiles of keys in flight in the tensor-core items' kernel, 2 to [`MAX_MMA_STAGES`] (its
    /// shared memory, [`mma_shared_bytes`], holds that many).
    pub stages: u32,
    /// RoPE: element `i`'s frequency is `inverse_scale · 2^(−(i mod d/2) · exponent_step)`,
    /// `exponent_step = 2 · log₂(rope_theta) / head_dim`.
    pub rope_exponent_step: f64,
    pub rope_inverse_scale: f64,
}

/// A request's keys: its pages start at `kv_indices[first_page]`, `kv_len` entries in all,
/// `page_size` a page (a token's page and slot without a division instruction).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Request {
    pub first_page: u64,
    pub kv_len: u64,
    pub page_size: FastDivisor,
}

/// Request `b`'s pages and length, from a page table that may hold anything: bounds clamped into
/// `kv_indices`, a bound pair going down is no page, the last page's length clamped to `1 ..=
/// page_size`. (The launcher checks the tables where they are on the host; on a GPU they are
/// not read before the launch, and no value makes the kernel read outside the caches.)
///
/// # Safety
/// `p`'s page table readable at request `b` (`b < p.batch`).
#[inline(always)]
pub unsafe fn request<I: Index>(p: &DecodeParams, b: u32) -> Request {
    let page_size = FastDivisor::new(p.page_size);
    if p.kv_indices == 0 {
        return Request { first_page: 0, kv_len: p.kv_len, page_size };
    }
    let [_, indptr_stride, last_stride] = p.index_strides;
    let bound = |i: u32| unsafe { I::read(p.kv_indptr, i as u64, indptr_stride) }.max(0).min(p.page_ids as i64) as u64;
    let (first, end) = (bound(b), bound(b + 1));
    if end <= first {
        return Request { first_page: first, kv_len: 0, page_size };
    }
    let last = unsafe { I::read(p.kv_last_page_len, b as u64, last_stride) }.min(p.page_size as i64).max(1) as u64;
    Request { first_page: first, kv_len: (end - first - 1) * p.page_size as u64 + last, page_size }
}

/// The first key a request's query sees (the window's start).
#[inline(always)]
pub fn window_start(p: &DecodeParams, kv_len: u64) -> u64 {
    if p.window_left < 0 { 0 } else { kv_len.saturating_sub(1 + p.window_left as u64) }
}

/// The element offset of key `token` of `request` at kv head `kv_head` in a cache, or `None`
/// where the page table leads outside the cache.
///
/// # Safety
/// `p`'s page table readable within its bounds.
#[inline(always)]
pub unsafe fn entry_offset<I: Index>(p: &DecodeParams, request: &Request, token: u64, kv_head: u32) -> Option<u64> {
    let (page, slot) = if p.kv_indices == 0 {
        (0, token)
    } else {
        // A plan's items end below 2³¹ keys (int32), so `token` fits; were it past 2³², the
        // clamped token would still lie inside the request (`token < kv_len`), its page too.
        let (index, slot) = request.page_size.div_rem(token.min(u32::MAX as u64) as u32);
        let id = unsafe { I::read(p.kv_indices, request.first_page + index as u64, p.index_strides[0]) };
        (id as u64, slot as u64)
    };
    let inside = p.kv_indices == 0 || page < p.pages;
    inside.then(|| page * p.kv_strides[0] + slot * p.kv_strides[1] + kv_head as u64 * p.kv_strides[2])
}

/// A key's score in base 2 from its dot product with the query ([`DecodeParams::score_scale`]).
#[inline(always)]
pub fn score(p: &DecodeParams, dot: f32) -> f32 {
    if p.cap_scale != 0.0 { p.score_scale * tanh(dot * p.cap_scale) } else { dot * p.score_scale }
}

/// RoPE's angles of elements `first … first + VEC − 1` at `position`, as `(sin, cos)` pairs
/// (the element's pair index is its index mod `head_dim / 2`).
#[inline(always)]
pub fn rope_angles<const VEC: usize>(p: &DecodeParams, first: u32, position: u64) -> [(f32, f32); VEC] {
    let half = core::num::NonZeroU32::new(p.head_dim / 2).unwrap_or(core::num::NonZeroU32::MIN);
    core::array::from_fn(|i| {
        let pair = (first + i as u32) % half;
        let frequency = (exp2_f64(-(pair as f64) * p.rope_exponent_step) * p.rope_inverse_scale) as f32;
        sin_cos(position as f32 * frequency)
    })
}

/// Element `x` of the first half (`upper` false) or second half rotated with its partner `y`
/// in the other half by the angle `(sin, cos)`: `x cos − y sin`, `x cos + y sin`.
#[inline(always)]
pub fn rotate(x: f32, partner: f32, (sin, cos): (f32, f32), upper: bool) -> f32 {
    let signed = if upper { partner } else { -partner };
    mul_add(signed, sin, x * cos)
}

/// An online softmax's running state of one query head: the largest score so far, the sum of
/// `2^(s − m)` and the values' weighted sum.
#[derive(Clone, Copy)]
pub struct State<const N: usize> {
    pub m: f32,
    pub d: f32,
    pub acc: [f32; N],
}

impl<const N: usize> State<N> {
    pub const EMPTY: Self = State { m: f32::NEG_INFINITY, d: 0.0, acc: [0.0; N] };

    /// Adds keys of scores `s` (−∞ for none) and values `v`.
    #[inline(always)]
    pub fn add<const K: usize>(&mut self, s: [f32; K], v: &[[f32; N]; K]) {
        let top = s.iter().fold(self.m, |a, &b| if b > a { b } else { a });
        // While every score is −∞, weigh against 0: each weight is then 0, not NaN.
        let base = if top == f32::NEG_INFINITY { 0.0 } else { top };
        let scale = exp2(self.m - base);
        let w: [f32; K] = core::array::from_fn(|k| exp2(s[k] - base));
        self.d = mul_add(self.d, scale, w.iter().skip(1).fold(w[0], |a, &b| a + b));
        for (i, acc) in self.acc.iter_mut().enumerate() {
            *acc = (0..K).fold(*acc * scale, |sum, k| mul_add(w[k], v[k][i], sum));
        }
        self.m = top;
    }

    /// Merges another state of the same head into this one.
    #[inline(always)]
    pub fn merge(&mut self, other: &Self) {
        let top = if other.m > self.m { other.m } else { self.m };
        let base = if top == f32::NEG_INFINITY { 0.0 } else { top };
        let (a, b) = (exp2(self.m - base), exp2(other.m - base));
        self.d = mul_add(self.d, a, other.d * b);
        for i in 0..N {
            self.acc[i] = mul_add(self.acc[i], a, other.acc[i] * b);
        }
        self.m = top;
    }

    /// The state's output and log-sum-exp (base 2): zeros and −∞ where no key was seen.
    #[inline(always)]
    pub fn finish(&self, v_scale: f32) -> ([f32; N], f32) {
        let seen = self.m != f32::NEG_INFINITY;
        let inverse = reciprocal(self.d) * v_scale;
        (self.acc.map(|x| choose(seen, x * inverse, 0.0)), choose(seen, log2(self.d) + self.m, f32::NEG_INFINITY))
    }

    /// A finished state `(o, lse)` as a running one (`m = lse`, `d = 1`), for merging.
    #[inline(always)]
    pub fn of_finished(o: [f32; N], lse: f32) -> Self {
        State { m: lse, d: if lse == f32::NEG_INFINITY { 0.0 } else { 1.0 }, acc: o }
    }
}

/// Item `item`'s `(request, first token, end token)`; an idle item's request (−1, a padded
/// plan's) is `u32::MAX`, past every request: the kernels skip it.
///
/// # Safety
/// `item` below the plan's items.
#[inline(always)]
pub unsafe fn work_item(p: &DecodeParams, item: u32) -> (u32, u64, u64) {
    if p.work == 0 {
        return (0, 0, u64::MAX);
    }
    let at = |i: u64| unsafe { <i32 as Index>::read(p.work, 3 * item as u64 + i, 1) };
    (at(0) as u32, at(1).max(0) as u64, at(2).max(0) as u64)
}

/// Request `b`'s items: `(first, count)`.
///
/// # Safety
/// `b < p.batch`.
#[inline(always)]
pub unsafe fn items_of(p: &DecodeParams, b: u32) -> (u32, u32) {
    if p.work_indptr == 0 {
        return (0, 1);
    }
    let bound = |i: u32| unsafe { <i32 as Index>::read(p.work_indptr, i as u64, 1) } as u32;
    let first = bound(b);
    (first, bound(b + 1).saturating_sub(first))
}

/// Where a finished state of query head `head` of `item` (of request `b`) goes: the output (a
/// request of one item) or the item's partial state. Writes it.
///
/// # Safety
/// `p`'s outputs writable at `(b, head)` and `(item, head)`; `o` of `head_dim` values.
#[inline(always)]
unsafe fn write_state<T: Element>(p: &DecodeParams, (b, item, head): (u32, u32, u32), e: u32, o: f32, lse: f32) {
    let (_, items) = unsafe { items_of(p, b) };
    if items == 1 {
        unsafe { write_output::<T>(p, (b, head), e, o, lse) };
    } else {
        let row = item as u64 * p.qo_heads as u64 + head as u64;
        let at = (p.partial_v as *mut f32).wrapping_add((row * p.head_dim as u64 + e as u64) as usize);
        unsafe { Packed::<f32, 1>::from_f32([o]).store::<Kept>(at) };
        if e == 0 {
            unsafe {
                Packed::<f32, 1>::from_f32([lse]).store::<Kept>((p.partial_s as *mut f32).wrapping_add(row as usize))
            };
        }
    }
}

/// Writes element `e` of request `b`'s output of `head` (and with `e` 0 its log-sum-exp), as
/// global stores on the device.
///
/// # Safety
/// `p`'s outputs writable at `(b, head)`.
#[inline(always)]
unsafe fn write_output<T: Element>(p: &DecodeParams, (b, head): (u32, u32), e: u32, o: f32, lse: f32) {
    let at = b as u64 * p.out_strides[0] + head as u64 * p.out_strides[1] + e as u64;
    unsafe { Packed::<T, 1>::from_f32([o]).store::<Kept>((p.out as *mut T).wrapping_add(at as usize)) };
    if e == 0 {
        let at = b as u64 * p.lse_strides[0] + head as u64 * p.lse_strides[1];
        unsafe { Packed::<f32, 1>::from_f32([lse]).store::<Kept>((p.lse as *mut f32).wrapping_add(at as usize)) };
    }
}

/// The host's item: every query head of kv head `kv_head` over the item's keys, a value at a
/// time, its state written where [`write_state`] says (the CPU backend).
///
/// # Safety
/// `p` as the launcher validated it; `item` below the plan's items.
pub unsafe fn decode_item<T: Element, I: Index>(p: &DecodeParams, item: u32, kv_head: u32) {
    let (b, begin, end) = unsafe { work_item(p, item) };
    if b >= p.batch {
        return;
    }
    let request = unsafe { request::<I>(p, b) };
    let (begin, end) = (begin.max(window_start(p, request.kv_len)), end.min(request.kv_len));
    let d = (p.head_dim as usize).min(MAX_HEAD_DIM);
    for g in 0..p.group {
        let head = kv_head * p.group + g;
        let q_at = (p.q as *const T).wrapping_add((b as u64 * p.q_strides[0] + head as u64 * p.q_strides[1]) as usize);
        let q = unsafe { host_row::<T>(p, q_at, request.kv_len.saturating_sub(1)) };
        let (mut m, mut sum, mut acc) = (f32::NEG_INFINITY, 0.0f32, [0.0f32; MAX_HEAD_DIM]);
        for token in begin..end {
            let Some(offset) = (unsafe { entry_offset::<I>(p, &request, token, kv_head) }) else { continue };
            let k = unsafe { host_row::<T>(p, (p.k as *const T).wrapping_add(offset as usize), token) };
            let s = score(p, (0..d).fold(0.0f32, |acc, i| mul_add(q[i], k[i], acc)));
            let top = if s > m { s } else { m };
            let base = if top == f32::NEG_INFINITY { 0.0 } else { top };
            let (scale, w) = (exp2(m - base), exp2(s - base));
            sum = mul_add(sum, scale, w);
            let v = (p.v as *const T).wrapping_add(offset as usize);
            for (i, a) in acc[..d].iter_mut().enumerate() {
                *a = mul_add(w, unsafe { v.add(i).read() }.to_f32(), *a * scale);
            }
            m = top;
        }
        let seen = m != f32::NEG_INFINITY;
        let inverse = reciprocal(sum) * p.v_scale;
        let lse = choose(seen, log2(sum) + m, f32::NEG_INFINITY);
        for (e, a) in acc[..d].iter().enumerate() {
            unsafe { write_state::<T>(p, (b, item, head), e as u32, choose(seen, a * inverse, 0.0), lse) };
        }
    }
}

/// A head's row of `head_dim` values as f32, turned to `position` where `p` has RoPE.
///
/// # Safety
/// `row` readable for `head_dim` values.
unsafe fn host_row<T: Element>(p: &DecodeParams, row: *const T, position: u64) -> [f32; MAX_HEAD_DIM] {
    let d = (p.head_dim as usize).min(MAX_HEAD_DIM);
    let mut x = [0.0f32; MAX_HEAD_DIM];
    for (i, value) in x[..d].iter_mut().enumerate() {
        *value = unsafe { row.add(i).read() }.to_f32();
    }
    if p.rope == 0 {
        return x;
    }
    let half = d / 2;
    core::array::from_fn(|i| match i < d {
        true => rotate(x[i], x[(i + half) % d], rope_angles::<1>(p, i as u32, position)[0], i >= half),
        false => 0.0,
    })
}

/// The host's merge of request `b`'s partial states of query head `head` into its output (a
/// request of several items; one of a single item wrote its output already).
///
/// # Safety
/// `p` as the launcher validated it; `b < p.batch`, `head < p.qo_heads`.
pub unsafe fn merge_request<T: Element>(p: &DecodeParams, b: u32, head: u32) {
    let (first, items) = unsafe { items_of(p, b) };
    if items <= 1 {
        return;
    }
    for e in 0..p.head_dim {
        let (o, lse) = unsafe { merged_value(p, (first, items), head, e) };
        unsafe { write_output::<T>(p, (b, head), e, o, lse) };
    }
}

/// Element `e` of the merge of items `first .. first + items`' partial states of `head`, and
/// their merged log-sum-exp (the partial values carry `v_scale` already).
///
/// # Safety
/// The items' partial states readable.
#[inline(always)]
unsafe fn merged_value(p: &DecodeParams, (first, items): (u32, u32), head: u32, e: u32) -> (f32, f32) {
    let mut state = State::<1>::EMPTY;
    let end = first + items;
    let mut item = first;
    while item < end {
        // A batch's loads all issued before its merges: one memory latency a batch, not an item.
        let partial: [(f32, f32); MERGE_BATCH] = core::array::from_fn(|i| {
            let here = item + i as u32;
            let row = here as u64 * p.qo_heads as u64 + head as u64;
            let at = (p.partial_v as *const f32).wrapping_add((row * p.head_dim as u64 + e as u64) as usize);
            let lse = (p.partial_s as *const f32).wrapping_add(row as usize);
            let (o, lse) = unsafe {
                (
                    Packed::<f32, 1>::load_if::<Reused>(here < end, at),
                    Packed::<f32, 1>::load_if::<Reused>(here < end, lse),
                )
            };
            (o.get(0), lse.get(0))
        });
        for (i, &(o, lse)) in partial.iter().enumerate() {
            if item + (i as u32) < end {
                state.merge(&State::of_finished([o], lse));
            }
        }
        item += MERGE_BATCH as u32;
    }
    let ([o], lse) = state.finish(1.0);
    (o, lse)
}

/// Partial states [`merged_value`] loads at once.
const MERGE_BATCH: usize = 8;

/// The largest head size the family takes.
pub const MAX_HEAD_DIM: usize = 256;

/// Threads a block of the items' kernel.
pub const ITEM_THREADS: u32 = 128;
/// Keys a group of lanes loads at once in the items' kernel.
pub const UNROLL: usize = 4;

/// The dynamic shared memory the items' kernel needs for `HEADS` heads of `head_dim`: every
/// group's state of each head.
pub const fn item_shared_bytes(head_dim: u32, vec: u32, heads: u32) -> u32 {
    let groups = ITEM_THREADS / (head_dim / vec);
    groups * heads * (head_dim + 2) * 4
}

/// Query heads a block of the tensor-core items' kernel takes: the mma's 16 rows.
pub const MMA_ROWS: u32 = 16;
/// Keys the tensor-core items' kernel stages at once: 16 for each of its warps.
pub const MMA_TILE_KEYS: u32 = 64;
/// Warps of a block of the tensor-core items' kernel.
pub const MMA_WARPS: u32 = ITEM_THREADS / 32;
/// Most tiles in flight in the tensor-core items' kernel.
pub const MAX_MMA_STAGES: u32 = 4;

/// Rows of a tile each thread of the tensor-core items' kernel copies (its page-table lookups
/// held a tile ahead in registers): `head_dim / 16`, at most 8 (head_dim 256: two 16-byte chunks
/// of a row a thread).
pub const fn mma_row_passes(head_dim: u32) -> u32 {
    let passes = head_dim / 16;
    if passes < 8 { passes } else { 8 }
}

/// The dynamic shared memory the tensor-core items' kernel needs for `head_dim` (16-bit
/// elements) with `stages` tiles in flight: the query's rows, then each stage's keys' flags, two
/// tiles' row offsets, and each stage's keys and values — which the warps' states reuse after
/// the loop.
pub const fn mma_shared_bytes(head_dim: u32, stages: u32) -> u32 {
    let row = 2 * head_dim;
    let ring = stages * MMA_TILE_KEYS * (4 + 2 * row) + 2 * MMA_TILE_KEYS * 8;
    let states = MMA_WARPS * MMA_ROWS * (head_dim + 2) * 4;
    MMA_ROWS * row + if ring > states { ring } else { states }
}

#[cfg(target_arch = "nvptx64")]
pub use device_kernels::{decode_items, decode_items_mma, merge_items};

#[cfg(target_arch = "nvptx64")]
mod device_kernels {
    use super::*;
    use core::marker::PhantomData;

    use crate::device::{
        block_barrier, chain_after_prior_grids, dynamic_shared, load_shared_u32, load_shared_u64, shuffle_xor,
        store_shared_u32, store_shared_u64, thread_index,
    };
    use crate::element::DType;
    use crate::matrix::{commit_copies, copy_async_16, load_tiles, multiply_add, swizzled, wait_copies};
    use crate::vector::Once;

    /// The sum over an aligned group of `LANES` lanes (a power of two ≤ 32), every lane of the
    /// warp taking part.
    #[inline(always)]
    fn group_sum<const LANES: u32>(mut value: f32) -> f32 {
        let mut mask = LANES / 2;
        while mask > 0 {
            value += shuffle_xor(value, mask);
            mask /= 2;
        }
        value
    }

    /// The items' kernel: block `(item, kv_head · chunks + z)` takes query heads `z · HEADS …` of kv head
    /// `kv_head` over the item's keys. Groups of `LANES = D / VEC` lanes each hold a head's `VEC`
    /// values; the block's groups take keys `groups` apart, [`UNROLL`] keys a group a step (their
    /// loads issued together), every group the same number of steps (the shuffles need the whole
    /// warp). The groups' states then merge through shared memory and each head's result goes to
    /// the output or the item's partial state.
    #[inline(always)]
    pub unsafe fn decode_items<
        T: Element,
        I: Index,
        const D: usize,
        const VEC: usize,
        const HEADS: usize,
        const ROPE: bool,
    >(
        p: &DecodeParams,
    ) {
        chain_after_prior_grids();
        let lanes = (D / VEC) as u32;
        // Grid y: kv heads × the chunks of `HEADS` query heads their groups take.
        let chunks = p.group.div_ceil(HEADS as u32).max(1);
        let (item, y) = unsafe { (core::arch::nvptx::_block_idx_x() as u32, core::arch::nvptx::_block_idx_y() as u32) };
        let chunks = core::num::NonZeroU32::new(chunks).unwrap_or(core::num::NonZeroU32::MIN);
        let (kv_head, z) = (y / chunks, y % chunks);
        let (group, lane) = (thread_index() / lanes, thread_index() % lanes);
        let groups = ITEM_THREADS / lanes;
        let (b, begin, end) = unsafe { work_item(p, item) };
        if b >= p.batch {
            return;
        }
        let request = unsafe { request::<I>(p, b) };
        let (begin, end) = (begin.max(window_start(p, request.kv_len)), end.min(request.kv_len));
        let first_head = kv_head * p.group + z * HEADS as u32;
        let heads_here = (p.group - z * HEADS as u32).min(HEADS as u32);
        let q: [[f32; VEC]; HEADS] = core::array::from_fn(|h| {
            let head = first_head + h as u32;
            let at = b as u64 * p.q_strides[0] + head as u64 * p.q_strides[1] + (lane * VEC as u32) as u64;
            let x = unsafe {
                Packed::<T, VEC>::load_if::<Reused>((h as u32) < heads_here, (p.q as *const T).add(at as usize))
            }
            .to_f32();
            if ROPE { rotate_lanes::<VEC>(p, x, lane, lanes, request.kv_len.saturating_sub(1)) } else { x }
        });
        let mut states = [State::<VEC>::EMPTY; HEADS];
        let span = end.saturating_sub(begin);
        let per_step = (groups as u64) * UNROLL as u64;
        let steps = span.div_ceil(per_step);
        let k_base = p.k as *const T;
        let v_base = p.v as *const T;
        for step in 0..steps {
            let tokens: [u64; UNROLL] =
                core::array::from_fn(|u| begin + step * per_step + (u as u64) * groups as u64 + group as u64);
            let offsets: [Option<u64>; UNROLL] = core::array::from_fn(|u| {
                if tokens[u] < end { unsafe { entry_offset::<I>(p, &request, tokens[u], kv_head) } } else { None }
            });
            let column = (lane * VEC as u32) as usize;
            let k: [Packed<T, VEC>; UNROLL] = core::array::from_fn(|u| unsafe {
                let at = k_base.wrapping_add(offsets[u].unwrap_or(0) as usize + column);
                Packed::<T, VEC>::load_if::<Once>(offsets[u].is_some(), at)
            });
            let v: [Packed<T, VEC>; UNROLL] = core::array::from_fn(|u| unsafe {
                let at = v_base.wrapping_add(offsets[u].unwrap_or(0) as usize + column);
                Packed::<T, VEC>::load_if::<Once>(offsets[u].is_some(), at)
            });
            let k: [[f32; VEC]; UNROLL] = core::array::from_fn(|u| {
                let x = k[u].to_f32();
                if ROPE { rotate_lanes::<VEC>(p, x, lane, lanes, tokens[u]) } else { x }
            });
            let v: [[f32; VEC]; UNROLL] = core::array::from_fn(|u| v[u].to_f32());
            for h in 0..HEADS {
                let s: [f32; UNROLL] = core::array::from_fn(|u| {
                    let dot = (0..VEC).fold(0.0f32, |acc, i| mul_add(q[h][i], k[u][i], acc));
                    let dot = group_sum_dyn(dot, lanes);
                    if offsets[u].is_some() { score(p, dot) } else { f32::NEG_INFINITY }
                });
                states[h].add(s, &v);
            }
        }
        unsafe {
            combine_and_write::<T, D, VEC, HEADS>(p, &states, (b, item, first_head, heads_here), (group, lane, groups))
        };
    }

    /// [`group_sum`] for a run-time group of lanes (`D / VEC`: 8, 16 or 32).
    #[inline(always)]
    fn group_sum_dyn(value: f32, lanes: u32) -> f32 {
        match lanes {
            32 => group_sum::<32>(value),
            16 => group_sum::<16>(value),
            8 => group_sum::<8>(value),
            4 => group_sum::<4>(value),
            _ => group_sum::<2>(value),
        }
    }

    /// `VEC` values turned by RoPE at `position`: this lane holds elements `lane · VEC …`, its
    /// partners (the other half's) are `lanes / 2` lanes away.
    #[inline(always)]
    fn rotate_lanes<const VEC: usize>(
        p: &DecodeParams,
        x: [f32; VEC],
        lane: u32,
        lanes: u32,
        position: u64,
    ) -> [f32; VEC] {
        let angles = rope_angles::<VEC>(p, lane * VEC as u32, position);
        let upper = lane >= lanes / 2;
        core::array::from_fn(|i| rotate(x[i], shuffle_xor(x[i], lanes / 2), angles[i], upper))
    }

    /// The block's groups' states merged through shared memory ([`combine_published`]'s layout,
    /// a group `HEADS` heads).
    #[inline(always)]
    unsafe fn combine_and_write<T: Element, const D: usize, const VEC: usize, const HEADS: usize>(
        p: &DecodeParams,
        states: &[State<VEC>; HEADS],
        block: (u32, u32, u32, u32),
        (group, lane, groups): (u32, u32, u32),
    ) {
        let base = dynamic_shared();
        let put = |at: u32, x: f32| store_shared_u32(at, x.to_bits());
        for (h, state) in states.iter().enumerate() {
            let at = base + 4 * (group * HEADS as u32 + h as u32) * (D as u32 + 2);
            if lane == 0 {
                put(at, state.m);
                put(at + 4, state.d);
            }
            for i in 0..VEC as u32 {
                put(at + 8 + 4 * (lane * VEC as u32 + i), state.acc[i as usize]);
            }
        }
        block_barrier();
        unsafe { combine_published::<T, D>(p, base, (groups, HEADS as u32), block) };
    }

    /// Merges the states `groups` groups of the block published in shared memory at `base`
    /// (group `g`'s head `h` at float `(g · heads + h) · (D + 2)`: `m`, `d`, then the values),
    /// and writes each head's result, the block's threads a value each.
    #[inline(always)]
    unsafe fn combine_published<T: Element, const D: usize>(
        p: &DecodeParams,
        base: u32,
        (groups, heads): (u32, u32),
        (b, item, first_head, heads_here): (u32, u32, u32, u32),
    ) {
        let d = D as u32;
        let take = |at: u32| f32::from_bits(load_shared_u32(at));
        let mut e = thread_index();
        while e < heads_here * d {
            let (h, column) = (e / d, e % d);
            let mut total = State::<1>::EMPTY;
            for g in 0..groups {
                let at = base + 4 * (g * heads + h) * (d + 2);
                total.merge(&State { m: take(at), d: take(at + 4), acc: [take(at + 8 + 4 * column)] });
            }
            let ([o], lse) = total.finish(p.v_scale);
            unsafe { write_state::<T>(p, (b, item, first_head + h), column, o, lse) };
            e += ITEM_THREADS;
        }
    }

    /// The items' kernel on tensor cores (f16 and bf16, no RoPE): block `(item, kv_head ·
    /// chunks + z)` takes query heads `z · 16 …` of kv head `kv_head` (at most [`MMA_ROWS`], the
    /// mma's rows; rows past the group are zeros) over the item's keys. Keys and values stream
    /// through shared memory in tiles of [`MMA_TILE_KEYS`] (cp.async, `p.stages` tiles in flight,
    /// 16-byte chunks swizzled by row); warp `w` takes keys `16w …` of each tile: `Q·Kᵀ` and
    /// `P·V` are mma.sync, the online softmax runs on the score fragments, and each warp keeps
    /// its own state until the warps merge through shared memory at the end.
    #[inline(always)]
    pub unsafe fn decode_items_mma<T: Element, I: Index, const D: usize, const PASSES: usize, const TILES: usize>(
        p: &DecodeParams,
    ) {
        const { assert!(PASSES == mma_row_passes(D as u32) as usize && TILES == D / 8 && D % 64 == 0 && D <= MAX_HEAD_DIM) };
        chain_after_prior_grids();
        let (item, y) = unsafe { (core::arch::nvptx::_block_idx_x() as u32, core::arch::nvptx::_block_idx_y() as u32) };
        let chunks = core::num::NonZeroU32::new(p.group.div_ceil(MMA_ROWS)).unwrap_or(core::num::NonZeroU32::MIN);
        let (kv_head, z) = (y / chunks, y % chunks);
        let (b, begin, end) = unsafe { work_item(p, item) };
        if b >= p.batch {
            return;
        }
        let request = unsafe { request::<I>(p, b) };
        let (begin, end) = (begin.max(window_start(p, request.kv_len)), end.min(request.kv_len));
        let first_head = kv_head * p.group + z * MMA_ROWS;
        let heads_here = (p.group - z * MMA_ROWS).min(MMA_ROWS);
        let layout = MmaLayout::new(D as u32, p.stages);
        unsafe { stage_query::<T>(p, &layout, b, first_head, heads_here) };
        let tiles = end.saturating_sub(begin).div_ceil(MMA_TILE_KEYS as u64) as u32;
        let stager = TileStager::<T, I, PASSES> {
            p,
            request: &request,
            kv_head,
            begin,
            end,
            layout: &layout,
            marker: PhantomData,
        };
        // Tile j's row offsets go to shared memory (slot j % 2) before the barrier that precedes
        // its copies; each is read from the page table an iteration earlier still.
        for tile in 0..layout.stages - 1 {
            stager.publish(tile, stager.row_offset(tile));
            block_barrier();
            unsafe { stager.issue(tile, tiles) };
        }
        stager.publish(layout.stages - 1, stager.row_offset(layout.stages - 1));
        let mut pending = stager.row_offset(layout.stages);
        let mut state = WarpState::<TILES>::EMPTY;
        for tile in 0..tiles {
            wait_oldest_stage(layout.stages);
            block_barrier();
            let ahead = tile + layout.stages - 1;
            unsafe { stager.issue(ahead, tiles) };
            stager.publish(ahead + 1, pending);
            pending = stager.row_offset(ahead + 2);
            unsafe { state.add_tile::<T>(p, &layout, tile) };
        }
        wait_copies::<0>();
        block_barrier();
        unsafe { state.publish(&layout) };
        block_barrier();
        let groups = (MMA_WARPS, MMA_ROWS);
        unsafe { combine_published::<T, D>(p, layout.epilogue, groups, (b, item, first_head, heads_here)) };
    }

    /// Where the tensor-core kernel's parts live in the block's dynamic shared memory (byte
    /// addresses, in [`mma_shared_bytes`]'s order).
    struct MmaLayout {
        /// Bytes of a row of `D` elements.
        row_bytes: u32,
        /// The query heads' rows, [`MMA_ROWS`] of them.
        query: u32,
        /// Each stage's keys' flags (u32: the key exists), [`MMA_TILE_KEYS`] a stage.
        flags: u32,
        /// Two tiles' rows' element offsets in the caches (u64, `u64::MAX`: no key).
        row_offsets: u32,
        /// Each stage's key tile then value tile.
        staging: u32,
        stages: u32,
        /// After the loop, the warps' states (from `flags` on).
        epilogue: u32,
    }

    impl MmaLayout {
        #[inline(always)]
        fn new(head_dim: u32, stages: u32) -> Self {
            let row_bytes = 2 * head_dim;
            let stages = stages.clamp(2, MAX_MMA_STAGES);
            let query = dynamic_shared();
            let flags = query + MMA_ROWS * row_bytes;
            let row_offsets = flags + stages * MMA_TILE_KEYS * 4;
            let staging = row_offsets + 2 * MMA_TILE_KEYS * 8;
            MmaLayout { row_bytes, query, flags, row_offsets, staging, stages, epilogue: flags }
        }

        /// Stage `stage`'s key tile (its value tile follows).
        #[inline(always)]
        fn keys(&self, stage: u32) -> u32 {
            self.staging + stage * 2 * MMA_TILE_KEYS * self.row_bytes
        }

        #[inline(always)]
        fn values(&self, stage: u32) -> u32 {
            self.keys(stage) + MMA_TILE_KEYS * self.row_bytes
        }

        #[inline(always)]
        fn flag(&self, stage: u32, key: u32) -> u32 {
            self.flags + 4 * (stage * MMA_TILE_KEYS + key)
        }

        /// Row `row`'s offset of tile `tile`.
        #[inline(always)]
        fn row_offset(&self, tile: u32, row: u32) -> u32 {
            self.row_offsets + 8 * ((tile % 2) * MMA_TILE_KEYS + row)
        }
    }

    /// Waits for this thread's copies of the oldest tile in flight (`stages − 1` tiles are
    /// issued ahead; every thread commits one group a tile).
    #[inline(always)]
    fn wait_oldest_stage(stages: u32) {
        match stages {
            4 => wait_copies::<2>(),
            3 => wait_copies::<1>(),
            _ => wait_copies::<0>(),
        }
    }

    /// Copies the block's query rows into shared memory (zeros past `heads_here`), with the
    /// first tile's copies.
    ///
    /// # Safety
    /// `p`'s query readable at request `b`'s heads `first_head … first_head + heads_here`.
    #[inline(always)]
    unsafe fn stage_query<T: Element>(p: &DecodeParams, layout: &MmaLayout, b: u32, first_head: u32, heads_here: u32) {
        let chunks = layout.row_bytes / 16;
        let mut i = thread_index();
        while i < MMA_ROWS * chunks {
            let (row, chunk) = (i / chunks, i % chunks);
            let present = row < heads_here;
            let head = first_head + if present { row } else { 0 };
            let at = b as u64 * p.q_strides[0] + head as u64 * p.q_strides[1] + 8 * chunk as u64;
            let src = (p.q as *const T).wrapping_add(at as usize) as *const u8;
            unsafe { copy_async_16(swizzled(layout.query, layout.row_bytes, row, 8 * chunk), src, present) };
            i += ITEM_THREADS;
        }
    }

    /// Fills the staging ring: `2 · PASSES` threads a row ([`mma_row_passes`]), so thread `t`
    /// copies rows `t / (2 · PASSES) + i · rows_per_pass` (`i < PASSES`) of each tile's keys and
    /// values, `D / 16 / PASSES` 16-byte chunks of each from chunk `t % (2 · PASSES)` on.
    struct TileStager<'a, T, I, const PASSES: usize> {
        p: &'a DecodeParams,
        request: &'a Request,
        kv_head: u32,
        begin: u64,
        end: u64,
        layout: &'a MmaLayout,
        marker: PhantomData<(T, I)>,
    }

    impl<T: Element, I: Index, const PASSES: usize> TileStager<'_, T, I, PASSES> {
        const THREADS_PER_ROW: u32 = 2 * PASSES as u32;
        const ROWS_PER_PASS: u32 = ITEM_THREADS / Self::THREADS_PER_ROW;

        /// Thread `t < MMA_TILE_KEYS`: the element offset of row `t` of tile `tile` in the
        /// caches (`u64::MAX`: no key — past the item, or a page outside the cache); one
        /// page-table read a row for the block, rather than one for each thread copying it.
        #[inline(always)]
        fn row_offset(&self, tile: u32) -> u64 {
            let token = self.begin + tile as u64 * MMA_TILE_KEYS as u64 + thread_index() as u64;
            let at = if thread_index() < MMA_TILE_KEYS && token < self.end {
                unsafe { entry_offset::<I>(self.p, self.request, token, self.kv_head) }
            } else {
                None
            };
            at.unwrap_or(u64::MAX)
        }

        /// Thread `t < MMA_TILE_KEYS`: stores its row's offset of tile `tile` for the copies
        /// (visible to them after the next barrier).
        #[inline(always)]
        fn publish(&self, tile: u32, offset: u64) {
            if thread_index() < MMA_TILE_KEYS {
                store_shared_u64(self.layout.row_offset(tile, thread_index()), offset);
            }
        }

        /// Issues tile `tile`'s copies into its stage (none past `tiles`: zeros where a row has
        /// no key) and its keys' flags, then closes the thread's group.
        ///
        /// # Safety
        /// The tile's row offsets published before a barrier since; the stage's readers done.
        #[inline(always)]
        unsafe fn issue(&self, tile: u32, tiles: u32) {
            if tile < tiles {
                let stage = tile % self.layout.stages;
                let (keys, values, row_bytes) =
                    (self.layout.keys(stage), self.layout.values(stage), self.layout.row_bytes);
                let (row0, lane) = (thread_index() / Self::THREADS_PER_ROW, thread_index() % Self::THREADS_PER_ROW);
                for i in 0..PASSES as u32 {
                    let row = row0 + i * Self::ROWS_PER_PASS;
                    let offset = load_shared_u64(self.layout.row_offset(tile, row));
                    let present = offset != u64::MAX;
                    for chunk in (lane..row_bytes / 16).step_by(Self::THREADS_PER_ROW as usize) {
                        let at = if present { offset } else { 0 } as usize + 8 * chunk as usize;
                        let (k, v) = ((self.p.k as *const T).wrapping_add(at), (self.p.v as *const T).wrapping_add(at));
                        unsafe {
                            copy_async_16(swizzled(keys, row_bytes, row, 8 * chunk), k as *const u8, present);
                            copy_async_16(swizzled(values, row_bytes, row, 8 * chunk), v as *const u8, present);
                        }
                    }
                    if lane == 0 {
                        store_shared_u32(self.layout.flag(stage, row), present as u32);
                    }
                }
            }
            commit_copies();
        }
    }

    /// A warp's online-softmax state of the block's [`MMA_ROWS`] query heads over its keys, in
    /// the accumulator's layout: this lane's rows `lane / 4` (`[0]`) and `lane / 4 + 8` (`[1]`);
    /// `o[n]` the output's columns `8n + 2 (lane % 4)` and the next, of both rows. `d` is this
    /// lane's share of the sum until [`WarpState::publish`] adds a row's four lanes.
    struct WarpState<const TILES: usize> {
        m: [f32; 2],
        d: [f32; 2],
        o: [[f32; 4]; TILES],
    }

    impl<const TILES: usize> WarpState<TILES> {
        const EMPTY: Self = WarpState { m: [f32::NEG_INFINITY; 2], d: [0.0; 2], o: [[0.0; 4]; TILES] };

        /// Adds this warp's 16 keys of tile `tile`.
        ///
        /// # Safety
        /// The tile's stage filled and its flags written, the block past a barrier since.
        #[inline(always)]
        unsafe fn add_tile<T: Element>(&mut self, p: &DecodeParams, layout: &MmaLayout, tile: u32) {
            let stage = tile % layout.stages;
            let (warp, lane) = (thread_index() / 32, thread_index() % 32);
            let (key0, row_bytes) = (16 * warp, layout.row_bytes);
            // s[j]: keys key0 + 8j + 2 (lane % 4) + e at [e] (row lane / 4) and [2 + e] (row + 8).
            let mut s = [[0.0f32; 4]; 2];
            for step in 0..TILES as u32 / 2 {
                let q_row = lane % 8 + 8 * ((lane / 8) % 2);
                let q = load_tiles::<false>(swizzled(layout.query, row_bytes, q_row, 8 * (2 * step + lane / 16)));
                let k_row = key0 + 8 * (lane / 16) + lane % 8;
                let k = load_tiles::<false>(swizzled(
                    layout.keys(stage),
                    row_bytes,
                    k_row,
                    8 * (2 * step + (lane / 8) % 2),
                ));
                multiply_add::<T>(&mut s[0], q, [k[0], k[1]]);
                multiply_add::<T>(&mut s[1], q, [k[2], k[3]]);
            }
            for (j, scores) in s.iter_mut().enumerate() {
                let first = key0 + 8 * j as u32 + 2 * (lane % 4);
                let present = [0, 1].map(|e| load_shared_u32(layout.flag(stage, first + e)) != 0);
                *scores =
                    core::array::from_fn(|i| if present[i % 2] { score(p, scores[i]) } else { f32::NEG_INFINITY });
            }
            let mut w = [[0.0f32; 4]; 2];
            for row in 0..2 {
                let mine = [s[0][2 * row], s[0][2 * row + 1], s[1][2 * row], s[1][2 * row + 1]];
                let top = quad_max(mine.iter().fold(self.m[row], |a, &b| if b > a { b } else { a }));
                // While every score is −∞, weigh against 0: each weight is then 0, not NaN.
                let base = if top == f32::NEG_INFINITY { 0.0 } else { top };
                let scale = exp2(self.m[row] - base);
                let weights = mine.map(|x| exp2(x - base));
                self.d[row] = mul_add(self.d[row], scale, (weights[0] + weights[1]) + (weights[2] + weights[3]));
                self.m[row] = top;
                for o in self.o.iter_mut() {
                    o[2 * row] *= scale;
                    o[2 * row + 1] *= scale;
                }
                [w[0][2 * row], w[0][2 * row + 1], w[1][2 * row], w[1][2 * row + 1]] = weights;
            }
            // The weights as A fragments of P · V (keys are their columns): each weight the sum
            // of its value in `T` and what that rounding left, in `T` again — and for bf16 once
            // more — so that the products keep f32's precision rather than `T`'s: f16's two
            // terms hold 22 significant bits, bf16's three 24 (two held 16: the partial states
            // then missed the f64 reference's f32 bound by up to 1.11× on an H100).
            let pairs = [(w[0][0], w[0][1]), (w[0][2], w[0][3]), (w[1][0], w[1][1]), (w[1][2], w[1][3])];
            let (high, rest) = split_weights::<T>(pairs);
            let (middle, rest) = split_weights::<T>(rest);
            let third = matches!(T::DTYPE, DType::Bf16);
            let low = split_weights::<T>(rest).0;
            let v_row = key0 + 8 * ((lane / 8) % 2) + lane % 8;
            let (columns, _) = self.o.as_chunks_mut::<2>();
            for (step, [left, right]) in columns.iter_mut().enumerate() {
                let column = 8 * (2 * step as u32 + lane / 16);
                let v = load_tiles::<true>(swizzled(layout.values(stage), row_bytes, v_row, column));
                let mut add = |weights| {
                    multiply_add::<T>(left, weights, [v[0], v[1]]);
                    multiply_add::<T>(right, weights, [v[2], v[3]]);
                };
                add(high);
                add(middle);
                if third {
                    add(low);
                }
            }
        }

        /// Writes the warp's state where [`combine_published`] reads group `warp`'s
        /// ([`MMA_ROWS`] heads a group), its rows' sums completed across their lanes.
        ///
        /// # Safety
        /// No copy in flight into the staging ring, the block past a barrier since its last read.
        #[inline(always)]
        unsafe fn publish(&self, layout: &MmaLayout) {
            let (warp, lane) = (thread_index() / 32, thread_index() % 32);
            let put = |at: u32, x: f32| store_shared_u32(at, x.to_bits());
            for row in 0..2 {
                let d = self.d[row] + shuffle_xor(self.d[row], 1);
                let d = d + shuffle_xor(d, 2);
                let head = lane / 4 + 8 * row as u32;
                let at = layout.epilogue + 4 * (warp * MMA_ROWS + head) * (8 * TILES as u32 + 2);
                if lane % 4 == 0 {
                    put(at, self.m[row]);
                    put(at + 4, d);
                }
                for (n, o) in self.o.iter().enumerate() {
                    let column = 8 * n as u32 + 2 * (lane % 4);
                    put(at + 8 + 4 * column, o[2 * row]);
                    put(at + 12 + 4 * column, o[2 * row + 1]);
                }
            }
        }
    }

    /// Pairs of weights packed into `T` (an mma's A fragment), and what that rounding left.
    #[inline(always)]
    fn split_weights<T: Element>(pairs: [(f32, f32); 4]) -> ([u32; 4], [(f32, f32); 4]) {
        let packed = pairs.map(|(a, b)| T::pack_pair(a, b));
        let mut rest = pairs;
        for (pair, &word) in rest.iter_mut().zip(&packed) {
            *pair = (pair.0 - T::half_to_f32(word, false), pair.1 - T::half_to_f32(word, true));
        }
        (packed, rest)
    }

    /// The largest of a row's four lanes' values in an accumulator (lanes `4r … 4r + 3`).
    #[inline(always)]
    fn quad_max(x: f32) -> f32 {
        let y = shuffle_xor(x, 1);
        let x = if y > x { y } else { x };
        let y = shuffle_xor(x, 2);
        if y > x { y } else { x }
    }

    /// The merge kernel: block `(b, head)` merges request `b`'s partial states of `head` (a
    /// request of several items), a thread a value.
    #[inline(always)]
    pub unsafe fn merge_items<T: Element>(p: &DecodeParams) {
        chain_after_prior_grids();
        let (b, head) = unsafe { (core::arch::nvptx::_block_idx_x() as u32, core::arch::nvptx::_block_idx_y() as u32) };
        let (first, items) = unsafe { items_of(p, b) };
        if items <= 1 {
            return;
        }
        let mut e = thread_index();
        while e < p.head_dim {
            let (o, lse) = unsafe { merged_value(p, (first, items), head, e) };
            unsafe { write_output::<T>(p, (b, head), e, o, lse) };
            e += crate::device::block_size();
        }
    }
}
