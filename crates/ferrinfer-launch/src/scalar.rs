//! Scalar arguments, typed end to end and family-agnostic: an op's table line declares each
//! scalar's Rust type (`eps: f32`, `seed: [u64]`, `interleave: bool`, `rotary_dim: Option<u32>`,
//! `kv_layout: KvLayout`), the typed API takes that type, the registry carries it as a
//! [`Scalar`] of the same type, and the family reads it back by name and type
//! ([`Call::scalar`](crate::op::Call::scalar)). No value stands for another: an absent optional
//! is [`Scalar::Absent`], a flag a `bool`, a seed a full `u64`.

use std::fmt;

use crate::TensorView;

/// A scalar argument's value, of the type its table line declares.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    F32(f32),
    I32(i32),
    U32(u32),
    U64(u64),
    Bool(bool),
    /// An optional scalar left out (`rotary_dim=None`), or one given as a tensor of values a row.
    Absent,
    /// A named choice (`kv_layout="HND"`): the index of its name in [`ScalarKind::Choice`].
    Choice(usize),
}

/// A scalar's type, as the registry describes it to adapters (what Python accepts, how the
/// benchmark parses `--scalar`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScalarKind {
    F32,
    I32,
    U32,
    U64,
    Bool,
    /// One of these names (an enum in the typed API, made a scalar by [`choice_scalar!`](crate::choice_scalar); a string in Python).
    Choice(&'static [&'static str]),
}

impl ScalarKind {
    /// Whether `value` is of this kind (`Absent` is any optional scalar's, checked apart).
    pub fn holds(self, value: Scalar) -> bool {
        matches!(
            (self, value),
            (ScalarKind::F32, Scalar::F32(_))
                | (ScalarKind::I32, Scalar::I32(_))
                | (ScalarKind::U32, Scalar::U32(_))
                | (ScalarKind::U64, Scalar::U64(_))
                | (ScalarKind::Bool, Scalar::Bool(_))
        ) || matches!((self, value), (ScalarKind::Choice(names), Scalar::Choice(i)) if i < names.len())
    }

    /// Whether its values are integers.
    pub fn integer(self) -> bool {
        matches!(self, ScalarKind::I32 | ScalarKind::U32 | ScalarKind::U64)
    }

    /// The integer `value` as this kind, if it is an integer kind holding it.
    pub fn from_integer(self, value: i128) -> Option<Scalar> {
        match self {
            ScalarKind::I32 => i32::try_from(value).ok().map(Scalar::I32),
            ScalarKind::U32 => u32::try_from(value).ok().map(Scalar::U32),
            ScalarKind::U64 => u64::try_from(value).ok().map(Scalar::U64),
            _ => None,
        }
    }

    /// `text` read as a value of this kind: a number, `true`/`false`, or a choice's name.
    pub fn parse(self, text: &str) -> Option<Scalar> {
        match self {
            ScalarKind::F32 => text.parse().ok().map(Scalar::F32),
            ScalarKind::Bool => text.parse().ok().map(Scalar::Bool),
            ScalarKind::Choice(names) => names.iter().position(|&n| n == text).map(Scalar::Choice),
            integer => integer.from_integer(text.parse().ok()?),
        }
    }

    /// What a value of this kind is, for error messages: "an integer, 0 ≤ value < 2^64".
    pub fn expected(self) -> String {
        match self {
            ScalarKind::F32 => "a number (f32)".into(),
            ScalarKind::I32 => "an integer, −2^31 ≤ value < 2^31".into(),
            ScalarKind::U32 => "an integer, 0 ≤ value < 2^32".into(),
            ScalarKind::U64 => "an integer, 0 ≤ value < 2^64".into(),
            ScalarKind::Bool => "a bool".into(),
            ScalarKind::Choice(names) => format!("one of \"{}\"", names.join("\", \"")),
        }
    }
}

impl fmt::Display for Scalar {
    /// As the value reads in code: `0.000001`, `42`, `true`, `None`; a choice by its index, `#1`
    /// ([`ScalarArg::show`](crate::op::ScalarArg::show) gives its name).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::F32(v) => write!(f, "{v}"),
            Scalar::I32(v) => write!(f, "{v}"),
            Scalar::U32(v) => write!(f, "{v}"),
            Scalar::U64(v) => write!(f, "{v}"),
            Scalar::Bool(v) => write!(f, "{v}"),
            Scalar::Absent => f.write_str("None"),
            Scalar::Choice(i) => write!(f, "#{i}"),
        }
    }
}

/// A Rust type a table may give a scalar: `f32`, `i32`, `u32`, `u64`, `bool`, `Option` of one, or
/// an enum of named choices ([`choice_scalar!`](crate::choice_scalar)).
pub trait ScalarType: Copy + Sized {
    /// The kind of value it is (an `Option`'s: its inner type's).
    const KIND: ScalarKind;
    fn into_scalar(self) -> Scalar;
    /// The value `scalar` holds, if it is of this type.
    fn from_scalar(scalar: Scalar) -> Option<Self>;
}

/// The [`ScalarType`] of a primitive, held by one [`Scalar`] variant.
macro_rules! primitive_scalar {
    ($($type:ty => $variant:ident),+) => {$(
        impl ScalarType for $type {
            const KIND: ScalarKind = ScalarKind::$variant;
            fn into_scalar(self) -> Scalar {
                Scalar::$variant(self)
            }
            fn from_scalar(scalar: Scalar) -> Option<Self> {
                match scalar {
                    Scalar::$variant(value) => Some(value),
                    _ => None,
                }
            }
        }
    )+};
}

primitive_scalar!(f32 => F32, i32 => I32, u32 => U32, u64 => U64, bool => Bool);

/// `None` is [`Scalar::Absent`].
impl<T: ScalarType> ScalarType for Option<T> {
    const KIND: ScalarKind = T::KIND;
    fn into_scalar(self) -> Scalar {
        self.map_or(Scalar::Absent, T::into_scalar)
    }
    fn from_scalar(scalar: Scalar) -> Option<Self> {
        match scalar {
            Scalar::Absent => Some(None),
            value => T::from_scalar(value).map(Some),
        }
    }
}

/// The [`ScalarType`] of an enum whose values are named choices (`kv_layout`, "NHD" or "HND"),
/// from its one list of values and names: `choice_scalar!(KvLayout { Nhd = "NHD", Hnd = "HND" })`.
/// The table writes its default as a name (`= "NHD"`); the registry carries the name's index;
/// Python takes the name.
#[doc(hidden)]
#[macro_export]
macro_rules! choice_scalar {
    ($type:ident { $($value:ident = $name:literal),+ $(,)? }) => {
        impl $crate::scalar::ScalarType for $type {
            const KIND: $crate::scalar::ScalarKind = $crate::scalar::ScalarKind::Choice(&[$($name),+]);
            fn into_scalar(self) -> $crate::scalar::Scalar {
                let index = [$($type::$value),+].iter().position(|v| *v == self).unwrap_or(0);
                $crate::scalar::Scalar::Choice(index)
            }
            fn from_scalar(scalar: $crate::scalar::Scalar) -> Option<Self> {
                match scalar {
                    $crate::scalar::Scalar::Choice(i) => [$($type::$value),+].get(i).copied(),
                    _ => None,
                }
            }
        }
    };
}

/// The index of choice `name` of `kind`: a table's default, at compile time (a name that is not
/// one of the kind's fails the build).
#[doc(hidden)]
pub const fn choice_index(kind: ScalarKind, name: &str) -> usize {
    let ScalarKind::Choice(names) = kind else { panic!("a named default for a scalar that is no choice") };
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

impl<'a, T: ScalarType> PerRow<'a, T> {
    /// `(the value, the tensor)` as the registry takes them: [`Scalar::Absent`] when a tensor is given.
    #[doc(hidden)]
    pub fn split(self) -> (Scalar, Option<&'a TensorView<'a>>) {
        match self {
            PerRow::All(value) => (value.into_scalar(), None),
            PerRow::Rows(view) => (Scalar::Absent, Some(view)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Side {
        Left,
        Right,
    }

    crate::choice_scalar!(Side { Left = "L", Right = "R" });

    #[test]
    fn values_round_trip_through_their_scalars() {
        assert_eq!(u64::from_scalar(u64::MAX.into_scalar()), Some(u64::MAX), "a seed's full range");
        assert_eq!(Option::<u32>::from_scalar(Scalar::Absent), Some(None));
        assert_eq!(Option::<u32>::from_scalar(Some(64u32).into_scalar()), Some(Some(64)));
        assert_eq!(bool::from_scalar(Scalar::F32(1.0)), None, "no float stands for a bool");
        assert_eq!(Side::from_scalar(Side::Right.into_scalar()), Some(Side::Right));
        assert_eq!(Side::from_scalar(Scalar::Choice(2)), None);
    }

    #[test]
    fn kinds_parse_and_bound_their_values() {
        assert_eq!(ScalarKind::U64.parse("18446744073709551615"), Some(Scalar::U64(u64::MAX)));
        assert_eq!(ScalarKind::U64.parse("-1"), None);
        assert_eq!(ScalarKind::I32.from_integer(1 << 31), None);
        assert_eq!(Side::KIND.parse("R"), Some(Scalar::Choice(1)));
        assert!(!Side::KIND.holds(Scalar::Choice(2)));
        assert_eq!(choice_index(Side::KIND, "R"), 1);
        assert!(!ScalarKind::U64.holds(Scalar::I32(1)));
    }
}
