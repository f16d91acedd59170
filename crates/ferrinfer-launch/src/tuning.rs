//! Tuning overrides from the environment, shared by every op family: a variable holding fields
//! separated by `:`, each a number or `*` (the planner's choice), read once per process — knobs
//! for sweeping a planner's choices with the benchmark. A family names the variable, what its
//! fields mean and which values it accepts; a value it rejects is [`Error::Config`] naming the
//! variable and what was expected, on every call (CPU ones too), never silently ignored.
//! [`layout_override!`] declares a family's override from just that.

use std::ffi::OsStr;
use std::sync::OnceLock;

use crate::Error;
use crate::cuda::MAX_BLOCK;

/// The `N` fields of `value`, separated by `:`: each a number, or `*`, empty or left off at the
/// end for the planner's choice (`None`). `None` if a field is neither, or there are more than `N`.
pub(crate) fn fields<const N: usize>(value: &str) -> Option<[Option<u64>; N]> {
    let parts: Vec<&str> = value.split(':').map(str::trim).collect();
    if parts.len() > N {
        return None;
    }
    let mut fields = [None; N];
    for (field, part) in fields.iter_mut().zip(parts) {
        *field = match part {
            "*" | "" => None,
            number => Some(number.parse().ok()?),
        };
    }
    Some(fields)
}

/// A field giving threads a block: a multiple of 32 up to [`MAX_BLOCK`], or the planner's choice
/// (`Some(None)`); `None` for any other number (the override is rejected).
pub(crate) fn block_field(field: Option<u64>) -> Option<Option<u32>> {
    match field {
        None => Some(None),
        Some(b) if b > 0 && b.is_multiple_of(32) && b <= MAX_BLOCK as u64 => Some(Some(b as u32)),
        Some(_) => None,
    }
}

/// A field that is 0 or 1 (a policy on or off), or the planner's choice (`Some(None)`); `None`
/// for any other number (the override is rejected).
pub(crate) fn flag_field(field: Option<u64>) -> Option<Option<bool>> {
    match field {
        None => Some(None),
        Some(flag @ (0 | 1)) => Some(Some(flag == 1)),
        Some(_) => None,
    }
}

/// A field holding a number that fits `T` (a family's check narrows it to what its kernels
/// take), or the planner's choice (`Some(None)`); `None` for a larger number.
pub(crate) fn number_field<T: TryFrom<u64>>(field: Option<u64>) -> Option<Option<T>> {
    field.map(T::try_from).transpose().ok()
}

/// A family's layout override, declared by its variable and its fields:
///
/// ```ignore
/// tuning::layout_override! {
///     /// `FERRINFER_FAMILY_LAYOUT=block:tokens:stream`: what each field forces, read once.
///     pub const LAYOUT_VAR: &str = "FERRINFER_FAMILY_LAYOUT";
///     struct LayoutOverride {
///         block: Block,
///         tokens: u64 if |t| t >= 1,
///         streams: Flag,
///     }
///     // Optional: a check of the fields together.
///     if |layout| layout.tokens.is_none() || layout.block.is_some();
///     expected = "block:tokens:stream, each a number or *, block a multiple of 32 to 1024, tokens ≥ 1, …";
/// }
/// ```
///
/// A field is a `Block` of threads ([`block_field`], a `u32`), a 0/1 `Flag` ([`flag_field`], a
/// `bool`) or a number of the type named ([`number_field`]), then optionally `if` a check of its
/// value. The macro gives the constant; the struct, each field an `Option` (`None`: the
/// planner's choice) in the variable's order; `fn parse_layout(&str) -> Option<LayoutOverride>`,
/// each field read as its kind and checked, then the fields together; and
/// `fn layout_override() -> Result<LayoutOverride, Error>`, the variable parsed once per process
/// ([`env_override`]): a rejected value's error reads `VAR="value": expected …` with `expected`.
macro_rules! layout_override {
    (
        $(#[$var_attr:meta])*
        $var_vis:vis const $var:ident: &str = $name:literal;
        $(#[$layout_attr:meta])*
        $layout_vis:vis struct $layout:ident {
            $(
                $(#[$field_attr:meta])*
                $field:ident: $kind:tt $(if $check:expr)?
            ),+ $(,)?
        }
        $(if $valid:expr;)?
        expected = $expected:expr;
    ) => {
        $(#[$var_attr])*
        $var_vis const $var: &str = $name;

        $(#[$layout_attr])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        $layout_vis struct $layout {
            $(
                $(#[$field_attr])*
                $field: Option<$crate::tuning::layout_override!(@value $kind)>,
            )+
        }

        fn layout_override() -> Result<$layout, $crate::Error> {
            static PARSED: ::std::sync::OnceLock<Result<$layout, String>> = ::std::sync::OnceLock::new();
            $crate::tuning::env_override(&PARSED, $var, parse_layout, || String::from($expected))
        }

        fn parse_layout(value: &str) -> Option<$layout> {
            let [$($field),+] = $crate::tuning::fields(value)?;
            $(
                let $field = $crate::tuning::layout_override!(@read $kind, $field)?;
                $(
                    if !$field.is_none_or($check) {
                        return None;
                    }
                )?
            )+
            Some($layout { $($field),+ })$(.filter($valid))?
        }
    };
    (@value Block) => { u32 };
    (@value Flag) => { bool };
    (@value $number:ty) => { $number };
    (@read Block, $field:ident) => { $crate::tuning::block_field($field) };
    (@read Flag, $field:ident) => { $crate::tuning::flag_field($field) };
    (@read $number:ty, $field:ident) => { $crate::tuning::number_field::<$number>($field) };
}

pub(crate) use layout_override;

/// The override in `var`, parsed by `parse` on the first call and kept in `parsed` (the family's
/// own static) for the process: unset is `T::default()`, the planner's choice everywhere. A value
/// `parse` rejects is [`Error::Config`]: `VAR="value": expected …` with `expected()`'s text, on
/// this call and every later one.
pub(crate) fn env_override<T: Clone + Default>(
    parsed: &OnceLock<Result<T, String>>,
    var: &str,
    parse: impl FnOnce(&str) -> Option<T>,
    expected: impl FnOnce() -> String,
) -> Result<T, Error> {
    let parsed = parsed.get_or_init(|| parse_value(var, std::env::var_os(var).as_deref(), parse, expected));
    parsed.clone().map_err(Error::Config)
}

/// [`env_override`]'s reading of `var`'s `value` (`None`: unset), or its error's text.
fn parse_value<T: Default>(
    var: &str,
    value: Option<&OsStr>,
    parse: impl FnOnce(&str) -> Option<T>,
    expected: impl FnOnce() -> String,
) -> Result<T, String> {
    let Some(value) = value else { return Ok(T::default()) };
    // Not UTF-8: the replacement characters parse as no number, so it is rejected too.
    let value = value.to_string_lossy();
    parse(&value).ok_or_else(|| format!("{var}={value:?}: expected {}", expected()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tuning_fields_are_numbers_or_the_planners_choice() {
        assert_eq!(fields::<3>("4:128:2"), Some([Some(4), Some(128), Some(2)]));
        assert_eq!(fields::<3>("*: 8 :"), Some([None, Some(8), None]), "spaces trimmed, empty is *");
        assert_eq!(fields::<3>("8"), Some([Some(8), None, None]), "fields left off at the end are *");
        assert_eq!(fields::<2>(""), Some([None, None]));
        for bad in ["1:2:3", "x", "-1", "1.5", "1:*x"] {
            assert_eq!(fields::<2>(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_block_field_is_a_multiple_of_32_up_to_1024() {
        assert_eq!(block_field(None), Some(None), "the planner's choice");
        assert_eq!(block_field(Some(256)), Some(Some(256)));
        assert_eq!(block_field(Some(1024)), Some(Some(1024)));
        for bad in [0, 31, 100, 1056] {
            assert_eq!(block_field(Some(bad)), None, "{bad}");
        }
    }

    #[test]
    fn a_flag_field_is_0_or_1() {
        assert_eq!(flag_field(None), Some(None), "the planner's choice");
        assert_eq!(flag_field(Some(0)), Some(Some(false)));
        assert_eq!(flag_field(Some(1)), Some(Some(true)));
        assert_eq!(flag_field(Some(2)), None);
    }

    #[test]
    fn tuning_override_unset_is_the_default_and_a_rejected_value_names_the_variable() {
        let parse = |value: &str| fields::<2>(value);
        let read = |value: Option<&str>| parse_value("VAR", value.map(OsStr::new), parse, || "a:b".into());
        assert_eq!(read(None), Ok([None, None]));
        assert_eq!(read(Some("*:7")), Ok([None, Some(7)]));
        assert_eq!(read(Some("1:2:3")), Err("VAR=\"1:2:3\": expected a:b".into()));
        // The process's own environment, through the cache: a variable no test sets.
        let unset = OnceLock::new();
        let read = env_override(&unset, "FERRINFER_TUNING_TEST_UNSET", parse, || unreachable!());
        assert_eq!(read.unwrap(), [None, None]);
    }

    layout_override! {
        /// A variable no test sets.
        const TEST_LAYOUT_VAR: &str = "FERRINFER_TUNING_TEST_LAYOUT";
        struct TestLayout {
            count: u8 if |c| c != 3,
            block: Block,
            flag: Flag,
        }
        if |layout| layout.count.is_some() || layout.flag.is_none();
        expected = "count:block:flag";
    }

    #[test]
    fn a_declared_override_reads_each_field_as_its_kind_then_the_checks() {
        assert_eq!(parse_layout("2:64:1"), Some(TestLayout { count: Some(2), block: Some(64), flag: Some(true) }));
        assert_eq!(parse_layout("*:1024"), Some(TestLayout { block: Some(1024), ..TestLayout::default() }));
        assert_eq!(parse_layout(""), Some(TestLayout::default()));
        // Past the field's type, its own check, a block, a flag, the fields together, a field too many.
        for bad in ["256", "3", "*:100", "1:*:2", "*:*:1", "1:*:*:*"] {
            assert_eq!(parse_layout(bad), None, "{bad}");
        }
        assert_eq!(layout_override().unwrap(), TestLayout::default(), "{TEST_LAYOUT_VAR} unset");
    }
}
