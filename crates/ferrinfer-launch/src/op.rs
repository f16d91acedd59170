//! The op registry, family-agnostic: every op of every family is described once, by one line of
//! its family's table (an "X-macro" such as [`norm_ops!`](crate::norm_ops), in the family's own
//! file), and everything that repeats per op is derived from that line:
//! - here, by [`define_ops!`](crate::define_ops): the public Rust function (`rmsnorm(input,
//!   weight, out, eps, stream)`), its [`OpInfo`] (names, roles and shapes of its arguments, the
//!   scalars' defaults, how to run it, its f64 reference) and the family's `OPS` list;
//! - by the adapters (`ferrinfer-ffi`), which pass their own macro to the same table (candle ops,
//!   tch functions) or read [`ops()`](crate::ops) at run time (the Python module);
//! - by the benchmark and the tests, which walk [`ops()`](crate::ops): buffers, calls and
//!   reference checks for any op, with no per-op code.
//!
//! A family supplies the table, a selector type implementing [`FamilyOp`] (what the table's
//! `=> expression` builds) and reference functions. Nothing in this file names a family.

use ferrinfer_kernels::element::DType;

use crate::{Error, Stream, TensorView, logging};

/// How an op uses a tensor argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Read only.
    In,
    /// Written only: a new output (adapters allocate it when the caller passes none).
    Out,
    /// Read and written in place.
    InOut,
}

/// A tensor argument's shape for a problem of `T` rows of `H`, as the benchmark, the tests and
/// adapters that allocate outputs make it; calls take any leading dimensions (see each family).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Extent {
    /// `[T, H]`.
    Rows,
    /// `[H]` (a weight).
    Row,
    /// `[T, 2H]` (a gated activation's input).
    DoubleRows,
    /// `[T]`: one value a row (a sampled token).
    Batch,
    /// `[T, S, H]`: `S` rows of `H` for each row, stacked on the second dimension (the states of
    /// `merge_states`; in a call `[seq, S, heads…, H]`). Problems stack [`STACKED_STATES`].
    Stacked,
    /// `[T, S]`: one value for each of `Stacked`'s rows (their scores; `[seq, S, heads…]`).
    StackedBatch,
    /// `[T, QH, H]`: [`QUERY_HEADS`] heads of `H` a row (rope's queries; calls take any number).
    Heads,
    /// `[T, KH, H]`: [`KV_HEADS`] heads of `H` a row (rope's keys, fewer than the queries').
    KvHeads,
    /// `[S + 1]`: where each of [`SEGMENTS`] segments of the rows starts, and the last ends
    /// (FlashInfer's ragged `indptr`; calls take any number of segments).
    SegmentBounds,
    /// `[S]`: one value a segment (rope's `offsets`).
    Segments,
    /// `[T, QH · H]`: [`Heads`](Extent::Heads) flattened, the heads side by side in one
    /// dimension (vLLM's queries; calls take any number of heads of the op's head size).
    FlatHeads,
    /// `[T, KH · H]`: [`KvHeads`](Extent::KvHeads) flattened.
    FlatKvHeads,
    /// `[P, H]`: a row of `H` values for each of [`TABLE_ROWS`] positions (rope's `cos_sin_cache`;
    /// calls take any number of rows). The rows a problem reads are those its
    /// [`Domain::TableRows`] input names: at most one a row of the problem (see [`Extent::touched`]).
    Table,
    /// `[P, PAGE_SIZE, KH, H]`: a paged cache of [`KV_HEADS`] heads of `H` ([`PAGE_SIZE`] entries
    /// a page, "NHD"), into which an op writes one entry a row of the problem; its problems hold
    /// [`page_table`]'s pages and one spare page no row reaches. Calls take any page size, page
    /// count and layout (the op's).
    Pages,
    /// `[U]`: the cache page of each page the problem's [`SEGMENTS`] sequences use, in order
    /// (FlashInfer's `kv_indices`: [`page_table`]).
    PageIds,
    /// `[N]`: a value for each of `N` items, `N` the op's scalar whose example is the problem's
    /// rows (`nnz: i32 (example rows)`: [`OpInfo::count`]); `[T]` in the problems.
    Count,
}

/// The entries a page of [`Extent::Pages`] holds in the problems the benchmark and the tests make.
pub const PAGE_SIZE: usize = 16;

/// The page table of a problem of `rows` rows appended to a paged cache ([`Extent::Pages`]):
/// row `i` belongs to sequence `i mod SEGMENTS` at position `i / SEGMENTS` (so every sequence's
/// rows hold its first positions, and a sequence may have none), each sequence owns the fewest
/// pages of [`PAGE_SIZE`] entries that hold them, sequence by sequence, and page `u` of that order is cache
/// page `U − u` (pages out of order, cache page 0 spare). Returns each sequence's row count.
pub fn page_table(rows: usize) -> [usize; SEGMENTS] {
    std::array::from_fn(|b| (rows + SEGMENTS - 1 - b) / SEGMENTS)
}

/// The pages each sequence of [`page_table`] owns.
fn pages_of(rows: usize) -> [usize; SEGMENTS] {
    page_table(rows).map(|n| n.div_ceil(PAGE_SIZE))
}

/// The rows of [`Extent::Table`] in the problems the benchmark and the tests make.
pub const TABLE_ROWS: usize = 8192;

/// The segments of [`Extent::SegmentBounds`] in the problems the benchmark and the tests make
/// (their rows split at random, empty segments included).
pub const SEGMENTS: usize = 3;

/// The heads of [`Extent::Heads`] and [`Extent::KvHeads`] in the problems the benchmark and the
/// tests make: a grouped-query layer's 32 query heads and 8 key heads.
pub const QUERY_HEADS: usize = 32;
pub const KV_HEADS: usize = 8;

/// The `S` of [`Extent::Stacked`] in the problems the benchmark and the tests make (and their
/// references assume); calls take any number.
pub const STACKED_STATES: usize = 3;

impl Extent {
    /// The argument's shape in a problem of `rows` rows of `hidden`.
    pub fn shape(self, rows: usize, hidden: usize) -> Vec<usize> {
        match self {
            Extent::Rows => vec![rows, hidden],
            Extent::Row => vec![hidden],
            Extent::DoubleRows => vec![rows, 2 * hidden],
            Extent::Batch => vec![rows],
            Extent::Stacked => vec![rows, STACKED_STATES, hidden],
            Extent::StackedBatch => vec![rows, STACKED_STATES],
            Extent::Heads => vec![rows, QUERY_HEADS, hidden],
            Extent::KvHeads => vec![rows, KV_HEADS, hidden],
            Extent::SegmentBounds => vec![SEGMENTS + 1],
            Extent::Segments => vec![SEGMENTS],
            Extent::FlatHeads => vec![rows, QUERY_HEADS * hidden],
            Extent::FlatKvHeads => vec![rows, KV_HEADS * hidden],
            Extent::Table => vec![TABLE_ROWS, hidden],
            Extent::Pages => vec![pages_of(rows).iter().sum::<usize>() + 1, PAGE_SIZE, KV_HEADS, hidden],
            Extent::PageIds => vec![pages_of(rows).iter().sum()],
            Extent::Count => vec![rows],
        }
    }

    /// The elements of the argument a problem of `rows` rows of `hidden` reads or writes at most:
    /// all of its [`shape`](Extent::shape), but for a table only the rows its rows look up.
    /// What the benchmark counts as bytes moved.
    pub fn touched(self, rows: usize, hidden: usize) -> usize {
        match self {
            Extent::Table => rows.min(TABLE_ROWS) * hidden,
            Extent::Pages => rows * KV_HEADS * hidden,
            _ => self.shape(rows, hidden).iter().product(),
        }
    }

    /// Whether an in-out argument of this extent is read as well as written: not a paged
    /// cache, into which an op only writes (entries appended). The benchmark counts the
    /// [`touched`](Extent::touched) bytes of one that is twice.
    pub fn read_in_place(self) -> bool {
        self != Extent::Pages
    }

    /// The shape of a new output of this extent, made for a call whose inputs (`(extent,
    /// shape)` each, in argument order) are `inputs`: the shape of the first input of the same
    /// extent (rope's `k_rope` like `k`), else from the first tensor's — its row dimensions (its
    /// states dimension dropped) and, for a row output, the row length. What adapters allocate
    /// when the caller passes no output; the op's own checks judge the shapes it is then given.
    pub fn output_shape(self, inputs: &[(Extent, &[i64])]) -> Vec<i64> {
        if let Some((_, shape)) = inputs.iter().find(|(extent, _)| *extent == self) {
            return shape.to_vec();
        }
        let Some(&(first, first_shape)) = inputs.first() else { return Vec::new() };
        let mut leading = first_shape.to_vec();
        let last = match first {
            Extent::Batch | Extent::StackedBatch => None,
            _ => leading.pop(),
        };
        if matches!(first, Extent::Stacked | Extent::StackedBatch) && leading.len() >= 2 {
            leading.remove(1);
        }
        let hidden = last.map(|h| if first == Extent::DoubleRows { h / 2 } else { h });
        match (self, hidden) {
            (Extent::Rows, Some(h)) => leading.into_iter().chain([h]).collect(),
            (Extent::DoubleRows, Some(h)) => leading.into_iter().chain([2 * h]).collect(),
            (Extent::Row, Some(h)) => vec![h],
            (Extent::Batch, _) => leading,
            _ => first_shape.to_vec(),
        }
    }
}

/// Which dtype a tensor argument may have, relative to the op's first tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DTypeRule {
    /// The first tensor's.
    Same,
    /// The first tensor's, or f32 (layernorm's γ/β with f16/bf16 input).
    SameOrF32,
    /// f32 whatever the first tensor's (softmax's probabilities).
    F32,
    /// i32 whatever the first tensor's (sampled tokens).
    I32,
    /// int32 or int64 whatever the first tensor's (rope's positions); int64 where the call
    /// takes the wider type (`wide`).
    Index,
}

impl DTypeRule {
    /// The dtype an argument has by this rule when the first tensor's is `first` and the call
    /// takes f32 wherever the rule allows it (`wide`).
    pub fn dtype(self, first: DType, wide: bool) -> DType {
        match self {
            DTypeRule::Same => first,
            DTypeRule::SameOrF32 if wide => DType::F32,
            DTypeRule::SameOrF32 => first,
            DTypeRule::F32 => DType::F32,
            DTypeRule::I32 => DType::I32,
            DTypeRule::Index if wide => DType::I64,
            DTypeRule::Index => DType::I32,
        }
    }
}

/// What values an input holds by the op's meaning, which the tests and the benchmark draw.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Domain {
    /// Any value: `N(0, 1)`.
    Any,
    /// ≥ 0 (probabilities): `|N(0, 1)|`.
    Nonnegative,
    /// Token positions (integers ≥ 0).
    Positions,
    /// Segment bounds of the problem's rows: from 0 up to the row count, never down.
    SegmentBounds,
    /// Each segment's length after its rows are appended (`seq_lens`): at least the row count,
    /// so at least any segment's rows, whatever the drawn bounds.
    SequenceLengths,
    /// Row indices of the op's [`Extent::Table`]: integers in `[0, TABLE_ROWS)`.
    TableRows,
    /// [`page_table`]'s sequence of each row (`batch_indices`).
    PageSequences,
    /// [`page_table`]'s position of each row in its sequence (`positions`).
    PagePositions,
    /// [`page_table`]'s cache page of each page the sequences use (`kv_indices`).
    PageIds,
    /// [`page_table`]'s bounds of each sequence's pages in `PageIds` (`kv_indptr`).
    PageBounds,
    /// [`page_table`]'s entries used in each sequence's last page (`kv_last_page_len`; 0 for a
    /// sequence of no pages).
    LastPageLengths,
}

impl Domain {
    /// The values of an input of this domain in a problem of `rows` rows when they follow from
    /// `rows` alone ([`page_table`]'s), else `None` (drawn at random).
    pub fn fixed(self, rows: usize) -> Option<Vec<i64>> {
        let (counts, pages) = (page_table(rows), pages_of(rows));
        let count = |n: usize| n as i64;
        Some(match self {
            Domain::PageSequences => (0..rows).map(|i| count(i % SEGMENTS)).collect(),
            Domain::PagePositions => (0..rows).map(|i| count(i / SEGMENTS)).collect(),
            Domain::PageIds => {
                let used: usize = pages.iter().sum();
                (0..used).map(|u| count(used - u)).collect()
            }
            Domain::PageBounds => {
                let ends = pages.iter().scan(0, |end, &p| {
                    *end += count(p);
                    Some(*end)
                });
                [0].into_iter().chain(ends).collect()
            }
            Domain::LastPageLengths => {
                counts.iter().zip(pages).map(|(&n, p)| count(n) - count(p.saturating_sub(1) * PAGE_SIZE)).collect()
            }
            Domain::Any
            | Domain::Nonnegative
            | Domain::Positions
            | Domain::SegmentBounds
            | Domain::SequenceLengths
            | Domain::TableRows => {
                return None;
            }
        })
    }
}

/// One tensor argument of an op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorArg {
    /// As the Rust API and every error name it.
    pub name: &'static str,
    /// Another name FlashInfer's Python API uses for it (layernorm's `gemma`).
    pub alias: Option<&'static str>,
    pub role: Role,
    pub extent: Extent,
    pub dtype: DTypeRule,
    pub domain: Domain,
}

/// A scalar's type in the typed API.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScalarKind {
    F32,
    I32,
    /// A `u64` the family takes below 2^53, where an f64 holds it exactly (`seed`).
    U64,
    /// 0 or 1 in the registry (`interleave`).
    Bool,
    /// `Option<i32>`: NaN in the registry for `None` (rope's `rotary_dim`, None meaning all).
    OptionalI32,
    /// One of these names (a [`Choice`] type in the typed API, a string in Python): its index
    /// in the registry (the page family's `kv_layout`, "NHD" or "HND").
    Choice(&'static [&'static str]),
}

/// A scalar type whose values are named choices (`kv_layout`): the table writes its default
/// as a name (`= "NHD"`), the registry carries its index in [`Choice::NAMES`].
pub trait Choice: Copy {
    /// Every value's name, by index.
    const NAMES: &'static [&'static str];
    /// The value of index `index`, if there is one.
    fn from_index(index: f64) -> Option<Self>;
}

/// The index of `name` in `names`: a table's default choice, at compile time (a name not there
/// fails the build).
#[doc(hidden)]
pub const fn choice_index(names: &[&str], name: &str) -> usize {
    let mut i = 0;
    while i < names.len() {
        let (a, b) = (names[i].as_bytes(), name.as_bytes());
        if a.len() == b.len() {
            let mut j = 0;
            while j < a.len() && a[j] == b[j] {
                j += 1;
            }
            if j == a.len() {
                return i;
            }
        }
        i += 1;
    }
    panic!("a default that is none of its type's names")
}

impl ScalarKind {
    /// Whether a value must be whole.
    pub fn integer(self) -> bool {
        matches!(self, ScalarKind::I32 | ScalarKind::U64 | ScalarKind::OptionalI32 | ScalarKind::Choice(_))
    }

    /// The name of choice `value` (an index), if this is a choice and it has one.
    pub fn choice_name(self, value: f64) -> Option<&'static str> {
        match self {
            ScalarKind::Choice(names) if value >= 0.0 && value.fract() == 0.0 => names.get(value as usize).copied(),
            _ => None,
        }
    }
}

/// What the benchmark and the tests that walk every op pass for a scalar.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Example {
    /// This value: the default, or for a required scalar a typical one.
    Value(f64),
    /// The problem's `H` (`(example hidden)`: rope's `head_size`, which must match the
    /// tensors' shapes).
    Hidden,
    /// The problem's `T` (`(example rows)`: `nnz`, the length of an [`Extent::Count`] output).
    Rows,
}

/// One scalar argument: f32 (`eps`, `temperature`), an integer (`top_k`, `seed`), a bool or an
/// optional integer, with FlashInfer's default where it has one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScalarArg {
    pub name: &'static str,
    pub kind: ScalarKind,
    /// `None`: the caller must give it. An optional scalar's default is NaN (`None`).
    pub default: Option<f64>,
    /// What the benchmark and the tests pass: see [`ScalarArg::example_for`].
    pub example: Example,
    /// May be given a tensor of one value a row instead (`[f32]`, `[i32]` or `[u64]` in the
    /// table: FlashInfer's "tensor or scalar"; [`PerRow`]).
    pub per_row: bool,
}

impl ScalarArg {
    /// The value the benchmark and the tests that walk every op pass in a problem of `rows` rows
    /// of `hidden`.
    pub fn example_for(&self, rows: usize, hidden: usize) -> f64 {
        match self.example {
            Example::Value(value) => value,
            Example::Hidden => hidden as f64,
            Example::Rows => rows as f64,
        }
    }
}

/// A parameter given once for every row, or — for the scalars a table marks `[f32]`, `[i32]` or
/// `[u64]` — as a tensor of one value a row (FlashInfer's "tensor or scalar"): `softmax(&logits,
/// &mut out, 0.7, s)` or `softmax(&logits, &mut out, &temperatures, s)` with `temperatures` a
/// `[rows]` f32 tensor; `top_k_mask_logits(&logits, &mut out, 50, s)` or with a `[rows]` int32
/// tensor; a sampling op's `seed` and `offset` as numbers or int64 tensors (`[rows]`, or `[1]` for
/// every row) read on the device, so that a captured graph draws afresh once they change.
#[derive(Clone, Copy, Debug)]
pub enum PerRow<'a, T> {
    All(T),
    Rows(&'a TensorView<'a>),
}

impl From<f32> for PerRow<'_, f32> {
    fn from(value: f32) -> Self {
        PerRow::All(value)
    }
}

impl From<i32> for PerRow<'_, i32> {
    fn from(value: i32) -> Self {
        PerRow::All(value)
    }
}

impl From<u64> for PerRow<'_, u64> {
    fn from(value: u64) -> Self {
        PerRow::All(value)
    }
}

/// A float literal (`0.7`, an f64 to Rust) for an f32 parameter, rounded to f32 as the kernels take it.
impl From<f64> for PerRow<'_, f32> {
    fn from(value: f64) -> Self {
        PerRow::All(value as f32)
    }
}

impl<'a, T> From<&'a TensorView<'a>> for PerRow<'a, T> {
    fn from(view: &'a TensorView<'a>) -> Self {
        PerRow::Rows(view)
    }
}

/// A scalar's value as the registry carries it: an f64 (exact for f32 and i32; a u64 from 2^53
/// on rounds, and the families that take one refuse it there).
#[doc(hidden)]
pub trait ScalarValue: Copy {
    fn to_f64(self) -> f64;
}

impl ScalarValue for f32 {
    fn to_f64(self) -> f64 {
        self.into()
    }
}

impl ScalarValue for i32 {
    fn to_f64(self) -> f64 {
        self.into()
    }
}

impl ScalarValue for u64 {
    fn to_f64(self) -> f64 {
        self as f64
    }
}

impl ScalarValue for bool {
    fn to_f64(self) -> f64 {
        if self { 1.0 } else { 0.0 }
    }
}

/// `None` is NaN.
impl ScalarValue for Option<i32> {
    fn to_f64(self) -> f64 {
        self.map_or(f64::NAN, f64::from)
    }
}

impl<'a, T: ScalarValue> PerRow<'a, T> {
    /// `(the value, the tensor)`: the value is NaN (never read) when a tensor is given.
    #[doc(hidden)]
    pub fn split(self) -> (f64, Option<&'a TensorView<'a>>) {
        match self {
            PerRow::All(value) => (value.to_f64(), None),
            PerRow::Rows(view) => (f64::NAN, Some(view)),
        }
    }
}

/// A typed call's scalars, `(value, tensor)` each, as the registry takes them: values, then
/// tensors — in arrays, so a call allocates nothing here.
#[doc(hidden)]
pub fn split_scalars<'a, const N: usize>(
    scalars: [(f64, Option<&'a TensorView<'a>>); N],
) -> ([f64; N], [Option<&'a TensorView<'a>>; N]) {
    (scalars.map(|s| s.0), scalars.map(|s| s.1))
}

/// Everything the registry knows of one op.
pub struct OpInfo {
    /// FlashInfer's name.
    pub name: &'static str,
    pub family: &'static str,
    /// The doc comment of its table line.
    pub doc: &'static str,
    /// In call order: inputs (`In`, `InOut`), then outputs (`Out`).
    pub tensors: &'static [TensorArg],
    /// In call order, after the tensors.
    pub scalars: &'static [ScalarArg],
    /// FlashInfer's positional order of the arguments it names, where it differs from the
    /// table's (tensors, scalars, outputs): `apply_rope_with_cos_sin_cache(positions, query, key,
    /// head_size, cos_sin_cache, is_neox)`. Empty: the table's. What the Python module binds
    /// positional arguments by; the rest follow in the table's order.
    pub order: &'static [&'static str],
    #[doc(hidden)]
    pub run: fn(&Call) -> Result<(), Error>,
    #[doc(hidden)]
    pub reference: fn(&Problem) -> Vec<Vec<f64>>,
}

impl std::fmt::Debug for OpInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpInfo").field("name", &self.name).field("family", &self.family).finish_non_exhaustive()
    }
}

/// One call of an op, arguments by position: `tensors` in [`OpInfo::tensors`] order (inputs, then
/// outputs; written ones writable), `scalars` in [`OpInfo::scalars`] order, and for each scalar
/// its tensor of values a row where one was given (`per_row`: empty, or one entry a scalar).
pub struct Call<'c, 'v> {
    pub op: &'static OpInfo,
    pub tensors: &'c [&'c TensorView<'v>],
    pub scalars: &'c [f64],
    pub per_row: &'c [Option<&'c TensorView<'v>>],
    pub stream: Stream<'c>,
}

/// What a family does with a call of one of its ops: the selector of the table line (for norm,
/// which norm) runs it — validation first, nothing written on error.
pub trait FamilyOp {
    fn run(&self, call: &Call) -> Result<(), Error>;
}

/// One op's problem in f64, for its reference: inputs by argument (empty for `Out`), and what the
/// op wrote (so a stage can be checked against the op's own previous stage, as the fused norm's
/// output against the residual it stored).
pub struct Problem<'p> {
    pub dtype: DType,
    /// `H` of the problem (see [`Extent`]).
    pub hidden: usize,
    pub tensors: &'p [Vec<f64>],
    pub written: &'p [Vec<f64>],
    pub scalars: &'p [f64],
}

impl OpInfo {
    /// Runs the op with arguments by position (see [`Call`]); the typed functions and the
    /// adapters all come through here. Checks the argument counts, then logs and runs.
    pub fn call(&'static self, tensors: &[&TensorView], scalars: &[f64], stream: Stream) -> Result<(), Error> {
        self.call_per_row(tensors, scalars, &[], stream)
    }

    /// [`OpInfo::call`] with, for each scalar, the tensor of its values a row where one is given
    /// (`per_row`: empty for none, else one entry a scalar; only scalars marked
    /// [`ScalarArg::per_row`] take one, their value in `scalars` is then ignored).
    pub fn call_per_row(
        &'static self,
        tensors: &[&TensorView],
        scalars: &[f64],
        per_row: &[Option<&TensorView>],
        stream: Stream,
    ) -> Result<(), Error> {
        let per_row_ok = per_row.is_empty() || per_row.len() == scalars.len();
        if tensors.len() != self.tensors.len() || scalars.len() != self.scalars.len() || !per_row_ok {
            return Err(Error::Arity {
                op: self.name,
                expected: (self.tensors.len(), self.scalars.len()),
                found: (tensors.len(), scalars.len().max(per_row.len())),
            });
        }
        if let Some((arg, _)) = self.scalars.iter().zip(per_row).find(|(arg, view)| view.is_some() && !arg.per_row) {
            return Err(Error::NotPerRow { op: self.name, argument: arg.name });
        }
        let call = Call { op: self, tensors, scalars, per_row, stream };
        logging::begin(&call);
        // Every tensor argument is floating point but those a table makes `as i32` (sampled
        // tokens) or `as index` (positions), which must be integers; other integer tensors come
        // only as per-row scalars, which their family checks. So no family dispatches on an
        // integer but by its index type.
        for (arg, view) in self.tensors.iter().zip(tensors) {
            let (ok, expected) = match arg.dtype {
                DTypeRule::I32 => (view.dtype() == DType::I32, "int32"),
                DTypeRule::Index => (matches!(view.dtype(), DType::I32 | DType::I64), "int32 or int64"),
                _ => (view.dtype().is_float(), "f16, bf16 or f32"),
            };
            if !ok {
                let (found, expected) = (view.dtype().to_string(), expected.to_owned());
                return Err(Error::UnsupportedDType { argument: arg.name, found, expected });
            }
        }
        (self.run)(&call)?;
        logging::end(&call);
        Ok(())
    }

    /// The expected values of every written tensor (`Out`, `InOut`, in argument order).
    pub fn reference(&self, problem: &Problem) -> Vec<Vec<f64>> {
        (self.reference)(problem)
    }

    /// The reference of a problem given by its inputs alone (`tensors` by argument, empty for
    /// `Out`; nothing written before): what a test of known rows needs.
    pub fn reference_of(&self, dtype: DType, hidden: usize, tensors: &[Vec<f64>], scalars: &[f64]) -> Vec<Vec<f64>> {
        self.reference(&Problem { dtype, hidden, tensors, written: &[], scalars })
    }

    /// The argument named `name` (or aliased so), by position.
    pub fn tensor_index(&self, name: &str) -> Option<usize> {
        self.tensors.iter().position(|t| t.name == name || t.alias == Some(name))
    }

    /// Whether the op writes a new output (else it works in place).
    pub fn has_output(&self) -> bool {
        self.tensors.iter().any(|t| t.role == Role::Out)
    }

    /// The input whose dtype and device a new output (argument `out`) takes, as adapters
    /// allocate it: the first input of its extent (`query_out` like `query`), else the first
    /// tensor.
    pub fn output_source(&self, out: usize) -> usize {
        let extent = self.tensors[out].extent;
        self.tensors.iter().position(|t| t.role != Role::Out && t.extent == extent).unwrap_or(0)
    }

    /// The scalars' examples in a problem of `rows` rows of `hidden` ([`ScalarArg::example_for`]).
    pub fn examples(&self, rows: usize, hidden: usize) -> Vec<f64> {
        self.scalars.iter().map(|s| s.example_for(rows, hidden)).collect()
    }

    /// The index of the scalar giving an [`Extent::Count`] output's length (its example is the
    /// problem's rows), if the op has one.
    pub fn count(&self) -> Option<usize> {
        self.scalars.iter().position(|s| s.example == Example::Rows)
    }

    /// The shape of a new output, argument `out`, for a call of inputs `(extent, shape)` and
    /// scalars `scalars`: [`Extent::output_shape`], but an [`Extent::Count`] output's is the
    /// count scalar's value (0 if it is not a count: the op's own checks refuse it). What
    /// adapters allocate when the caller passes no output.
    pub fn output_shape(&self, out: usize, inputs: &[(Extent, &[i64])], scalars: &[f64]) -> Vec<i64> {
        match self.tensors[out].extent {
            Extent::Count => {
                let count = self.count().and_then(|i| scalars.get(i)).copied().unwrap_or(0.0);
                vec![if count >= 0.0 && count <= i64::MAX as f64 { count as i64 } else { 0 }]
            }
            extent => extent.output_shape(inputs),
        }
    }
}

impl Call<'_, '_> {
    /// `(name, view)` of every tensor argument.
    pub(crate) fn named(&self) -> impl Iterator<Item = (&'static str, &TensorView<'_>)> + '_ {
        self.op.tensors.iter().zip(self.tensors).map(|(arg, view)| (arg.name, &**view))
    }

    /// `(name, view)` of the arguments the call reads (`In`, `InOut`).
    pub(crate) fn read(&self) -> impl Iterator<Item = (&'static str, &TensorView<'_>)> + '_ {
        self.op.tensors.iter().zip(self.tensors).filter(|(arg, _)| arg.role != Role::Out).map(|(a, v)| (a.name, &**v))
    }

    /// `(name, view)` of the arguments the call writes (`Out`, `InOut`).
    pub(crate) fn written(&self) -> impl Iterator<Item = (&'static str, &TensorView<'_>)> + '_ {
        self.op.tensors.iter().zip(self.tensors).filter(|(arg, _)| arg.role != Role::In).map(|(a, v)| (a.name, &**v))
    }

    /// The tensors as a fixed-size array, for a family's `let [input, weight, out] = …`.
    pub fn tensors<const N: usize>(&self) -> Result<[&TensorView<'_>; N], Error> {
        let views: Vec<&TensorView> = self.tensors.iter().map(|v| &**v).collect();
        views.try_into().map_err(|_| Error::Arity {
            op: self.op.name,
            expected: (N, self.scalars.len()),
            found: (self.tensors.len(), self.scalars.len()),
        })
    }

    /// Scalar `i` (validated by the family: e.g. `eps` finite and ≥ 0).
    pub fn scalar(&self, i: usize) -> f64 {
        self.scalars.get(i).copied().unwrap_or(f64::NAN)
    }

    /// Scalar `i`'s tensor of values a row, where the caller gave one.
    pub fn per_row(&self, i: usize) -> Option<&TensorView<'_>> {
        self.per_row.get(i).copied().flatten()
    }
}

/// The parameter type of an input argument in the typed Rust API.
#[doc(hidden)]
#[macro_export]
macro_rules! __tensor_param {
    (In) => { &$crate::TensorView<'_> };
    (InOut) => { &mut $crate::TensorView<'_> };
}

/// `Some(alias)` or `None`.
#[doc(hidden)]
#[macro_export]
macro_rules! __alias {
    () => {
        None
    };
    ($alias:ident) => {
        Some(stringify!($alias))
    };
}

/// The dtype rule of `[Extent]` / `[Extent | f32]` (inputs) / `[Extent as f32]`, `[Extent as i32]` (outputs).
#[doc(hidden)]
#[macro_export]
macro_rules! __dtype_rule {
    () => {
        $crate::op::DTypeRule::Same
    };
    (| f32) => {
        $crate::op::DTypeRule::SameOrF32
    };
    (as f32) => {
        $crate::op::DTypeRule::F32
    };
    (as i32) => {
        $crate::op::DTypeRule::I32
    };
    (as index) => {
        $crate::op::DTypeRule::Index
    };
}

/// An input's domain: `[Rows, nonnegative]`, `[Batch as index, positions]`,
/// `[SegmentBounds as index, segment_bounds]`, `[Batch as index, table_rows]`, else any value.
#[doc(hidden)]
#[macro_export]
macro_rules! __domain {
    () => {
        $crate::op::Domain::Any
    };
    (nonnegative) => {
        $crate::op::Domain::Nonnegative
    };
    (positions) => {
        $crate::op::Domain::Positions
    };
    (segment_bounds) => {
        $crate::op::Domain::SegmentBounds
    };
    (sequence_lengths) => {
        $crate::op::Domain::SequenceLengths
    };
    (table_rows) => {
        $crate::op::Domain::TableRows
    };
    (page_sequences) => {
        $crate::op::Domain::PageSequences
    };
    (page_positions) => {
        $crate::op::Domain::PagePositions
    };
    (page_ids) => {
        $crate::op::Domain::PageIds
    };
    (page_bounds) => {
        $crate::op::Domain::PageBounds
    };
    (last_page_lengths) => {
        $crate::op::Domain::LastPageLengths
    };
}

/// `Some(default)` or `None` (a required scalar); an optional one's default is None (NaN).
#[doc(hidden)]
#[macro_export]
macro_rules! __scalar_default {
    (Option<$inner:ident>;) => {
        Some(f64::NAN)
    };
    ($kind:tt;) => {
        None
    };
    ($kind:tt; $default:tt) => {
        Some($crate::__scalar_literal!($kind; $default))
    };
}

/// A scalar's literal (its default) as the registry's f64: a number or a bool
/// ([`__literal_f64!`]), or for a [`Choice`](crate::op::Choice) type the index of its name.
#[doc(hidden)]
#[macro_export]
macro_rules! __scalar_literal {
    ($kind:ident; $value:tt) => {
        $crate::__scalar_literal!(@$kind; $value)
    };
    ([$kind:tt]; $value:tt) => {
        $crate::__literal_f64!($value)
    };
    (@f32; $value:tt) => {
        $crate::__literal_f64!($value)
    };
    (@i32; $value:tt) => {
        $crate::__literal_f64!($value)
    };
    (@u64; $value:tt) => {
        $crate::__literal_f64!($value)
    };
    (@bool; $value:tt) => {
        $crate::__literal_f64!($value)
    };
    (@$choice:ident; $name:tt) => {
        $crate::op::choice_index(<$crate::$choice as $crate::op::Choice>::NAMES, $name) as f64
    };
}

/// A table's literal as the registry's f64 (in a `static`: no trait call); `true` is 1.
#[doc(hidden)]
#[macro_export]
macro_rules! __literal_f64 {
    (true) => {
        1.0
    };
    (false) => {
        0.0
    };
    ($value:literal) => {
        $value as f64
    };
}

/// A scalar's [`Example`](crate::op::Example): its `(example V)` (`(example hidden)`: the
/// problem's `H`), else its default (an optional one's: None, NaN).
#[doc(hidden)]
#[macro_export]
macro_rules! __scalar_example {
    ($kind:tt $(<$inner:ident>)?; [$($default:tt)?]; [hidden]) => {
        $crate::op::Example::Hidden
    };
    ($kind:tt $(<$inner:ident>)?; [$($default:tt)?]; [rows]) => {
        $crate::op::Example::Rows
    };
    ($kind:tt $(<$inner:ident>)?; [$($default:tt)?]; [$example:literal]) => {
        $crate::op::Example::Value($crate::__literal_f64!($example))
    };
    ($kind:tt $(<$inner:ident>)?; [$default:tt]; []) => {
        $crate::op::Example::Value($crate::__scalar_literal!($kind; $default))
    };
    (Option<$inner:ident>; []; []) => {
        $crate::op::Example::Value(f64::NAN)
    };
    ($kind:tt; []; []) => {
        compile_error!("a scalar without a default needs `(example VALUE)`")
    };
}

/// A scalar's [`ScalarKind`](crate::op::ScalarKind): `f32`, `i32`, `u64`, `bool`, `Option<i32>`,
/// or per row (`[f32]`, `[i32]`, `[u64]`) of the kind inside.
#[doc(hidden)]
#[macro_export]
macro_rules! __scalar_kind {
    (f32) => {
        $crate::op::ScalarKind::F32
    };
    (i32) => {
        $crate::op::ScalarKind::I32
    };
    (u64) => {
        $crate::op::ScalarKind::U64
    };
    (bool) => {
        $crate::op::ScalarKind::Bool
    };
    (Option<i32>) => {
        $crate::op::ScalarKind::OptionalI32
    };
    ([$kind:tt]) => {
        $crate::__scalar_kind!($kind)
    };
    ($choice:ident) => {
        $crate::op::ScalarKind::Choice(<$crate::$choice as $crate::op::Choice>::NAMES)
    };
}

/// Whether a scalar's type is per row (`[f32]`).
#[doc(hidden)]
#[macro_export]
macro_rules! __scalar_per_row {
    ([$kind:tt]) => {
        true
    };
    ($($kind:tt)+) => {
        false
    };
}

/// The typed API's parameter type of a scalar: its type, or for a per-row one
/// `impl Into<PerRow<f32>>`.
#[doc(hidden)]
#[macro_export]
macro_rules! __scalar_param {
    ([$kind:tt], $life:lifetime) => { impl Into<$crate::PerRow<$life, $kind>> };
    ($kind:ident $(<$inner:ident>)?, $life:lifetime) => { $crate::__scalar_value!($kind $(<$inner>)?) };
}

/// A scalar's value type, whether or not it may be per row (what adapters that take one value
/// for every row accept). A [`Choice`](crate::op::Choice) type is named at the crate root, where
/// its family re-exports it (`ferrinfer_launch::KvLayout`): adapters import nothing per family.
#[doc(hidden)]
#[macro_export]
macro_rules! __scalar_value {
    ([$kind:tt]) => {
        $kind
    };
    (Option<$inner:ident>) => {
        Option<$inner>
    };
    (f32) => {
        f32
    };
    (i32) => {
        i32
    };
    (u64) => {
        u64
    };
    (bool) => {
        bool
    };
    ($choice:ident) => {
        $crate::$choice
    };
}

/// `(value, per-row tensor)` of a typed API's scalar argument.
#[doc(hidden)]
#[macro_export]
macro_rules! __scalar_split {
    ([$kind:tt], $value:expr) => {
        $crate::PerRow::<'_, $kind>::split($value.into())
    };
    ($kind:ident $(<$inner:ident>)?, $value:expr) => {
        ($crate::op::ScalarValue::to_f64($value), None)
    };
}

/// Turns a family's op table into the typed public functions, their [`OpInfo`]s and `OPS`.
/// A family invokes it once: `crate::norm_ops!(crate::define_ops);`.
///
/// The table's grammar, one line per op (what every consumer of a table matches):
/// `fn NAME(INPUT: In|InOut [Extent (| f32 | as f32|index)? (, nonnegative|positions|segment_bounds|sequence_lengths|…)?], …) (-> OUTPUT: Out [Extent (as f32|i32)?], …)? (;
/// SCALAR: f32|i32|u64|bool|Option<i32>|[f32]|[i32]|[u64]|CHOICE (= DEFAULT)? ((example VALUE|hidden|rows))?, …)? => SELECTOR, reference PATH
/// (, order (NAME, …))?;` with doc comments before it. `order` gives FlashInfer's positional order
/// where it differs from the table's ([`OpInfo::order`]). `/ alias` after an argument's name gives FlashInfer's Python name when it
/// differs; `| f32` lets an input be f32 whatever the first tensor's dtype, `as f32` (`as i32`)
/// makes an input f32 or an output f32 (int32) always (attention states' scores), `as index` an input int32 or int64 (positions),
/// `nonnegative` marks an input of probabilities, `positions` one of token positions, `segment_bounds` an `indptr`, `sequence_lengths` lengths after an append of its segments, `table_rows` row indices of a `Table`. `[f32]` makes a scalar per
/// row: one value, or a `[rows]` tensor ([`PerRow`]). A scalar without a default is required and needs an example (see
/// [`ScalarArg::example`]), but for an `Option<i32>`, which defaults to None; required scalars come before the others.
/// An output takes the shape of the first input of its extent (see [`Extent::output_shape`]).
#[doc(hidden)]
#[macro_export]
macro_rules! define_ops {
    (
        family $family:ident;
        $(
            $(#[doc = $doc:literal])*
            fn $name:ident($($tensor:ident $(/ $alias:ident)? : $role:ident [$extent:ident $(| $wide:ident)? $(as $input_fixed:ident)? $(, $domain:ident)?]),+)
                $(-> $($out:ident : Out [$out_extent:ident $(as $fixed:ident)?]),+)?
                $(; $($scalar:ident : $kind:tt $(<$inner:ident>)? $(= $default:tt)? $((example $example:tt))?),+)?
                => $op:expr, reference $reference:path $(, order ($($order:ident),+))?;
        )+
    ) => {
        $(
            $(#[doc = $doc])*
            // `'p`: the borrow of a per-row scalar's tensor (unused by ops without one).
            #[allow(clippy::too_many_arguments, clippy::extra_unused_lifetimes)]
            pub fn $name<'p>(
                $($tensor: $crate::__tensor_param!($role),)+
                $($($out: &mut $crate::TensorView<'_>,)+)?
                $($($scalar: $crate::__scalar_param!($kind $(<$inner>)?, 'p),)+)?
                stream: $crate::Stream<'_>,
            ) -> Result<(), $crate::Error> {
                let (values, per_row) = $crate::op::split_scalars([$($($crate::__scalar_split!($kind $(<$inner>)?, $scalar)),+)?]);
                $name::INFO.call_per_row(&[$(&*$tensor,)+ $($(&*$out,)+)?], &values, &per_row, stream)
            }

            #[doc(hidden)]
            pub mod $name {
                #[allow(unused_imports)]
                use super::*;

                pub static INFO: $crate::op::OpInfo = $crate::op::OpInfo {
                    name: stringify!($name),
                    family: stringify!($family),
                    doc: concat!($($doc, "\n"),*),
                    tensors: &[
                        $($crate::op::TensorArg {
                            name: stringify!($tensor),
                            alias: $crate::__alias!($($alias)?),
                            role: $crate::op::Role::$role,
                            extent: $crate::op::Extent::$extent,
                            dtype: $crate::__dtype_rule!($(| $wide)? $(as $input_fixed)?),
                            domain: $crate::__domain!($($domain)?),
                        },)+
                        $($($crate::op::TensorArg {
                            name: stringify!($out),
                            alias: None,
                            role: $crate::op::Role::Out,
                            extent: $crate::op::Extent::$out_extent,
                            dtype: $crate::__dtype_rule!($(as $fixed)?),
                            domain: $crate::op::Domain::Any,
                        },)+)?
                    ],
                    scalars: &[$($($crate::op::ScalarArg {
                        name: stringify!($scalar),
                        kind: $crate::__scalar_kind!($kind $(<$inner>)?),
                        default: $crate::__scalar_default!($kind $(<$inner>)?; $($default)?),
                        example: $crate::__scalar_example!($kind $(<$inner>)?; [$($default)?]; [$($example)?]),
                        per_row: $crate::__scalar_per_row!($kind $(<$inner>)?),
                    }),+)?],
                    order: &[$($(stringify!($order)),+)?],
                    run: |call| $crate::op::FamilyOp::run(&$op, call),
                    reference: $reference,
                };
            }
        )+

        /// This family's ops, in table order.
        pub static OPS: &[&$crate::op::OpInfo] = &[$(&$name::INFO),+];
    };
}

#[cfg(test)]
mod tests {
    use crate::op::Extent;
    use crate::{DType, Error, Stream, TensorView};

    #[test]
    fn outputs_keep_the_first_tensors_rows_and_drop_its_states() {
        let out = |extent: Extent, first, shape: &[i64]| extent.output_shape(&[(first, shape)]);
        assert_eq!(out(Extent::Rows, Extent::Rows, &[2, 3, 8]), [2, 3, 8]);
        assert_eq!(out(Extent::Rows, Extent::DoubleRows, &[5, 16]), [5, 8], "a gated activation's output");
        assert_eq!(out(Extent::Batch, Extent::Rows, &[2, 3, 8]), [2, 3], "a score or token a row");
        assert_eq!(out(Extent::Rows, Extent::Stacked, &[7, 4, 32, 128]), [7, 32, 128], "merge_states' values");
        assert_eq!(out(Extent::Batch, Extent::Stacked, &[7, 4, 32, 128]), [7, 32]);
        assert_eq!(out(Extent::Batch, Extent::StackedBatch, &[7, 4]), [7]);
        assert_eq!(out(Extent::Rows, Extent::Stacked, &[4, 128]), [4, 128], "too few dimensions: left to the op");
        assert_eq!(Extent::Stacked.shape(5, 64), [5, crate::op::STACKED_STATES, 64]);
        let (q, k): (&[i64], &[i64]) = (&[7, 32, 128], &[7, 8, 128]);
        let inputs = [(Extent::Heads, q), (Extent::KvHeads, k), (Extent::Batch, &[7][..])];
        assert_eq!(Extent::KvHeads.output_shape(&inputs), k, "rope's k_rope: like k, not like q");
        assert_eq!(Extent::Heads.output_shape(&inputs), q);
    }

    /// An op's FlashInfer order names each of its arguments at most once and every required one
    /// (tensors read, scalars without a default), required ones first — the parameters it leaves
    /// out follow it, and a required one there would come after an optional one.
    #[test]
    fn every_order_names_arguments_once_required_first() {
        for op in crate::ops().filter(|op| !op.order.is_empty()) {
            let named = |name: &str| op.order.contains(&name);
            let missing =
                op.tensors.iter().filter(|t| t.role != crate::op::Role::Out).map(|t| t.alias.unwrap_or(t.name));
            let missing = missing.chain(op.scalars.iter().filter(|s| s.default.is_none()).map(|s| s.name));
            let missing: Vec<&str> = missing.filter(|name| !named(name)).collect();
            assert!(missing.is_empty(), "{}: order leaves out required {missing:?}", op.name);
            let required = |name: &str| {
                let tensor = op.tensors.iter().find(|t| t.name == name || t.alias == Some(name));
                let scalar = op.scalars.iter().find(|s| s.name == name);
                match (tensor, scalar) {
                    (Some(t), None) => t.role != crate::op::Role::Out,
                    (None, Some(s)) => s.default.is_none(),
                    _ => panic!("{}: order names `{name}`, no single argument", op.name),
                }
            };
            let flags: Vec<bool> = op.order.iter().map(|name| required(name)).collect();
            assert!(flags.windows(2).all(|w| w[0] || !w[1]), "{}: a required argument after an optional one", op.name);
            let mut names = op.order.to_vec();
            names.sort();
            names.dedup();
            assert_eq!(names.len(), op.order.len(), "{}: a name twice", op.name);
        }
    }

    /// No op computes in integers: an int32 tensor anywhere but a tokens output or positions
    /// (or a float one there) is refused, naming the argument, before any family runs (so none
    /// dispatches on it).
    #[test]
    fn every_op_refuses_an_integer_tensor_by_name() {
        for op in crate::ops() {
            for integer in 0..op.tensors.len() {
                let (rows, width) = (2usize, 16usize);
                let mut buffers: Vec<Vec<u32>> = vec![vec![0; rows * 2 * width]; op.tensors.len()];
                let views: Vec<TensorView> = buffers
                    .iter_mut()
                    .enumerate()
                    .map(|(i, buffer)| {
                        // The wrong dtype for argument `integer`, the right one elsewhere (an
                        // integer argument's wrong one is a float).
                        let int =
                            matches!(op.tensors[i].dtype, crate::op::DTypeRule::I32 | crate::op::DTypeRule::Index);
                        let dtype = if (i == integer) != int { DType::I32 } else { DType::F32 };
                        let shape = [rows as i64, width as i64];
                        // SAFETY: each buffer holds twice the elements the view addresses.
                        unsafe {
                            TensorView::from_raw_parts(
                                buffer.as_mut_ptr().cast(),
                                0,
                                dtype,
                                &shape,
                                &[width as i64, 1],
                                crate::Device::Cpu,
                            )
                        }
                        .unwrap()
                    })
                    .collect();
                let scalars = op.examples(rows, width);
                let error = op.call(&views.iter().collect::<Vec<_>>(), &scalars, Stream::Cpu).unwrap_err();
                let name = op.tensors[integer].name;
                assert!(
                    matches!(&error, Error::UnsupportedDType { argument, .. } if *argument == name),
                    "{}: {error}",
                    op.name
                );
            }
        }
    }
}
