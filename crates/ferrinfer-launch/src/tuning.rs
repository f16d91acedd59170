//! Tuning overrides from the environment, shared by every op family: a variable holding fields
//! separated by `:`, each a number or `*` (the planner's choice), read once per process — knobs
//! for sweeping a planner's choices with the benchmark. A family names the variable, what its
//! fields mean and which values it accepts; a value it rejects is [`Error::Config`] naming the
//! variable and what was expected, on every call (CPU ones too), never silently ignored.

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
}
