//! Per obs column: how many cells lack a value, and what the values are (category counts, a histogram of
//! numbers, true/false counts, or how many distinct strings).

use std::collections::HashSet;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type};
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;
use dct_dataset::Dataset;
use dct_dataset::dct_obs::{ColumnKind, ObsOptions};

use crate::ReportError;

/// Categories shown per category column.
pub const TOP_CATEGORIES: usize = 30;
/// Strings read per string column to count distinct values.
pub const STRING_SAMPLE: usize = 200_000;

/// What one obs column holds.
#[derive(Debug, Clone, PartialEq)]
pub enum ColumnValues {
    /// A category column.
    Category {
        /// Cells per category, most frequent first (at most [`TOP_CATEGORIES`]; categories without cells left out).
        top: Vec<(String, u64)>,
        /// Categories in the vocabulary.
        n_categories: usize,
    },
    /// The values present (NaN left out).
    Numeric(Vec<f64>),
    /// A boolean column.
    Bool {
        /// Cells true.
        true_: u64,
        /// Cells false.
        false_: u64,
    },
    /// A string column.
    String {
        /// Distinct values among those read.
        distinct: usize,
        /// Present values read (the first, at most [`STRING_SAMPLE`]).
        read: usize,
    },
}

/// One obs column's summary.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnSummary {
    /// Its name.
    pub name: String,
    /// Its kind in the schema.
    pub kind: ColumnKind,
    /// Cells without a value.
    pub missing: u64,
    /// Cells in all.
    pub n_cells: u64,
    /// The values.
    pub values: ColumnValues,
}

fn obs_err(ds: &Dataset, e: impl std::fmt::Display) -> ReportError {
    ReportError::Obs { url: ds.url().to_string(), cause: e.to_string() }
}

/// Every obs column of `ds` summarized (none without obs). Columns are fetched into the obs cache as any reader of
/// them would (`options`).
pub fn summarize_obs(ds: &Dataset, options: ObsOptions) -> Result<Vec<ColumnSummary>, ReportError> {
    if !ds.manifest().has_obs {
        return Ok(Vec::new());
    }
    let obs = ds.obs(options).map_err(|e| obs_err(ds, e))?;
    let columns: Vec<(String, ColumnKind)> = obs.columns().into_iter().map(|(n, k)| (n.to_string(), k)).collect();
    let names: Vec<&str> = columns.iter().map(|(n, _)| n.as_str()).collect();
    obs.localize_blocking(&names).map_err(|e| obs_err(ds, e))?;
    let mut out = Vec::with_capacity(columns.len());
    for (name, kind) in columns {
        let array = obs.column(&name).map_err(|e| obs_err(ds, e))?;
        let n_cells = array.len() as u64;
        let cast =
            |to: &DataType| arrow_cast::cast(&array, to).map_err(|e| obs_err(ds, format!("column {name:?}: {e}")));
        let (missing, values) = match kind {
            ColumnKind::Category => {
                let vocabulary = obs.categories(&name).map_err(|e| obs_err(ds, e))?.unwrap_or(&[]);
                let codes = cast(&DataType::Int64)?;
                category_counts(codes.as_primitive::<Int64Type>(), vocabulary)
            }
            ColumnKind::Numeric => {
                let x = cast(&DataType::Float64)?;
                let x = x.as_primitive::<Float64Type>();
                let present: Vec<f64> = x.iter().flatten().filter(|v| !v.is_nan()).collect();
                (n_cells - present.len() as u64, ColumnValues::Numeric(present))
            }
            ColumnKind::Bool => {
                let b = array.as_boolean();
                let true_ = b.iter().filter(|v| *v == Some(true)).count() as u64;
                let false_ = b.iter().filter(|v| *v == Some(false)).count() as u64;
                (n_cells - true_ - false_, ColumnValues::Bool { true_, false_ })
            }
            ColumnKind::String => string_values(&cast(&DataType::Utf8)?),
        };
        out.push(ColumnSummary { name, kind, missing, n_cells, values });
    }
    Ok(out)
}

/// Cells missing (code -1 or null) and per category, most frequent first.
fn category_counts(codes: &arrow_array::Int64Array, vocabulary: &[String]) -> (u64, ColumnValues) {
    let mut counts = vec![0u64; vocabulary.len()];
    let mut missing = 0u64;
    for c in codes.iter() {
        match c.and_then(|c| usize::try_from(c).ok()).and_then(|c| counts.get_mut(c)) {
            Some(slot) => *slot += 1,
            None => missing += 1,
        }
    }
    let mut top: Vec<(String, u64)> = vocabulary.iter().cloned().zip(counts).filter(|(_, n)| *n > 0).collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    top.truncate(TOP_CATEGORIES);
    (missing, ColumnValues::Category { top, n_categories: vocabulary.len() })
}

fn string_values(array: &ArrayRef) -> (u64, ColumnValues) {
    let s = array.as_string::<i32>();
    let missing = s.null_count() as u64;
    let mut seen: HashSet<&str> = HashSet::new();
    let mut read = 0;
    for v in s.iter().flatten().take(STRING_SAMPLE) {
        seen.insert(v);
        read += 1;
    }
    (missing, ColumnValues::String { distinct: seen.len(), read })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories_are_counted_most_frequent_first_and_missing_codes_apart() {
        let codes = arrow_array::Int64Array::from(vec![Some(1), Some(0), Some(1), Some(-1), None, Some(7)]);
        let vocabulary = ["a".to_string(), "b".to_string(), "c".to_string()];
        let (missing, values) = category_counts(&codes, &vocabulary);
        assert_eq!(missing, 3);
        assert_eq!(values, ColumnValues::Category { top: vec![("b".into(), 2), ("a".into(), 1)], n_categories: 3 });
    }

    #[test]
    fn only_the_most_frequent_categories_are_kept_ties_by_name() {
        // Category k has k + 1 cells (k < 40), and categories 40..45 one cell each: the top 30 are 39 down to 10.
        let vocabulary: Vec<String> = (0..45).map(|k| format!("c{k:02}")).collect();
        let codes: Vec<i64> =
            (0..45i64).flat_map(|k| std::iter::repeat_n(k, if k < 40 { k as usize + 1 } else { 1 })).collect();
        let (missing, values) = category_counts(&arrow_array::Int64Array::from(codes), &vocabulary);
        assert_eq!(missing, 0);
        let ColumnValues::Category { top, n_categories } = values else { panic!("not a category summary") };
        assert_eq!((top.len(), n_categories), (TOP_CATEGORIES, 45));
        let expected: Vec<(String, u64)> = (10..40u64).rev().map(|k| (format!("c{k:02}"), k + 1)).collect();
        assert_eq!(top, expected);
    }
}
