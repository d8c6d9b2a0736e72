//! Options naming one of a domain enum's values: clap lists the names (and rejects others
//! with them), the domain type's `FromStr` turns the name into the value, so the library's
//! types need no clap derive.

use std::str::FromStr;

use clap::builder::{PossibleValuesParser, TypedValueParser};

use asa_core::parse_error::ParseError;

/// A value parser for `T` over its `names`.
pub fn choice<T>(names: &'static [&'static str]) -> impl TypedValueParser<Value = T>
where
    T: FromStr<Err = ParseError> + Clone + Send + Sync + 'static,
{
    PossibleValuesParser::new(names).try_map(|name| name.parse::<T>())
}
