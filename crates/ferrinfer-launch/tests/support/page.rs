//! The page family's test cases: appends of their own page geometry, checked against the f64 reference of that geometry.

use super::*;

/// A paged-KV append of its own geometry (the registry's problems are "NHD" pages of
/// `page::PAGE_SIZE` entries): `tokens` tokens dealt round-robin to `sequences` sequences, each
/// holding `prefix` entries before the append; pages of `page_size`, in `layout`; index
/// tensors of `index` (int32 or int64).
#[derive(Clone, Copy, Debug)]
pub struct PagedCase {
    pub tokens: usize,
    pub sequences: usize,
    pub heads: usize,
    pub head_dim: usize,
    pub page_size: usize,
    pub layout: ferrinfer_launch::KvLayout,
    pub index: DType,
    pub prefix: usize,
}

impl PagedCase {
    /// The op's buffers: keys and values of `dtype` from `seed`, caches of every used page
    /// and two spare ones (also from `seed`: what the append leaves must stay), and the page
    /// table — each sequence's pages in reverse order of the cache's.
    pub fn buffers(&self, dtype: DType, seed: u64) -> Vec<Buffer> {
        let (s, ps) = (self.sequences, self.page_size);
        let appended = |b: usize| (self.tokens + s - 1 - b) / s;
        let lengths: Vec<usize> = (0..s).map(|b| self.prefix + appended(b)).collect();
        let pages: Vec<usize> = lengths.iter().map(|l| l.div_ceil(ps)).collect();
        let used: usize = pages.iter().sum();
        let cache_pages = used + 2;
        let mut bounds = vec![0];
        for p in &pages {
            bounds.push(bounds.last().unwrap() + p);
        }
        let last: Vec<usize> = lengths.iter().zip(&pages).map(|(l, p)| l - p.saturating_sub(1) * ps).collect();
        let index = |values: Vec<usize>| {
            let len = values.len();
            with_host_element!(self.index, T => buffer_of(&values.iter().map(|&v| T::from_f64(v as f64)).collect::<Vec<T>>(), &[len]))
        };
        let rows = [self.tokens, self.heads, self.head_dim];
        let cache_shape = match self.layout {
            ferrinfer_launch::KvLayout::Nhd => [cache_pages, ps, self.heads, self.head_dim],
            ferrinfer_launch::KvLayout::Hnd => [cache_pages, self.heads, ps, self.head_dim],
        };
        let values = |shape: &[usize], seed: u64| {
            let len = shape.iter().product();
            with_host_element!(dtype, T => buffer_of(&reference::random_normal::<T>(len, seed), shape))
        };
        vec![
            values(&rows, seed),
            values(&rows, seed + 1),
            index((0..self.tokens).map(|i| i % s).collect()),
            index((0..self.tokens).map(|i| self.prefix + i / s).collect()),
            values(&cache_shape, seed + 2),
            values(&cache_shape, seed + 3),
            index((0..used).map(|u| cache_pages - 1 - u).collect()),
            index(bounds),
            index(last),
        ]
    }

    /// Runs the append on `runner` and checks both caches, every element, against the f64
    /// reference of its geometry.
    pub fn run(&self, runner: &impl Runner, dtype: DType, seed: u64) -> Result<(), String> {
        let op = &ferrinfer_launch::append_paged_kv_cache::INFO;
        let label = format!("{self:?} {dtype}");
        let mut buffers = self.buffers(dtype, seed);
        let inputs: Vec<Vec<f64>> = buffers.iter().map(Buffer::values).collect();
        let layout = ferrinfer_launch::scalar::ScalarType::into_scalar(self.layout);
        runner.run(op, &mut buffers, &[layout]).map_err(|e| format!("{label}: {e}"))?;
        let geometry = ferrinfer_launch::page::CacheGeometry {
            heads: self.heads,
            head_dim: self.head_dim,
            page_size: self.page_size,
            layout: self.layout,
        };
        let want = ferrinfer_launch::page::appended(&inputs, geometry);
        for (i, (name, want)) in ["paged_k_cache", "paged_v_cache"].iter().zip(&want).enumerate() {
            reference::compare(dtype, &buffers[4 + i].values(), want).map_err(|e| format!("{label}: `{name}`: {e}"))?;
        }
        Ok(())
    }
}
