//! `REGEXP_EXTRACT(s, re [, group])` with Flink's semantics (its `SqlFunctionUtils.regexpExtract`):
//! the text of `group` in the first match of `re` in `s`; group 0, the default, is the whole
//! match. NULL when an argument is NULL, nothing matches, the group did not take part in the
//! match, or the group is not one of the pattern's (negative or past its last group).
//!
//! Its own function rather than `regexp_match(s, re)[group]`: that builds a list of every
//! group for every row and then takes one, where this finds the match and copies one slice. A
//! constant pattern is compiled once per thread, not once per batch. A constant pattern
//! that does not compile is refused at planning, with its position
//! ([`check_constant_pattern`]); Flink logs an error and gives NULL for each row. A pattern
//! that comes from a column gives NULL when it does not compile, as in Flink.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringBuilder};
use datafusion::arrow::datatypes::{DataType, Int64Type};
use datafusion::common::ScalarValue;
use datafusion::error::Result;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, TypeSignature, Volatility,
};
use regex::{CaptureLocations, Regex};

use crate::udf::udf;

pub const NAME: &str = "regexp_extract";

udf!(
    RegexpExtract,
    NAME,
    Signature::one_of(
        vec![
            TypeSignature::Exact(vec![DataType::Utf8; 2]),
            TypeSignature::Exact(vec![DataType::Utf8, DataType::Utf8, DataType::Int64]),
        ],
        Volatility::Immutable
    ),
    DataType::Utf8
);

/// Patterns this thread has compiled, `None` for one that does not compile. Bounded: a
/// pattern column with many distinct values starts the cache over rather than growing it.
const CACHED_PATTERNS: usize = 64;

thread_local! {
    static PATTERNS: RefCell<HashMap<String, Option<Regex>>> = RefCell::new(HashMap::new());
}

fn compiled(pattern: &str) -> Option<Regex> {
    PATTERNS.with(|cache| {
        let mut cache = cache.borrow_mut();
        if let Some(re) = cache.get(pattern) {
            return re.clone();
        }
        if cache.len() >= CACHED_PATTERNS {
            cache.clear();
        }
        let re = Regex::new(pattern).ok();
        cache.insert(pattern.to_string(), re.clone());
        re
    })
}

/// Why a constant pattern cannot run, if it cannot: the first line of the regex crate's
/// explanation (its full message is a multi-line diagram).
pub fn check_constant_pattern(pattern: &str) -> Option<String> {
    let err = Regex::new(pattern).err()?;
    let text = err.to_string();
    let reason = text.lines().rev().find(|l| l.starts_with("error:")).map(|l| l.trim_start_matches("error:").trim());
    Some(reason.unwrap_or("not a regular expression").to_string())
}

/// Group `group` of the first match of `re` in `text`.
fn extract<'t>(re: &Regex, locations: &mut CaptureLocations, text: &'t str, group: i64) -> Option<&'t str> {
    let group = usize::try_from(group).ok()?;
    if group >= locations.len() {
        return None;
    }
    if group == 0 {
        return re.find(text).map(|m| m.as_str());
    }
    re.captures_read(locations, text)?;
    let (start, end) = locations.get(group)?;
    text.get(start..end)
}

impl RegexpExtract {
    fn run(args: &ScalarFunctionArgs, rows: usize) -> Result<ArrayRef> {
        let text = args.args[0].to_array(rows)?;
        let text = text.as_string::<i32>();
        let mut out = StringBuilder::with_capacity(rows, rows * 8);
        let constant_group = match args.args.get(2) {
            None => Some(Some(0)),
            Some(ColumnarValue::Scalar(ScalarValue::Int64(g))) => Some(*g),
            Some(_) => None,
        };
        // The usual call: a constant pattern and group, one regex for the whole batch.
        if let (ColumnarValue::Scalar(ScalarValue::Utf8(pattern)), Some(group)) = (&args.args[1], constant_group) {
            let (Some(re), Some(group)) = (pattern.as_deref().and_then(compiled), group) else {
                out.append_nulls(rows);
                return Ok(Arc::new(out.finish()));
            };
            let mut locations = re.capture_locations();
            for value in text.iter() {
                out.append_option(value.and_then(|t| extract(&re, &mut locations, t, group)));
            }
            return Ok(Arc::new(out.finish()));
        }
        let patterns = args.args[1].to_array(rows)?;
        let patterns = patterns.as_string::<i32>();
        let groups = match args.args.get(2) {
            Some(g) => Some(g.to_array(rows)?),
            None => None,
        };
        let groups = groups.as_ref().map(|g| g.as_primitive::<Int64Type>());
        let mut last: Option<(&str, Regex, CaptureLocations)> = None;
        for i in 0..rows {
            let group = match groups {
                Some(g) if g.is_null(i) => None,
                Some(g) => Some(g.value(i)),
                None => Some(0),
            };
            let (Some(group), false, false) = (group, text.is_null(i), patterns.is_null(i)) else {
                out.append_null();
                continue;
            };
            let pattern = patterns.value(i);
            if last.as_ref().is_none_or(|(p, _, _)| *p != pattern) {
                last = compiled(pattern).map(|re| {
                    let locations = re.capture_locations();
                    (pattern, re, locations)
                });
            }
            match &mut last {
                Some((_, re, locations)) => out.append_option(extract(re, locations, text.value(i), group)),
                None => out.append_null(),
            }
        }
        Ok(Arc::new(out.finish()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str, pattern: &str, group: i64) -> Option<String> {
        let re = Regex::new(pattern).ok()?;
        let mut locations = re.capture_locations();
        extract(&re, &mut locations, text, group).map(str::to_string)
    }

    #[test]
    fn groups_as_flink_numbers_them() {
        assert_eq!(one("foothebar", "foo(.*?)(bar)", 0).as_deref(), Some("foothebar"));
        assert_eq!(one("foothebar", "foo(.*?)(bar)", 1).as_deref(), Some("the"));
        assert_eq!(one("foothebar", "foo(.*?)(bar)", 2).as_deref(), Some("bar"));
        // Past the last group, negative, no match, a group that took no part: NULL.
        assert_eq!(one("foothebar", "foo(.*?)(bar)", 3), None);
        assert_eq!(one("foothebar", "foo(.*?)(bar)", -1), None);
        assert_eq!(one("foothebar", "x(y)", 1), None);
        assert_eq!(one("carol", "a(l)?", 1), None);
        // An empty match is empty text, not NULL.
        assert_eq!(one("carol", "z*", 0).as_deref(), Some(""));
    }

    #[test]
    fn a_constant_pattern_that_does_not_compile_says_why_in_one_line() {
        let reason = check_constant_pattern("(").expect("refused");
        assert!(!reason.contains('\n'), "{reason}");
        assert!(reason.contains("unclosed group"), "{reason}");
        assert_eq!(check_constant_pattern("(&|^)channel_id=([^&]*)"), None);
    }
}
