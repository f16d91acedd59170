//! The cascade family at layers 1 and 4: the op table, validation, the launch planner, the CPU
//! path and the f64 references. Each op validates its arguments, then runs on the CPU backend or
//! launches the merge kernel of `ferrinfer-kernels/src/cascade.rs` on the caller's stream.
//!
//! An attention state is a pair: values `v` (`[..., head_dim]`, f16, bf16 or f32; FlashInfer's
//! `[seq_len, num_heads, head_dim]`) and their scores `s` (f32, `v`'s shape without `head_dim`:
//! the log-sum-exp of the partition's attention scores, base 2). Rules, checked before anything
//! is written (so on error no output is touched):
//! - every tensor on the stream's device; values of one dtype, scores f32;
//! - values: the last dimension contiguous, leading dimensions collapsible into rows, all of
//!   one shape and one row stride (the kernel reaches the second state by the distance between
//!   the two); scores: `v`'s shape without the last dimension, collapsible into one sequence,
//!   the two states' at one stride; no rows is a no-op;
//! - outputs: writable, disjoint from every input and from each other, or exactly the first
//!   state's tensor (merging into it in place);
//! - addresses need only element alignment: the vector width narrows until every row stride and
//!   address allow it.
//!
//! Every partition empty (both scores −∞) merges to values 0 and score −∞, not NaN.

use ferrinfer_jit::cascade::{CascadeModule, UNROLLED};
use ferrinfer_jit::spec::vector_widths;
use ferrinfer_jit::{CudaArch, JitSpec};
use ferrinfer_kernels::cascade::{MergeParams, merge_row};
use ferrinfer_kernels::element::DType;

use crate::cuda::{self, KernelModule, Launch, Limits, ModuleCache};
use crate::layout::{self, Named};
use crate::op::{Call, FamilyOp, Problem, STACKED_STATES};
use crate::{Error, Stream, TensorView, cpu, logging, tuning};

crate::op_table! { $
    /// The cascade family's ops, one line each (grammar: [`define_ops!`](crate::define_ops)).
    cascade_ops, family cascade;
    /// Merges two attention states of the same queries, FlashInfer's `merge_state`:
    /// `m = max(s_a, s_b)`, `wₓ = 2^(sₓ − m)`, `v_merged = (w_a v_a + w_b v_b) / (w_a + w_b)`,
    /// `s_merged = log₂(w_a + w_b) + m`, in f32. `v_*`: `[..., head_dim]`; `s_*`: f32,
    /// `[...]` (one score a row of `v`).
    fn merge_state(v_a: In[Rows], s_a: In[Batch as f32], v_b: In[Rows], s_b: In[Batch as f32])
        -> v_merged: Out[Rows], s_merged: Out[Batch as f32]
        => CascadeOp::MergeState, reference merge_state_reference;
    /// `merge_state` into the first state, FlashInfer's `merge_state_in_place` (without
    /// its `mask`): `v`, `s` become the merge of themselves with `v_other`, `s_other`.
    fn merge_state_in_place(v: InOut[Rows], s: InOut[Batch as f32], v_other: In[Rows], s_other: In[Batch as f32])
        => CascadeOp::MergeStateInPlace, reference merge_state_in_place_reference;
    /// Merges any number of attention states of the same queries, FlashInfer's
    /// `merge_states`: `v` `[seq, num_states, num_heads…, head_dim]`, `s` f32
    /// `[seq, num_states, num_heads…]` (the heads may be any number of dimensions, or
    /// none) → `v_merged` `[seq, num_heads…, head_dim]`, `s_merged` `[seq, num_heads…]`:
    /// `merge_state`'s arithmetic over every state (no states: values 0, score −∞).
    fn merge_states(v: In[Stacked], s: In[StackedBatch as f32])
        -> v_merged: Out[Rows], s_merged: Out[Batch as f32]
        => CascadeOp::MergeStates, reference merge_states_reference;
}

/// Which op of the family a call is (the table's selectors): all run the one merge kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CascadeOp {
    MergeState,
    MergeStateInPlace,
    MergeStates,
}

impl FamilyOp for CascadeOp {
    fn run(&self, call: &Call) -> Result<(), Error> {
        let forced = layout_override()?;
        let Some(plan) = plan(*self, call)? else { return Ok(()) };
        logging::input_statistics(call);
        match call.stream {
            Stream::Cpu => {
                cpu_rows(plan.dtype, &plan.params);
                Ok(())
            }
            Stream::Cuda(stream) => {
                static MODULES: ModuleCache<CascadeModule> = ModuleCache::new();
                let module = CascadeModule { dtype: plan.dtype };
                let launch = plan.kernel(forced);
                let (vec, unroll, states) = launch.shape;
                let entry = module
                    .entry(vec, unroll, states)
                    .ok_or_else(|| Error::NoEntryPoint { module: format!("{module:?}"), entry: vec as usize })?;
                cuda::launch(stream, &MODULES, module, |limits: &Limits| launch.of_entry(entry, limits))
            }
        }
    }
}

impl KernelModule for CascadeModule {
    fn spec(&self, arch: CudaArch, debug: bool) -> JitSpec {
        CascadeModule::spec(self, arch, debug)
    }
}

/// The arguments of a merge of two states, by role, whichever op names them.
struct TwoStates<'a> {
    /// `(name, view)`: state 0's values and scores, state 1's, the outputs'.
    v: [(&'static str, &'a TensorView<'a>); 3],
    s: [(&'static str, &'a TensorView<'a>); 3],
}

/// A validated call: kernel parameters, values dtype and vector width.
struct Plan {
    params: MergeParams,
    dtype: DType,
    vec: u32,
}

fn plan(op: CascadeOp, call: &Call) -> Result<Option<Plan>, Error> {
    let states = match op {
        CascadeOp::MergeStates => return stacked_plan(call),
        CascadeOp::MergeState => {
            let [v_a, s_a, v_b, s_b, v_merged, s_merged] = call.tensors()?;
            TwoStates {
                v: [("v_a", v_a), ("v_b", v_b), ("v_merged", v_merged)],
                s: [("s_a", s_a), ("s_b", s_b), ("s_merged", s_merged)],
            }
        }
        CascadeOp::MergeStateInPlace => {
            let [v, s, v_other, s_other] = call.tensors()?;
            TwoStates { v: [("v", v), ("v_other", v_other), ("v", v)], s: [("s", s), ("s_other", s_other), ("s", s)] }
        }
    };
    two_states_plan(&states, &call.stream)
}

/// The checks every op makes first, in the order a caller would fix them: the stream's and every
/// tensor's device, alignment, the values' one dtype (the first's), the scores' f32, the outputs
/// (each list's last) writable. The values' dtype.
fn check_tensors(values: &[Named], scores: &[Named], stream: &Stream) -> Result<DType, Error> {
    let (v_name, v) = values[0];
    let dtype = v.dtype();
    layout::check_placement(stream, values.iter().chain(scores).copied())?;
    for &(name, view) in &values[1..] {
        layout::check_dtype(name, view, v_name, dtype)?;
    }
    for &(name, view) in scores {
        if view.dtype() != DType::F32 {
            let expected = "float32 (the states' log-sum-exp scores)".to_owned();
            return Err(Error::UnsupportedDType { argument: name, found: view.dtype().to_string(), expected });
        }
    }
    for &(name, view) in [values.last(), scores.last()].into_iter().flatten() {
        layout::check_writable(name, view)?;
    }
    Ok(dtype)
}

/// Every check, in the order a caller would fix them; `None` when there is nothing to compute.
fn two_states_plan(states: &TwoStates, stream: &Stream) -> Result<Option<Plan>, Error> {
    let [(v_name, v), (other_name, v_other), (v_out_name, v_out)] = states.v;
    let [(s_name, s), (s_other_name, s_other), (s_out_name, s_out)] = states.s;
    let dtype = check_tensors(&states.v, &states.s, stream)?;
    let x = layout::bounded_rows(v_name, v, "head_dim")?;
    for (name, view) in [states.v[1], states.v[2]] {
        if view.shape() != v.shape() {
            let expected = format!("{:?} (`{v_name}`'s shape)", v.shape());
            return Err(Error::ShapeMismatch { argument: name, expected, found: view.shape().to_vec() });
        }
    }
    let leading = &v.shape()[..v.shape().len() - 1];
    for (name, view) in states.s {
        if view.shape() != leading {
            let expected = format!("{leading:?} (`{v_name}`'s shape without head_dim: one score a row)");
            return Err(Error::ShapeMismatch { argument: name, expected, found: view.shape().to_vec() });
        }
    }
    let other = layout::row_layout(other_name, v_other)?;
    let out = layout::row_layout(v_out_name, v_out)?;
    if x.rows > 1 && other.row_stride != x.row_stride {
        let reason = format!("row stride {}; expected `{v_name}`'s, {}", other.row_stride, x.row_stride);
        return Err(Error::UnsupportedLayout { argument: other_name, reason });
    }
    let s_strides = [layout::sequence_stride(s_name, s)?, layout::sequence_stride(s_other_name, s_other)?];
    let s_out_stride = layout::sequence_stride(s_out_name, s_out)?;
    if x.rows > 1 && s_strides[1] != s_strides[0] {
        let reason = format!("stride {}; expected `{s_name}`'s, {}", s_strides[1], s_strides[0]);
        return Err(Error::UnsupportedLayout { argument: s_other_name, reason });
    }
    let inputs = [states.v[0], states.v[1], states.s[0], states.s[1]];
    check_disjoint([states.v[2], states.s[2]], Some([states.v[0], states.s[0]]), &inputs)?;
    if x.rows == 0 {
        return Ok(None);
    }
    let vec = layout::vector_width(
        dtype,
        x.hidden,
        &[x.row_stride, out.row_stride],
        &[v.address(), v_other.address(), v_out.address()],
    );
    // The second state as the first's neighbour: addresses are element-aligned (checked), so
    // their distance is a whole number of elements.
    let distance =
        |a: &TensorView, b: &TensorView, size: usize| (b.address() as i64 - a.address() as i64) / size as i64;
    let params = MergeParams {
        v: v.address(),
        s: s.address(),
        v_out: v_out.address(),
        s_out: s_out.address(),
        rows: x.rows,
        heads: 1,
        v_state_stride: distance(v, v_other, dtype.size()),
        s_state_stride: distance(s, s_other, DType::F32.size()),
        v_strides: [x.row_stride, 0],
        s_strides: [s_strides[0], 0],
        v_out_strides: [out.row_stride, 0],
        s_out_strides: [s_out_stride, 0],
        width: x.hidden as u32,
        states: 2,
        lanes: 1,
        _reserved: 0,
    };
    Ok(Some(Plan { params, dtype, vec }))
}

/// `merge_states`' checks, in the order a caller would fix them; `None` when there is nothing
/// to compute. The states may lie at any distance (`v`'s second stride); the heads' dimensions
/// of each tensor must collapse into one, the outputs' rows too.
fn stacked_plan(call: &Call) -> Result<Option<Plan>, Error> {
    let [v, s, v_out, s_out] = call.tensors()?;
    let (values, scores) = ([("v", v), ("v_merged", v_out)], [("s", s), ("s_merged", s_out)]);
    let dtype = check_tensors(&values, &scores, &call.stream)?;
    let shape = v.shape();
    let n = shape.len();
    if n < 3 {
        let expected = "[seq_len, num_states, num_heads…, head_dim]: at least 3 dimensions".to_owned();
        return Err(Error::ShapeMismatch { argument: "v", expected, found: shape.to_vec() });
    }
    let width = shape[n - 1] as u64;
    layout::check_row_length("v", v, width, "head_dim")?;
    let without_states = |dims: &[i64]| -> Vec<i64> { [dims[0]].iter().chain(&dims[2..]).copied().collect() };
    let expected_shapes = [
        ("s", s, shape[..n - 1].to_vec(), "`v`'s without head_dim: a score a state of a row"),
        ("v_merged", v_out, without_states(shape), "`v`'s without num_states"),
        ("s_merged", s_out, without_states(&shape[..n - 1]), "`v`'s without num_states and head_dim"),
    ];
    for (name, view, expected, what) in expected_shapes {
        if view.shape() != expected {
            let expected = format!("{expected:?} ({what})");
            return Err(Error::ShapeMismatch { argument: name, expected, found: view.shape().to_vec() });
        }
    }
    if width > 1 && v.strides()[n - 1] != 1 {
        return Err(Error::LastDimNotContiguous { argument: "v", stride: v.strides()[n - 1] });
    }
    let (v_seq, v_state) = (outer_stride("v", v, 0)?, outer_stride("v", v, 1)?);
    let (s_seq, s_state) = (outer_stride("s", s, 0)?, outer_stride("s", s, 1)?);
    let (heads, v_head) = layout::collapse("v", &shape[2..n - 1], &v.strides()[2..n - 1])?;
    let (_, s_head) = layout::collapse("s", &s.shape()[2..], &s.strides()[2..])?;
    let out = layout::row_layout("v_merged", v_out)?;
    let s_out_stride = layout::sequence_stride("s_merged", s_out)?;
    check_disjoint([values[1], scores[1]], None, &[values[0], scores[0]])?;
    let rows = shape[0] as u64 * heads;
    if rows == 0 {
        return Ok(None);
    }
    let states = u32::try_from(shape[1]).map_err(|_| Error::TooLarge {
        argument: "v",
        what: "num_states",
        value: shape[1] as u64,
        limit: u32::MAX as u64,
    })?;
    let strides = [v_seq, v_state, v_head, out.row_stride];
    let vec = layout::vector_width(dtype, width, &strides, &[v.address(), v_out.address()]);
    let params = MergeParams {
        v: v.address(),
        s: s.address(),
        v_out: v_out.address(),
        s_out: s_out.address(),
        rows,
        heads: heads.max(1),
        v_state_stride: strides[1] as i64,
        s_state_stride: s_state as i64,
        v_strides: [strides[0], v_head],
        s_strides: [s_seq, s_head],
        v_out_strides: [heads * out.row_stride, out.row_stride],
        s_out_strides: [heads * s_out_stride, s_out_stride],
        width: width as u32,
        states,
        lanes: 1,
        _reserved: 0,
    };
    Ok(Some(Plan { params, dtype, vec }))
}

/// The stride of `view`'s dimension `i` (0 for a dimension of one: never stepped over); never
/// negative.
fn outer_stride(argument: &'static str, view: &TensorView, i: usize) -> Result<u64, Error> {
    match (view.shape()[i], view.strides()[i]) {
        (0 | 1, _) => Ok(0),
        (_, stride) if stride < 0 => Err(Error::UnsupportedLayout {
            argument,
            reason: format!("negative stride {stride}; expected strides ≥ 0"),
        }),
        (_, stride) => Ok(stride as u64),
    }
}

/// Each output apart from every input and from the other output — but where it may merge in
/// place, each output may be exactly its own state 0's tensor (`own`; every thread reads a
/// row's states before writing it).
fn check_disjoint(outputs: [Named; 2], own: Option<[Named; 2]>, inputs: &[Named]) -> Result<(), Error> {
    for (i, (out_name, out)) in outputs.into_iter().enumerate() {
        for &(name, view) in inputs {
            let in_place = own.is_some_and(|own| own[i].0 == name && layout::same_view(out, view));
            if !in_place && layout::overlaps(out, view) {
                return Err(Error::Overlap { argument: out_name, other: name });
            }
        }
    }
    if layout::overlaps(outputs[0].1, outputs[1].1) {
        return Err(Error::Overlap { argument: outputs[1].0, other: outputs[0].0 });
    }
    Ok(())
}

/// Threads a block of the merge kernel.
const BLOCK_THREADS: u32 = 128;
/// Threads on one row at most (a warp: a row's lanes synchronise as one).
const MAX_LANES: u32 = 32;
/// Two states of rows in the widest vectors merge [`UNROLLED`] vectors a lane at once where a
/// row holds this many vectors or more (one at a time they take a whole warp a row): H100 bf16,
/// head_dim 256, 32 and 4096 rows 14 % faster, 65536 the same (docs/perf/cascade.md).
const UNROLL_MIN_ROW_VECTORS: u32 = 32;
/// …or where the call holds this many vectors in all (1024 rows of head_dim 128): below it,
/// 32 and 512 rows of 128 run 14 % and 4–5 % slower unrolled (fewer, longer lanes on a launch
/// that fills no machine); from it 1024 rows 2–3 % faster, 4096 rows 10 % faster from Python
/// (no difference in the Rust bench), 65536 rows 1–4 % (head_dim 64: 1.5–7 %), but head_dim 64
/// at 4096 rows 1.5 % slower. Both thresholds timed in bf16 only: f32 (head_dim 128 is 32
/// vectors of 4) takes the same rule untimed.
const UNROLL_MIN_VECTORS: u64 = 1 << 14;
/// The grid's x dimension at most (CUDA's limit).
const MAX_GRID_X: u64 = (1 << 31) - 1;

tuning::layout_override! {
    /// `FERRINFER_CASCADE_LAYOUT=unroll:lanes:block` (each a number or `*`, the planner's choice):
    /// forces the vectors a lane merges at once where two states merge in the dtype's widest
    /// vectors (1, or 2 = [`UNROLLED`]; other calls go one at a time), the threads on a row (a
    /// power of two, 1 to 32; a lane takes every `lanes`-th vector) and the threads a block (a
    /// multiple of 32 to 1024) — knobs for the benchmark, read once. A value outside those makes
    /// every cascade call a configuration error naming the variable.
    pub const LAYOUT_VAR: &str = "FERRINFER_CASCADE_LAYOUT";
    struct LayoutOverride {
        unroll: u32 if |u| u == 1 || u == UNROLLED,
        lanes: u32 if |l| l.is_power_of_two() && l <= MAX_LANES,
        block: Block,
    }
    expected = format!(
        "unroll:lanes:block, each a number or *, unroll 1 or {UNROLLED}, lanes a power of two ≤ {MAX_LANES}, \
         block a multiple of 32 to 1024"
    );
}

/// A planned launch (its entry to be found) and the kernel it needs: vector width, vectors a
/// lane merges at once, states merged ([`CascadeModule::entry`] maps a count without an entry
/// of its own, any but 2, to the any-count entry).
struct MergeLaunch {
    launch: Launch<MergeParams>,
    shape: (u32, u32, u32),
}

impl MergeLaunch {
    /// The launch of `entry`, which `limits` must allow: only a forced block can pass the
    /// entry's most threads (the planner's is 128).
    fn of_entry(self, entry: usize, limits: &Limits) -> Result<Launch<MergeParams>, Error> {
        let (block, most) = (self.launch.block, limits.max_threads(entry));
        if block > most {
            let expected = format!("at most {most}, the most this kernel can have");
            return Err(Error::Config(format!("{LAYOUT_VAR}: a block of {block} threads; expected {expected}")));
        }
        Ok(Launch { entry, ..self.launch })
    }
}

impl Plan {
    /// A row's vectors across up to a warp of lanes, the block's groups on consecutive rows,
    /// a block for every `groups` rows (the kernel strides past 2^31 − 1 of them), two states
    /// in the widest vectors unrolled where [`Plan::unroll`] says; the unroll, the lanes and the
    /// block as `forced` says where it does. Two states merge in their own entry
    /// (`merge_state`'s, and `merge_states`' of two states, with heads or not).
    fn kernel(&self, forced: LayoutOverride) -> MergeLaunch {
        let vectors = (self.params.width / self.vec).max(1);
        let states = self.params.states;
        let widest = vector_widths(self.dtype).next() == Some(self.vec);
        let unroll = if widest && states == 2 { forced.unroll.unwrap_or_else(|| self.unroll(vectors)) } else { 1 };
        let lanes = forced.lanes.unwrap_or_else(|| vectors.div_ceil(unroll).next_power_of_two().min(MAX_LANES));
        let block = forced.block.unwrap_or(BLOCK_THREADS);
        let groups = (block / lanes) as u64;
        let grid_x = self.params.rows.div_ceil(groups).clamp(1, MAX_GRID_X) as u32;
        let params = MergeParams { lanes, ..self.params };
        let launch = Launch { entry: 0, params, grid: (grid_x, 1), block, shared_bytes: 0, cluster: 1 };
        MergeLaunch { launch, shape: (self.vec, unroll, states) }
    }

    /// The planner's unroll of two states in the widest vectors, a row of `vectors` of them.
    fn unroll(&self, vectors: u32) -> u32 {
        let total = self.params.rows.saturating_mul(vectors as u64);
        if vectors >= UNROLL_MIN_ROW_VECTORS || total >= UNROLL_MIN_VECTORS { UNROLLED } else { 1 }
    }
}

/// The CPU backend: the kernels crate's host numerics, rows split across cores.
fn cpu_rows(dtype: DType, params: &MergeParams) {
    ferrinfer_kernels::with_element!(dtype, T => cpu::for_rows(params.rows, params.width as u64, |rows| {
        for row in rows {
            // SAFETY: the launcher validated every pointer, stride and overlap in `params`.
            unsafe { merge_row::<T>(params, row) }
        }
    }));
}

/// The f64 merge of `states` states of `rows` rows of `width`: `(values, scores)`, state `k` of
/// row `r` scored `score(k, r)` with values `value(k, r, i)`.
fn merged(
    (rows, width, states): (usize, usize, usize),
    score: impl Fn(usize, usize) -> f64,
    value: impl Fn(usize, usize, usize) -> f64,
) -> (Vec<f64>, Vec<f64>) {
    let mut values = Vec::with_capacity(rows * width);
    let mut scores = Vec::with_capacity(rows);
    for row in 0..rows {
        let m = (0..states).map(|k| score(k, row)).fold(f64::NEG_INFINITY, f64::max);
        if m == f64::NEG_INFINITY {
            values.extend(std::iter::repeat_n(0.0, width));
            scores.push(m);
            continue;
        }
        let weights: Vec<f64> = (0..states).map(|k| (score(k, row) - m).exp2()).collect();
        let total: f64 = weights.iter().sum();
        values.extend(
            (0..width).map(|i| weights.iter().enumerate().map(|(k, w)| w * value(k, row, i)).sum::<f64>() / total),
        );
        scores.push(total.log2() + m);
    }
    (values, scores)
}

fn merge_state_reference(p: &Problem) -> Vec<Vec<f64>> {
    let t = p.tensors;
    let (rows, width) = (t[1].len(), p.hidden);
    let (values, scores) = merged((rows, width, 2), |k, r| t[2 * k + 1][r], |k, r, i| t[2 * k][r * width + i]);
    vec![values, scores]
}

fn merge_state_in_place_reference(p: &Problem) -> Vec<Vec<f64>> {
    merge_state_reference(p)
}

/// Problems stack [`STACKED_STATES`] states a row (`[T, S, H]` values, `[T, S]` scores).
fn merge_states_reference(p: &Problem) -> Vec<Vec<f64>> {
    let (t, states, width) = (p.tensors, STACKED_STATES, p.hidden);
    let rows = t[1].len() / states;
    let (values, scores) =
        merged((rows, width, states), |k, r| t[1][r * states + k], |k, r, i| t[0][(r * states + k) * width + i]);
    vec![values, scores]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_of(width: u32, vec: u32, rows: u64) -> Plan {
        let params = MergeParams { width, rows, ..merge_params() };
        Plan { params, dtype: DType::Bf16, vec }
    }

    fn merge_params() -> MergeParams {
        MergeParams {
            v: 0,
            s: 0,
            v_out: 0,
            s_out: 0,
            rows: 0,
            heads: 1,
            v_state_stride: 0,
            s_state_stride: 0,
            v_strides: [0; 2],
            s_strides: [0; 2],
            v_out_strides: [0; 2],
            s_out_strides: [0; 2],
            width: 0,
            states: 2,
            lanes: 1,
            _reserved: 0,
        }
    }

    fn launch_of(width: u32, vec: u32, rows: u64) -> Launch<MergeParams> {
        plan_of(width, vec, rows).kernel(LayoutOverride::default()).launch
    }

    #[test]
    fn a_row_takes_a_warp_at_most_and_a_block_takes_the_rest_in_rows() {
        let launch = launch_of(128, 8, 32 * 16);
        assert_eq!((launch.params.lanes, launch.block), (16, 128), "head_dim 128 bf16: 16 vectors, 8 rows a block");
        assert_eq!(launch.grid, (64, 1), "512 rows / 8 a block");
        assert_eq!(launch_of(1000, 8, 3).params.lanes, 32, "125 vectors: a warp, 4 each");
        assert_eq!(launch_of(6, 2, 5).params.lanes, 4, "3 vectors: 4 lanes, one idle");
        assert_eq!(launch_of(6, 2, 5).grid, (1, 1));
        assert_eq!(launch_of(128, 8, u64::MAX / 2).grid, ((1 << 31) - 1, 1), "past 2^31 − 1 blocks: strides");
    }

    #[test]
    fn two_states_take_their_entry_with_heads_or_not() {
        let plan = plan_of(128, 8, 64);
        assert_eq!(plan.kernel(LayoutOverride::default()).shape, (8, 1, 2));
        let heads = Plan { params: MergeParams { heads: 32, ..plan.params }, ..plan };
        assert_eq!(heads.kernel(LayoutOverride::default()).shape, (8, 1, 2), "heads: the same entry");
    }

    #[test]
    fn the_planner_unrolls_two_states_on_rows_of_a_warps_vectors_or_calls_of_many_vectors() {
        let unroll = |width, vec, rows| plan_of(width, vec, rows).kernel(LayoutOverride::default()).shape.1;
        assert_eq!(unroll(256, 8, 32), 2, "head_dim 256 bf16: 32 vectors a row");
        assert_eq!(unroll(128, 8, 32), 1, "head_dim 128, 32 rows: 512 vectors");
        assert_eq!(unroll(128, 8, 1023), 1, "one row short of 2^14 vectors");
        assert_eq!(unroll(128, 8, 1024), 2, "2^14 vectors");
        assert_eq!(unroll(64, 8, 2048), 2, "head_dim 64: 8 vectors a row, 2^14 in all");
        assert_eq!(unroll(64, 8, 2047), 1);
        assert_eq!(unroll(512, 4, 1 << 20), 1, "not the widest vectors: one at a time");
        let launch = launch_of(128, 8, 32 * 16384);
        assert_eq!((launch.params.lanes, launch.grid), (8, (32_768, 1)), "16 vectors 2 a lane: 16 rows a block");
        let forced = LayoutOverride { unroll: Some(1), ..LayoutOverride::default() };
        assert_eq!(plan_of(256, 8, 32).kernel(forced).shape.1, 1, "forced one at a time");
    }

    #[test]
    fn a_forced_unroll_halves_the_lanes_of_two_states_in_the_widest_vectors_only() {
        let forced = LayoutOverride { unroll: Some(2), ..LayoutOverride::default() };
        let unrolled = plan_of(128, 8, 64).kernel(forced);
        assert_eq!((unrolled.shape, unrolled.launch.params.lanes), ((8, 2, 2), 8), "16 vectors, 2 a lane");
        assert_eq!(plan_of(6, 2, 5).kernel(forced).shape, (2, 1, 2), "4-byte vectors: one at a time");
        let three = Plan { params: MergeParams { states: 3, ..plan_of(128, 8, 64).params }, ..plan_of(128, 8, 64) };
        assert_eq!(three.kernel(forced).shape, (8, 1, 3), "any count: one at a time");
        let lanes = LayoutOverride { lanes: Some(4), block: Some(256), ..LayoutOverride::default() };
        let launch = plan_of(128, 8, 64).kernel(lanes).launch;
        assert_eq!((launch.params.lanes, launch.block, launch.grid.0), (4, 256, 1), "64 rows of 4 lanes: a block");
    }

    #[test]
    fn the_layout_override_takes_an_unroll_of_1_or_2_lanes_a_power_of_two_and_a_block() {
        assert_eq!(parse_layout("2:8"), Some(LayoutOverride { unroll: Some(2), lanes: Some(8), block: None }));
        assert_eq!(parse_layout("*:*:512"), Some(LayoutOverride { block: Some(512), ..LayoutOverride::default() }));
        for bad in ["3", "0", "*:3", "*:64", "*:0", "1:2:3", "1:2:64:1"] {
            assert_eq!(parse_layout(bad), None, "{bad}");
        }
    }
}
