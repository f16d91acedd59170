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

use crate::scalar::{PerRow, Scalar, ScalarKind, ScalarType};
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
    /// A shape the argument's family makes for its problems, where none of the above fits (a
    /// paged cache, its page table): the table names the family's [`FamilyExtent`] static.
    Family(&'static FamilyExtent),
    /// `[N]`: a value for each of `N` items, `N` the op's scalar whose example is the problem's
    /// rows (`nnz: i32 (example rows)`: [`OpInfo::count`]); `[T]` in the problems.
    Count,
}

/// A problem shape of a family's own ([`Extent::Family`]): the argument's shape in a problem of
/// `rows` rows of `hidden`, the elements such a problem touches (what the benchmark counts as
/// bytes moved), and whether an in-out argument is read as well as written. Known by its name.
#[derive(Clone, Copy, Debug)]
pub struct FamilyExtent {
    pub name: &'static str,
    pub shape: fn(usize, usize) -> Vec<usize>,
    pub touched: fn(usize, usize) -> usize,
    pub read_in_place: bool,
    /// The shape of a new output of this extent from the call's first tensor's (a score a
    /// head: that shape without its last dimension); `None` for an extent no output has.
    pub output: Option<OutputShape>,
}

/// A new output's shape from the call's first tensor's ([`FamilyExtent::output`]).
pub type OutputShape = fn(&[i64]) -> Vec<i64>;

/// An input's values that follow from a problem's row count alone by its family's own problem
/// layout ([`Domain::Fixed`]: a page table's parts). Known by its name.
#[derive(Clone, Copy, Debug)]
pub struct FixedValues {
    pub name: &'static str,
    pub values: fn(usize) -> Vec<i64>,
}

/// Equality and hashing by name: a family's problem layouts hold functions, which do not compare.
macro_rules! known_by_name {
    ($($type:ty),+) => {$(
        impl PartialEq for $type {
            fn eq(&self, other: &Self) -> bool {
                self.name == other.name
            }
        }

        impl Eq for $type {}

        impl std::hash::Hash for $type {
            fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
                self.name.hash(state);
            }
        }
    )+};
}

known_by_name!(FamilyExtent, FixedValues);

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
            Extent::Family(family) => (family.shape)(rows, hidden),
            Extent::Count => vec![rows],
        }
    }

    /// The elements of the argument a problem of `rows` rows of `hidden` reads or writes at most:
    /// all of its [`shape`](Extent::shape), but for a table only the rows its rows look up.
    /// What the benchmark counts as bytes moved.
    pub fn touched(self, rows: usize, hidden: usize) -> usize {
        match self {
            Extent::Table => rows.min(TABLE_ROWS) * hidden,
            Extent::Family(family) => (family.touched)(rows, hidden),
            _ => self.shape(rows, hidden).iter().product(),
        }
    }

    /// Whether an in-out argument of this extent is read as well as written (not so a family's
    /// that says otherwise: a paged cache, into which an op only writes entries). The benchmark
    /// counts the [`touched`](Extent::touched) bytes of one that is twice.
    pub fn read_in_place(self) -> bool {
        match self {
            Extent::Family(family) => family.read_in_place,
            _ => true,
        }
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
        if let Extent::Family(FamilyExtent { output: Some(rule), .. }) = self {
            return rule(first_shape);
        }
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
    /// Values its family's problem layout fixes from the row count (a page table's parts).
    Fixed(&'static FixedValues),
}

impl Domain {
    /// The values of an input of this domain in a problem of `rows` rows when they follow from
    /// `rows` alone (a family's [`FixedValues`]), else `None` (drawn at random).
    pub fn fixed(self, rows: usize) -> Option<Vec<i64>> {
        match self {
            Domain::Fixed(fixed) => Some((fixed.values)(rows)),
            _ => None,
        }
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

/// What the benchmark and the tests that walk every op pass for a scalar.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Example {
    /// This value: the default, or for a required scalar a typical one.
    Value(Scalar),
    /// The problem's `H` (`(example hidden)`: rope's `head_size`, which must match the
    /// tensors' shapes).
    Hidden,
    /// The problem's `T` (`(example rows)`: a count such as `nnz`, the length of an
    /// [`Extent::Count`] output).
    Rows,
}

/// One scalar argument, of the type its table line gives it (see [`crate::scalar`]), with
/// FlashInfer's default where it has one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScalarArg {
    pub name: &'static str,
    pub kind: ScalarKind,
    /// An `Option` in the table: it may be [`Scalar::Absent`] (its default then).
    pub optional: bool,
    /// `None`: the caller must give it.
    pub default: Option<Scalar>,
    /// What the benchmark and the tests pass: see [`ScalarArg::example_for`].
    pub example: Example,
    /// May be given a tensor of one value a row instead (`[f32]`, `[i32]` or `[u64]` in the
    /// table: FlashInfer's "tensor or scalar"; [`PerRow`]).
    pub per_row: bool,
}

impl ScalarArg {
    /// The value the benchmark and the tests that walk every op pass in a problem of `rows` rows
    /// of `hidden`.
    pub fn example_for(&self, rows: usize, hidden: usize) -> Scalar {
        let count = |n: usize| self.kind.from_integer(n as i128).unwrap_or(Scalar::Absent);
        match self.example {
            Example::Value(value) => value,
            Example::Hidden => count(hidden),
            Example::Rows => count(rows),
        }
    }

    /// Whether `value` may be this scalar's.
    pub fn accepts(&self, value: Scalar) -> bool {
        self.kind.holds(value) || (value == Scalar::Absent && self.optional)
    }

    /// `value` as a reader of this scalar spells it: a choice by its name.
    pub fn show(&self, value: Scalar) -> String {
        match (self.kind, value) {
            (ScalarKind::Choice(names), Scalar::Choice(i)) if i < names.len() => format!("{:?}", names[i]),
            _ => value.to_string(),
        }
    }
}

/// The scalars of one call (or problem), read by name as their table's types.
#[derive(Clone, Copy, Debug)]
pub struct Scalars<'c> {
    pub args: &'static [ScalarArg],
    pub values: &'c [Scalar],
}

impl Scalars<'_> {
    /// Scalar `name` as `T`, its table's type. An error only for a name or type the op's table
    /// does not give it, which its family's tests find (calls are checked against the table
    /// before a family runs).
    pub fn get<T: ScalarType>(&self, name: &'static str) -> Result<T, Error> {
        let value = self.args.iter().position(|arg| arg.name == name).and_then(|i| self.values.get(i)).copied();
        value.and_then(T::from_scalar).ok_or_else(|| Error::InvalidScalar {
            argument: name,
            value: value.map_or_else(|| "missing".into(), |v| v.to_string()),
            expected: T::KIND.expected(),
        })
    }
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
    pub scalars: &'c [Scalar],
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
    pub scalars: Scalars<'p>,
}

impl Problem<'_> {
    /// Scalar `name` as its table's type `T`, for a reference. A problem's scalars are its
    /// op's, of its table's types (the tests and the benchmark make them from the op's examples
    /// or parse them by its [`ScalarKind`]s); a reference that reads a name or type its table
    /// does not give is a bug of its family, which panics here in that family's first test.
    pub fn scalar<T: ScalarType>(&self, name: &'static str) -> T {
        self.scalars.get(name).unwrap_or_else(|error| panic!("a reference reads a scalar its op lacks: {error}"))
    }
}

impl OpInfo {
    /// Runs the op with arguments by position (see [`Call`]); the typed functions and the
    /// adapters all come through here. Checks the argument counts, then logs and runs.
    pub fn call(&'static self, tensors: &[&TensorView], scalars: &[Scalar], stream: Stream) -> Result<(), Error> {
        self.call_per_row(tensors, scalars, &[], stream)
    }

    /// [`OpInfo::call`] with, for each scalar, the tensor of its values a row where one is given
    /// (`per_row`: empty for none, else one entry a scalar; only scalars marked
    /// [`ScalarArg::per_row`] take one, their value in `scalars` is then ignored). A scalar of
    /// another type than its table's is [`Error::InvalidScalar`].
    pub fn call_per_row(
        &'static self,
        tensors: &[&TensorView],
        scalars: &[Scalar],
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
        let given = |i: usize| per_row.get(i).is_some_and(Option::is_some);
        let mistyped =
            self.scalars.iter().zip(scalars).enumerate().find(|(i, (arg, v))| !arg.accepts(**v) && !given(*i));
        if let Some((_, (arg, value))) = mistyped {
            let expected = arg.kind.expected();
            return Err(Error::InvalidScalar { argument: arg.name, value: value.to_string(), expected });
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
    pub fn reference_of(&self, dtype: DType, hidden: usize, tensors: &[Vec<f64>], scalars: &[Scalar]) -> Vec<Vec<f64>> {
        self.reference(&Problem { dtype, hidden, tensors, written: &[], scalars: self.scalars_of(scalars) })
    }

    /// `values` read by this op's scalar names and types.
    pub fn scalars_of<'c>(&self, values: &'c [Scalar]) -> Scalars<'c> {
        Scalars { args: self.scalars, values }
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
    pub fn examples(&self, rows: usize, hidden: usize) -> Vec<Scalar> {
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
    pub fn output_shape(&self, out: usize, inputs: &[(Extent, &[i64])], scalars: &[Scalar]) -> Vec<i64> {
        match self.tensors[out].extent {
            Extent::Count => {
                let count = match self.count().and_then(|i| scalars.get(i)) {
                    Some(Scalar::I32(n)) => i64::from(*n),
                    Some(Scalar::U32(n)) => i64::from(*n),
                    Some(Scalar::U64(n)) => i64::try_from(*n).unwrap_or(0),
                    _ => 0,
                };
                vec![count.max(0)]
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

    /// The call's scalars, read by name as their table's types.
    pub fn scalars(&self) -> Scalars<'_> {
        self.op.scalars_of(self.scalars)
    }

    /// Scalar `name` as its table's type `T` (validated by the family: e.g. `eps` finite and ≥ 0).
    pub fn scalar<T: ScalarType>(&self, name: &'static str) -> Result<T, Error> {
        self.scalars().get(name)
    }

    /// Per-row scalar `name`: its tensor of values a row where the caller gave one, else its value.
    pub fn per_row<T: ScalarType>(&self, name: &'static str) -> Result<PerRow<'_, T>, Error> {
        let index = self.op.scalars.iter().position(|arg| arg.name == name);
        match index.and_then(|i| self.per_row.get(i).copied().flatten()) {
            Some(view) => Ok(PerRow::Rows(view)),
            None => self.scalar(name).map(PerRow::All),
        }
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
/// `[SegmentBounds as index, segment_bounds]`, `[Batch as index, table_rows]`, a family's
/// [`FixedValues`](crate::op::FixedValues) static by its name, else any value.
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
    ($family:ident) => {
        $crate::op::Domain::Fixed(&$family)
    };
}

/// An argument's extent: one of [`Extent`](crate::op::Extent)'s shared shapes by its name, else
/// the [`FamilyExtent`](crate::op::FamilyExtent) static its family names (`[PAGED_CACHE]`).
#[doc(hidden)]
#[macro_export]
macro_rules! __extent {
    (Rows) => {
        $crate::op::Extent::Rows
    };
    (Row) => {
        $crate::op::Extent::Row
    };
    (DoubleRows) => {
        $crate::op::Extent::DoubleRows
    };
    (Batch) => {
        $crate::op::Extent::Batch
    };
    (Stacked) => {
        $crate::op::Extent::Stacked
    };
    (StackedBatch) => {
        $crate::op::Extent::StackedBatch
    };
    (Heads) => {
        $crate::op::Extent::Heads
    };
    (KvHeads) => {
        $crate::op::Extent::KvHeads
    };
    (SegmentBounds) => {
        $crate::op::Extent::SegmentBounds
    };
    (Segments) => {
        $crate::op::Extent::Segments
    };
    (FlatHeads) => {
        $crate::op::Extent::FlatHeads
    };
    (FlatKvHeads) => {
        $crate::op::Extent::FlatKvHeads
    };
    (Table) => {
        $crate::op::Extent::Table
    };
    (Count) => {
        $crate::op::Extent::Count
    };
    ($family:ident) => {
        $crate::op::Extent::Family(&$family)
    };
}

/// A scalar's Rust type from its table type: `f32`, `i32`, `u32`, `u64`, `bool`, `Option<u32>`, a
/// per-row `[f32]` (the type inside), or a choice enum, named at the crate root where its family
/// re-exports it (`ferrinfer_launch::KvLayout`): adapters import nothing per family.
#[doc(hidden)]
#[macro_export]
macro_rules! __scalar_value {
    ([$kind:tt]) => { $kind };
    (Option<$inner:ident>) => { Option<$crate::__scalar_value!($inner)> };
    (f32) => { f32 };
    (i32) => { i32 };
    (u32) => { u32 };
    (u64) => { u64 };
    (bool) => { bool };
    ($choice:ident) => { $crate::$choice };
}

/// A scalar's [`ScalarKind`](crate::scalar::ScalarKind), from its Rust type.
#[doc(hidden)]
#[macro_export]
macro_rules! __scalar_kind {
    ($($kind:tt)+) => {
        <$crate::__scalar_value!($($kind)+) as $crate::scalar::ScalarType>::KIND
    };
}

/// Whether a scalar's table type is an `Option`.
#[doc(hidden)]
#[macro_export]
macro_rules! __scalar_optional {
    (Option<$inner:ident>) => {
        true
    };
    ($($kind:tt)+) => {
        false
    };
}

/// Whether a scalar's table type is per row (`[f32]`).
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

/// A table's literal as a constant [`Scalar`](crate::scalar::Scalar) of the scalar's type (in a
/// `static`: no trait call): a number, a bool, or a choice's name.
#[doc(hidden)]
#[macro_export]
macro_rules! __scalar_literal {
    ([$kind:tt]; $value:tt) => { $crate::__scalar_literal!($kind; $value) };
    (f32; $value:literal) => { $crate::scalar::Scalar::F32($value) };
    (i32; $value:literal) => { $crate::scalar::Scalar::I32($value) };
    (u32; $value:literal) => { $crate::scalar::Scalar::U32($value) };
    (u64; $value:literal) => { $crate::scalar::Scalar::U64($value) };
    (bool; $value:literal) => { $crate::scalar::Scalar::Bool($value) };
    ($choice:ident; $name:literal) => {
        $crate::scalar::Scalar::Choice($crate::scalar::choice_index($crate::__scalar_kind!($choice), $name))
    };
}

/// `Some(default)`, or `None` for a required scalar; an `Option`'s default is absent.
#[doc(hidden)]
#[macro_export]
macro_rules! __scalar_default {
    (Option<$inner:ident>; []) => { Some($crate::scalar::Scalar::Absent) };
    ($kind:tt; []) => { None };
    ($kind:tt; [$default:tt]) => { Some($crate::__scalar_literal!($kind; $default)) };
}

/// A scalar's [`Example`](crate::op::Example): its `(example V)` (`(example hidden)`: the
/// problem's `H`; `(example rows)`: its `T`), else its default.
#[doc(hidden)]
#[macro_export]
macro_rules! __scalar_example {
    ($kind:tt; [$($default:tt)?]; [hidden]) => { $crate::op::Example::Hidden };
    ($kind:tt; [$($default:tt)?]; [rows]) => { $crate::op::Example::Rows };
    ($kind:tt; [$($default:tt)?]; [$example:literal]) => {
        $crate::op::Example::Value($crate::__scalar_literal!($kind; $example))
    };
    (Option<$inner:ident>; []; []) => { $crate::op::Example::Value($crate::scalar::Scalar::Absent) };
    ($kind:tt; [$default:tt]; []) => { $crate::op::Example::Value($crate::__scalar_literal!($kind; $default)) };
    ($kind:tt; []; []) => { compile_error!("a scalar without a default needs `(example VALUE)`") };
}

/// The typed API's parameter type of a scalar: its type, or for a per-row one
/// `impl Into<PerRow<f32>>`.
#[doc(hidden)]
#[macro_export]
macro_rules! __scalar_param {
    (([$kind:tt]), $life:lifetime) => { impl Into<$crate::PerRow<$life, $kind>> };
    (($($kind:tt)+), $life:lifetime) => { $crate::__scalar_value!($($kind)+) };
}

/// `(value, per-row tensor)` of a typed API's scalar argument.
#[doc(hidden)]
#[macro_export]
macro_rules! __scalar_split {
    (([$kind:tt]), $value:expr) => {
        $crate::PerRow::<'_, $kind>::split($value.into())
    };
    (($($kind:tt)+), $value:expr) => {
        ($crate::scalar::ScalarType::into_scalar($value), None)
    };
}

/// A typed call's scalars, `(value, tensor)` each, as the registry takes them: values, then
/// tensors — in arrays, so a call allocates nothing here.
#[doc(hidden)]
pub fn split_scalars<'a, const N: usize>(
    scalars: [(Scalar, Option<&'a TensorView<'a>>); N],
) -> ([Scalar; N], [Option<&'a TensorView<'a>>; N]) {
    (scalars.map(|s| s.0), scalars.map(|s| s.1))
}

/// A family's op table, written once in its file: `op_table! { $ /// doc… NAME_ops, family
/// FAMILY; OPS… }` (the leading `$` lets the macro write a macro) defines the family's typed
/// functions through [`define_ops!`] and exports `NAME_ops!(CALLBACK, ADAPTER)`, which hands the
/// same table to an adapter ([`all_ops!`](crate::all_ops)).
#[doc(hidden)]
#[macro_export]
macro_rules! op_table {
    ($d:tt $(#[$meta:meta])* $table:ident, family $family:ident; $($ops:tt)+) => {
        $(#[$meta])*
        #[macro_export]
        macro_rules! $table {
            ($d callback:path, $d adapter:path) => {
                $d callback! { @adapter $d adapter; family $family; $($ops)+ }
            };
        }

        $crate::define_ops! { family $family; $($ops)+ }
    };
}

/// Turns a family's op table into the typed public functions, their [`OpInfo`]s and `OPS`, or
/// hands it to an adapter's macro: the one place the table's grammar is matched. A family
/// gets it from [`op_table!`](crate::op_table); adapters through
/// [`all_ops!`](crate::all_ops), which gives each table to `define_ops!` with their macro.
///
/// The table's grammar, one line per op:
/// `fn NAME(INPUT: In|InOut [Extent (| f32 | as f32|index)? (, nonnegative|positions|segment_bounds|sequence_lengths|…)?], …) (-> OUTPUT: Out [Extent (as f32|i32)?], …)? (;
/// SCALAR: f32|i32|u32|u64|bool|Option<u32>|[f32]|[i32]|[u64]|CHOICE (= DEFAULT)? ((example VALUE|hidden|rows))?, …)? => SELECTOR, reference PATH
/// (, order (NAME, …))?;` with doc comments before it. `order` gives FlashInfer's positional order
/// where it differs from the table's ([`OpInfo::order`]). `/ alias` after an argument's name gives FlashInfer's Python name when it
/// differs; `| f32` lets an input be f32 whatever the first tensor's dtype, `as f32` (`as i32`)
/// makes an input f32 or an output f32 (int32) always (attention states' scores), `as index` an input int32 or int64 (positions),
/// `nonnegative` marks an input of probabilities, `positions` one of token positions, `segment_bounds` an `indptr`, `sequence_lengths` lengths after an append of its segments, `table_rows` row indices of a `Table`. `[f32]` makes a scalar per
/// row: one value, or a `[rows]` tensor ([`PerRow`]). A scalar without a default is required and needs an example (see
/// [`ScalarArg::example`]), but for an `Option`, which defaults to None; required scalars come before the others.
/// An output takes the shape of the first input of its extent (see [`Extent::output_shape`]).
///
/// What an adapter's macro receives, one line per op, every type resolved:
/// `fn NAME(INPUT: In|InOut, …) -> (OUTPUT, …); (SCALAR: TYPE, …);` with the doc comments
/// before it, after `family FAMILY;`.
#[doc(hidden)]
#[macro_export]
macro_rules! define_ops {
    (
        $(@adapter $adapter:path;)?
        family $family:ident;
        $(
            $(#[doc = $doc:literal])*
            fn $name:ident($($tensor:ident $(/ $alias:ident)? : $role:ident [$extent:ident $(| $wide:ident)? $(as $input_fixed:ident)? $(, $domain:ident)?]),+)
                $(-> $($out:ident : Out [$out_extent:ident $(as $fixed:ident)?]),+)?
                $(; $($scalar:ident : $kind:tt $(<$inner:ident>)? $(= $default:literal)? $((example $example:tt))?),+)?
                => $op:expr, reference $reference:path $(, order ($($order:ident),+))?;
        )+
    ) => {
        $crate::define_ops! {
            @canonical [$($adapter)?] family $family;
            $(
                [$($doc),*] $name
                [$(($tensor [$($alias)?] $role $extent [$(| $wide)? $(as $input_fixed)?] [$($domain)?]))+]
                [$($(($out $out_extent [$(as $fixed)?]))+)?]
                [$($(($scalar [$kind $(<$inner>)?] [$($default)?] [$($example)?]))+)?]
                ($op) ($reference) [$($($order)+)?];
            )+
        }
    };
    (
        @canonical [$adapter:path] family $family:ident;
        $(
            [$($doc:literal),*] $name:ident
            [$(($tensor:ident [$($alias:ident)?] $role:ident $extent:ident [$($rule:tt)*] [$($domain:ident)?]))+]
            [$(($out:ident $out_extent:ident [$($fixed:tt)*]))*]
            [$(($scalar:ident [$($kind:tt)+] [$($default:tt)?] [$($example:tt)?]))*]
            ($op:expr) ($reference:path) [$($order:ident)*];
        )+
    ) => {
        $adapter! {
            family $family;
            $(
                $(#[doc = $doc])*
                fn $name($($tensor: $role),+) -> ($($out),*); ($($scalar: $crate::__scalar_value!($($kind)+)),*);
            )+
        }
    };
    (
        @canonical [] family $family:ident;
        $(
            [$($doc:literal),*] $name:ident
            [$(($tensor:ident [$($alias:ident)?] $role:ident $extent:ident [$($rule:tt)*] [$($domain:ident)?]))+]
            [$(($out:ident $out_extent:ident [$($fixed:tt)*]))*]
            [$(($scalar:ident [$($kind:tt)+] [$($default:tt)?] [$($example:tt)?]))*]
            ($op:expr) ($reference:path) [$($order:ident)*];
        )+
    ) => {
        $(
            $(#[doc = $doc])*
            // `'p`: the borrow of a per-row scalar's tensor (unused by ops without one).
            #[allow(clippy::too_many_arguments, clippy::extra_unused_lifetimes)]
            pub fn $name<'p>(
                $($tensor: $crate::__tensor_param!($role),)+
                $($out: &mut $crate::TensorView<'_>,)*
                $($scalar: $crate::__scalar_param!(($($kind)+), 'p),)*
                stream: $crate::Stream<'_>,
            ) -> Result<(), $crate::Error> {
                let (values, per_row) = $crate::op::split_scalars([$($crate::__scalar_split!(($($kind)+), $scalar)),*]);
                $name::INFO.call_per_row(&[$(&*$tensor,)+ $(&*$out,)*], &values, &per_row, stream)
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
                            extent: $crate::__extent!($extent),
                            dtype: $crate::__dtype_rule!($($rule)*),
                            domain: $crate::__domain!($($domain)?),
                        },)+
                        $($crate::op::TensorArg {
                            name: stringify!($out),
                            alias: None,
                            role: $crate::op::Role::Out,
                            extent: $crate::__extent!($out_extent),
                            dtype: $crate::__dtype_rule!($($fixed)*),
                            domain: $crate::op::Domain::Any,
                        },)*
                    ],
                    scalars: &[$($crate::op::ScalarArg {
                        name: stringify!($scalar),
                        kind: $crate::__scalar_kind!($($kind)+),
                        optional: $crate::__scalar_optional!($($kind)+),
                        default: $crate::__scalar_default!($($kind)+; [$($default)?]),
                        example: $crate::__scalar_example!($($kind)+; [$($default)?]; [$($example)?]),
                        per_row: $crate::__scalar_per_row!($($kind)+),
                    }),*],
                    order: &[$(stringify!($order)),*],
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
        assert_eq!(out(Extent::Rows, Extent::DoubleRows, &[5, 16]), [5, 8], "a gated input: half its last dimension");
        assert_eq!(out(Extent::Batch, Extent::Rows, &[2, 3, 8]), [2, 3], "a score or token a row");
        assert_eq!(
            out(Extent::Rows, Extent::Stacked, &[7, 4, 32, 128]),
            [7, 32, 128],
            "stacked states: their states dimension dropped"
        );
        assert_eq!(out(Extent::Batch, Extent::Stacked, &[7, 4, 32, 128]), [7, 32]);
        assert_eq!(out(Extent::Batch, Extent::StackedBatch, &[7, 4]), [7]);
        assert_eq!(out(Extent::Rows, Extent::Stacked, &[4, 128]), [4, 128], "too few dimensions: left to the op");
        assert_eq!(Extent::Stacked.shape(5, 64), [5, crate::op::STACKED_STATES, 64]);
        let (q, k): (&[i64], &[i64]) = (&[7, 32, 128], &[7, 8, 128]);
        let inputs = [(Extent::Heads, q), (Extent::KvHeads, k), (Extent::Batch, &[7][..])];
        assert_eq!(
            Extent::KvHeads.output_shape(&inputs),
            k,
            "the first input of its own extent: like the keys, not the queries"
        );
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
