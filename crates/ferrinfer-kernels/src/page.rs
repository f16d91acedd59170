//! The page family: appending keys and values to a paged KV cache, FlashInfer's
//! `append_paged_kv_cache`. Appended token `i` belongs to sequence `b = batch_indices[i]` at
//! position `positions[i]` of it; the sequence's pages are `kv_indices[kv_indptr[b]..kv_indptr[b
//! + 1]]`, so the token's entry is
//!
//! `page_iter, entry = divmod(kv_indptr[b] · page_size + positions[i], page_size)`,
//! `page = kv_indices[page_iter]`,
//!
//! and each of its heads' key and value rows is copied there, bit for bit (FlashInfer's
//! arithmetic: a position past the sequence's pages reaches the next sequence's). Where an entry
//! lies inside a page (its heads and entries in either order: "NHD" or "HND") is the caches'
//! strides.
//!
//! FlashInfer's `get_batch_indices_positions` gives each appended token its sequence and position
//! from the sequences' bounds and lengths ([`sequence_and_position`]).
//!
//! Parameter structs shared with the host, the per-token functions (the device kernels and the
//! CPU backend run the same ones) and two device kernels: the append, generic over the element
//! type, the index type and the vector width; the positions, over the index type.

use crate::element::Element;
use crate::vector::{Index, Kept, Once, Packed, Store};

/// Arguments of the append kernel, passed by value. Keys and values `[tokens, heads, width]`,
/// addressed by `[token, head]` strides; caches by `[page, entry, head]` strides (all in
/// elements, the last dimension contiguous). Index arrays by their own strides.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct AppendParams {
    pub key: u64,
    pub value: u64,
    pub k_cache: u64,
    pub v_cache: u64,
    pub batch_indices: u64,
    pub positions: u64,
    pub kv_indices: u64,
    pub kv_indptr: u64,
    /// Tokens appended (`nnz`).
    pub tokens: u64,
    /// Sequences (`kv_indptr` holds one more bound).
    pub sequences: u64,
    /// Entries of `kv_indices`.
    pub page_ids: u64,
    /// Pages of each cache.
    pub pages: u64,
    pub key_strides: [u64; 2],
    pub value_strides: [u64; 2],
    pub k_cache_strides: [u64; 3],
    pub v_cache_strides: [u64; 3],
    /// Strides of `batch_indices`, `positions`, `kv_indices`, `kv_indptr`.
    pub index_strides: [u64; 4],
    /// Heads a token.
    pub heads: u32,
    /// Values a head (`head_dim`).
    pub width: u32,
    pub page_size: u32,
    /// The store policy, the launcher's choice by the call's size: nonzero, the entries are
    /// stored evicted first (`vector::Evicted`, an append larger than L2); zero, as usual
    /// (`vector::Kept`).
    pub streams: u32,
}

/// Token `token`'s cache page and entry, or `None` where its page table leads outside the cache
/// (a sequence, page or position out of range: nothing is written for it).
///
/// # Safety
/// `p`'s index arrays readable at every index below their counts, and `token < p.tokens`.
#[inline(always)]
pub unsafe fn entry_of<I: Index>(p: &AppendParams, token: u64) -> Option<(u64, u64)> {
    let [batch_stride, position_stride, ids_stride, bounds_stride] = p.index_strides;
    let (sequence, position) =
        unsafe { (I::read(p.batch_indices, token, batch_stride), I::read(p.positions, token, position_stride)) };
    if sequence < 0 || sequence as u64 >= p.sequences || position < 0 {
        return None;
    }
    let first = unsafe { I::read(p.kv_indptr, sequence as u64, bounds_stride) };
    // Positions below 2^32 divide in 32 bits (a 64-bit division is a subroutine on the GPU); a
    // non-zero divisor (the launcher's guarantee) divides without a panic path.
    let page_size = core::num::NonZeroU32::new(p.page_size).unwrap_or(core::num::NonZeroU32::MIN);
    let (within, entry) = match u32::try_from(position) {
        Ok(position) => ((position / page_size) as u64, (position % page_size) as u64),
        Err(_) => {
            let page_size = core::num::NonZeroU64::from(page_size);
            (position as u64 / page_size, position as u64 % page_size)
        }
    };
    let page_iter = (first as u64).wrapping_add(within);
    if first < 0 || page_iter >= p.page_ids {
        return None;
    }
    let page = unsafe { I::read(p.kv_indices, page_iter, ids_stride) };
    if page < 0 || page as u64 >= p.pages {
        return None;
    }
    Some((page as u64, entry))
}

/// Element offset of `(page, entry, head)` in a cache of `strides`.
#[inline(always)]
fn cache_offset(strides: [u64; 3], (page, entry): (u64, u64), head: u64) -> usize {
    (page * strides[0] + entry * strides[1] + head * strides[2]) as usize
}

/// The key's and value's `VEC` values at `column` of token `token`'s head `head`, where `live`
/// (else zeros, unread).
///
/// # Safety
/// `p` as the launcher validated it; `column + VEC ≤ width`, aligned to `VEC` elements; where
/// `live`, `token < p.tokens`.
#[inline(always)]
pub unsafe fn load_vectors<T: Element, const VEC: usize>(
    p: &AppendParams,
    (token, head, column): (u64, u64, usize),
    live: bool,
) -> [Packed<T, VEC>; 2] {
    let row = |base: u64, strides: [u64; 2]| {
        (base as *const T).wrapping_add((token * strides[0] + head * strides[1]) as usize + column)
    };
    unsafe {
        [
            Packed::<T, VEC>::load_if::<Once>(live, row(p.key, p.key_strides)),
            Packed::<T, VEC>::load_if::<Once>(live, row(p.value, p.value_strides)),
        ]
    }
}

/// Stores [`load_vectors`]' pair at head `head`, `column` of cache entry `entry`, where there is
/// one, as `S` stores.
///
/// # Safety
/// As [`load_vectors`]; `entry` from [`entry_of`].
#[inline(always)]
pub unsafe fn store_vectors<T: Element, S: Store, const VEC: usize>(
    p: &AppendParams,
    [key, value]: [Packed<T, VEC>; 2],
    (head, column): (u64, usize),
    entry: Option<(u64, u64)>,
) {
    let (write, at) = (entry.is_some(), entry.unwrap_or((0, 0)));
    let k_at = (p.k_cache as *mut T).wrapping_add(cache_offset(p.k_cache_strides, at, head) + column);
    let v_at = (p.v_cache as *mut T).wrapping_add(cache_offset(p.v_cache_strides, at, head) + column);
    unsafe {
        key.store_if::<S>(write, k_at);
        value.store_if::<S>(write, v_at);
    }
}

/// The CPU backend's append of token `token`: every head, a value at a time.
///
/// # Safety
/// `p` as the launcher validated it, `token < p.tokens`.
pub unsafe fn append_token<T: Element, I: Index>(p: &AppendParams, token: u64) {
    let entry = unsafe { entry_of::<I>(p, token) };
    for head in 0..p.heads as u64 {
        for column in 0..p.width as usize {
            unsafe {
                let pair = load_vectors::<T, 1>(p, (token, head, column), true);
                store_vectors::<T, Kept, 1>(p, pair, (head, column), entry);
            }
        }
    }
}

/// Arguments of the kernel behind FlashInfer's `get_batch_indices_positions`: for each of `nnz`
/// appended tokens, its sequence and its position in it, from the sequences' bounds in the
/// appended tokens (`append_indptr`) and their lengths after the append (`seq_lens`).
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct PositionsParams {
    pub append_indptr: u64,
    pub seq_lens: u64,
    /// int32 outputs, `nnz` each.
    pub batch_indices: u64,
    pub positions: u64,
    /// Sequences (`append_indptr` holds one more bound).
    pub sequences: u64,
    pub nnz: u64,
    /// Strides of `append_indptr`, `seq_lens`, `batch_indices`, `positions`.
    pub strides: [u64; 4],
}

/// Token `i`'s `(sequence, position)`: `b` the last sequence whose first token `append_indptr[b]`
/// is at most `i` (a binary search of the bounds), the position `seq_lens[b] − (append_indptr[b
/// + 1] − append_indptr[b]) + (i − append_indptr[b])` (FlashInfer's arithmetic, wrapped to 32
/// bits as its int32 outputs); `(−1, −1)` for a token before the first bound or past the last
/// (a `nnz` larger than the tokens the bounds hold).
///
/// # Safety
/// `p`'s inputs readable at every index below their lengths.
#[inline(always)]
pub unsafe fn sequence_and_position<I: Index>(p: &PositionsParams, i: u64) -> (i32, i32) {
    let bound = |b: u64| unsafe { I::read(p.append_indptr, b, p.strides[0]) };
    let i = i as i64;
    if i < bound(0) || i >= bound(p.sequences) {
        return (-1, -1);
    }
    // bound(low) ≤ i < bound(high): narrowed to adjacent bounds.
    let (mut low, mut high) = (0u64, p.sequences);
    while high - low > 1 {
        let middle = low + (high - low) / 2;
        if bound(middle) <= i {
            low = middle;
        } else {
            high = middle;
        }
    }
    let (first, end) = (bound(low), bound(low + 1));
    let length = unsafe { I::read(p.seq_lens, low, p.strides[1]) };
    (low as i32, length.wrapping_sub(end - first).wrapping_add(i - first) as i32)
}

/// Writes token `i`'s [`sequence_and_position`].
///
/// # Safety
/// As [`sequence_and_position`]; `i < p.nnz`, the outputs writable there.
#[inline(always)]
pub unsafe fn write_sequence_and_position<I: Index>(p: &PositionsParams, i: u64) {
    let (sequence, position) = unsafe { sequence_and_position::<I>(p, i) };
    // Each integer's bits as one 32-bit word (no float conversion); two calls, not a loop over
    // an array of the two (which the device kept in local memory).
    let store = |base: u64, stride: u64, value: i32| {
        let at = (base as *mut f32).wrapping_add((i * stride) as usize);
        unsafe { Packed::<f32, 1>::ZERO.map_words(|_| value as u32).store::<Kept>(at) };
    };
    store(p.batch_indices, p.strides[2], sequence);
    store(p.positions, p.strides[3], position);
}

#[cfg(target_arch = "nvptx64")]
pub use device_kernels::{append_rows, batch_indices_positions};

#[cfg(target_arch = "nvptx64")]
mod device_kernels {
    use core::num::{NonZeroU32, NonZeroU64};

    use super::*;
    use crate::device::{block_index, block_size, chain_after_prior_grids, grid_size, thread_index};
    use crate::vector::Evicted;

    /// Vectors a thread copies in one step: every one's loads in flight before any store.
    const STEP: usize = 2;

    /// The device kernel. The work is `tokens × heads · width / VEC` vectors, a token's
    /// consecutive (so a warp's loads and stores are runs of consecutive vectors), dealt to the
    /// grid's threads in turn: thread `g` copies vectors `g`, `g + threads`, … ([`STEP`] a
    /// step). Launcher's guarantees: `width`, every row stride and pointer multiples of `VEC`
    /// elements, `heads · width / VEC ≥ 1`. The store policy (`p.streams`) picks one of two
    /// copies of the loop, as the activation kernel's does.
    #[inline(always)]
    pub unsafe fn append_rows<T: Element, I: Index, const VEC: usize>(p: &AppendParams) {
        chain_after_prior_grids();
        // Set up once, outside the two copies: inside, each copy kept its own divisions.
        let walk = Walk::of_thread(p, VEC as u32);
        match p.streams {
            0 => unsafe { append_with::<T, I, Kept, VEC>(p, &walk) },
            _ => unsafe { append_with::<T, I, Evicted, VEC>(p, &walk) },
        }
    }

    /// A thread's walk over the vectors, each a (token, vector of the token) pair: the first
    /// divided once, the next ones stepped from it by adding the grid's own pair with a carry.
    struct Walk {
        /// Vectors a head's row (non-zero: the launcher's guarantee, so no panic path).
        vectors: NonZeroU32,
        /// Vectors a token, ≥ 1.
        per_token: u64,
        /// The grid's threads as (tokens, vectors).
        step: (u64, u64),
        first: (u64, u64),
    }

    impl Walk {
        #[inline(always)]
        fn of_thread(p: &AppendParams, vec: u32) -> Self {
            let vectors = NonZeroU32::new(p.width / vec).unwrap_or(NonZeroU32::MIN);
            let per_token = NonZeroU64::new(p.heads as u64 * vectors.get() as u64).unwrap_or(NonZeroU64::MIN);
            let threads = grid_size() as u64 * block_size() as u64;
            let first = block_index() as u64 * block_size() as u64 + thread_index() as u64;
            Walk {
                vectors,
                per_token: per_token.get(),
                step: (threads / per_token, threads % per_token),
                first: (first / per_token, first % per_token),
            }
        }

        #[inline(always)]
        fn advance(&self, (token, unit): (u64, u64)) -> (u64, u64) {
            match unit + self.step.1 {
                next if next >= self.per_token => (token + self.step.0 + 1, next - self.per_token),
                next => (token + self.step.0, next),
            }
        }

        /// Vector `unit` of a token as (head, first element of the head's row).
        #[inline(always)]
        fn place(&self, unit: u64, vec: usize) -> (u64, usize) {
            let unit = unit as u32;
            ((unit / self.vectors) as u64, (unit % self.vectors) as usize * vec)
        }
    }

    #[inline(always)]
    unsafe fn append_with<T: Element, I: Index, S: Store, const VEC: usize>(p: &AppendParams, walk: &Walk) {
        let mut at = walk.first;
        while at.0 < p.tokens {
            let mut work = [at; STEP];
            for s in 1..STEP {
                work[s] = walk.advance(work[s - 1]);
            }
            let place = work.map(|(token, unit)| {
                let (head, column) = walk.place(unit, VEC);
                (token, head, column)
            });
            // Every vector's loads before any page table is read: the loads do not wait on the
            // table's chain of dependent reads.
            let rows = place.map(|(token, head, column)| unsafe {
                load_vectors::<T, VEC>(p, (token, head, column), token < p.tokens)
            });
            let entries =
                place.map(|(token, _, _)| if token < p.tokens { unsafe { entry_of::<I>(p, token) } } else { None });
            for s in 0..STEP {
                let (_, head, column) = place[s];
                unsafe { store_vectors::<T, S, VEC>(p, rows[s], (head, column), entries[s]) };
            }
            at = walk.advance(work[STEP - 1]);
        }
    }

    /// The device kernel of `get_batch_indices_positions`: a token a thread, the grid (x)
    /// striding over the rest.
    #[inline(always)]
    pub unsafe fn batch_indices_positions<I: Index>(p: &PositionsParams) {
        chain_after_prior_grids();
        let threads = grid_size() as u64 * block_size() as u64;
        let mut i = block_index() as u64 * block_size() as u64 + thread_index() as u64;
        while i < p.nnz {
            unsafe { write_sequence_and_position::<I>(p, i) };
            i += threads;
        }
    }
}
