//! Category codes as their labels: what the reader hands out for a category column, and what the shard checks
//! read back.

use arrow_array::cast::AsArray;
use arrow_array::types::{Int8Type, Int16Type, Int32Type};
use arrow_array::{Array, StringArray};
use arrow_schema::DataType;

use crate::error::{ObsError, Result};

/// Category codes (int8 / int16 / int32; -1 or null = missing) as their labels (missing = null).
pub fn category_labels(codes: &dyn Array, categories: &[String]) -> Result<StringArray> {
    fn map<I: Iterator<Item = Option<i64>>>(it: I, cats: &[String]) -> Result<StringArray> {
        it.map(|c| match c {
            None | Some(-1) => Ok(None),
            Some(c) => usize::try_from(c)
                .ok()
                .and_then(|i| cats.get(i))
                .map(|s| Some(s.as_str()))
                .ok_or_else(|| ObsError::input(None, format!("code {c} is outside the {} categories", cats.len()))),
        })
        .collect()
    }
    match codes.data_type() {
        DataType::Int8 => map(codes.as_primitive::<Int8Type>().iter().map(|v| v.map(i64::from)), categories),
        DataType::Int16 => map(codes.as_primitive::<Int16Type>().iter().map(|v| v.map(i64::from)), categories),
        DataType::Int32 => map(codes.as_primitive::<Int32Type>().iter().map(|v| v.map(i64::from)), categories),
        t => Err(ObsError::input(None, format!("category codes must be int8, int16 or int32, not {t}"))),
    }
}
