//! Per obs column: how many cells lack a value, and what the values are (category counts, a histogram of
//! numbers, true/false counts, or how many distinct strings).

use std::collections::HashMap;

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
/// Values of a numeric column kept for its histogram at most (an even sample of a larger column's).
pub const NUMERIC_SAMPLE: usize = 1_000_000;

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
    /// A numeric column.
    Numeric {
        /// Values for its histogram: every present value (NaN left out), or an even sample of at most
        /// [`NUMERIC_SAMPLE`] of them (every k-th in cell order).
        sample: Vec<f64>,
        /// Values present in all.
        present: u64,
    },
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
        /// Among those read, the [`TOP_CATEGORIES`] most frequent values and their cells, most frequent first (ties
        /// by value).
        top: Vec<(String, u64)>,
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
/// them would (`options`), then read tile by tile from the cache's memory-mapped views, so a column is never held
/// whole: the memory a summary takes is that of one tile's values, whatever the cells (but a numeric column's
/// histogram values: at most [`NUMERIC_SAMPLE`]).
pub fn summarize_obs(ds: &Dataset, options: ObsOptions) -> Result<Vec<ColumnSummary>, ReportError> {
    if !ds.manifest().has_obs {
        return Ok(Vec::new());
    }
    let obs = ds.obs(options).map_err(|e| obs_err(ds, e))?;
    let columns: Vec<(String, ColumnKind)> = obs.columns().into_iter().map(|(n, k)| (n.to_string(), k)).collect();
    let names: Vec<&str> = columns.iter().map(|(n, _)| n.as_str()).collect();
    obs.localize_blocking(&names).map_err(|e| obs_err(ds, e))?;
    let n_cells = obs.n_cells();
    let stride = histogram_stride(n_cells);
    let mut out = Vec::with_capacity(columns.len());
    for (name, kind) in columns {
        let chunks = obs.column_chunks(&name).map_err(|e| obs_err(ds, e))?;
        let cast = |a: &ArrayRef, to: &DataType| {
            arrow_cast::cast(a, to).map_err(|e| obs_err(ds, format!("column {name:?}: {e}")))
        };
        let (missing, values) = match kind {
            ColumnKind::Category => {
                let vocabulary = obs.categories(&name).map_err(|e| obs_err(ds, e))?.unwrap_or(&[]);
                let mut counts = vec![0u64; vocabulary.len()];
                let mut missing = 0u64;
                for chunk in &chunks {
                    let codes = cast(chunk, &DataType::Int64)?;
                    missing += count_categories(codes.as_primitive::<Int64Type>(), &mut counts);
                }
                (missing, top_categories(counts, vocabulary))
            }
            ColumnKind::Numeric => {
                let (mut present, mut seen) = (Vec::new(), 0u64);
                for chunk in &chunks {
                    let x = cast(chunk, &DataType::Float64)?;
                    for v in x.as_primitive::<Float64Type>().iter().flatten().filter(|v| !v.is_nan()) {
                        if seen % stride == 0 {
                            present.push(v);
                        }
                        seen += 1;
                    }
                }
                (n_cells - seen, ColumnValues::Numeric { sample: present, present: seen })
            }
            ColumnKind::Bool => {
                let (mut true_, mut false_) = (0u64, 0u64);
                for chunk in &chunks {
                    let b = chunk.as_boolean();
                    true_ += b.true_count() as u64;
                    false_ += (b.len() - b.null_count() - b.true_count()) as u64;
                }
                (n_cells - true_ - false_, ColumnValues::Bool { true_, false_ })
            }
            ColumnKind::String => {
                let mut counts: HashMap<String, u64> = HashMap::new();
                let (mut missing, mut read) = (0u64, 0usize);
                for chunk in &chunks {
                    let s = cast(chunk, &DataType::Utf8)?;
                    let s = s.as_string::<i32>();
                    missing += s.null_count() as u64;
                    for v in s.iter().flatten() {
                        if read == STRING_SAMPLE {
                            break;
                        }
                        *counts.entry(v.to_string()).or_default() += 1;
                        read += 1;
                    }
                }
                (missing, string_values(counts, read))
            }
        };
        out.push(ColumnSummary { name, kind, missing, n_cells, values });
    }
    Ok(out)
}

/// Every how many present values of a column of `n_cells` one is kept for its histogram: at most
/// [`NUMERIC_SAMPLE`] are kept, whatever the cells.
fn histogram_stride(n_cells: u64) -> u64 {
    n_cells.div_ceil(NUMERIC_SAMPLE as u64).max(1)
}

/// Adds each code's cell to `counts`; returns the cells missing (code -1, null, or outside the vocabulary).
fn count_categories(codes: &arrow_array::Int64Array, counts: &mut [u64]) -> u64 {
    let mut missing = 0u64;
    for c in codes.iter() {
        match c.and_then(|c| usize::try_from(c).ok()).and_then(|c| counts.get_mut(c)) {
            Some(slot) => *slot += 1,
            None => missing += 1,
        }
    }
    missing
}

/// The [`TOP_CATEGORIES`] values with the most cells, most frequent first (ties by value; none without cells).
fn most_frequent(counts: impl Iterator<Item = (String, u64)>) -> Vec<(String, u64)> {
    let mut top: Vec<(String, u64)> = counts.filter(|(_, n)| *n > 0).collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    top.truncate(TOP_CATEGORIES);
    top
}

/// A string column's summary from the counts of the values read.
fn string_values(counts: HashMap<String, u64>, read: usize) -> ColumnValues {
    let distinct = counts.len();
    ColumnValues::String { distinct, read, top: most_frequent(counts.into_iter()) }
}

/// A category column's summary from its cells per category of `vocabulary`.
fn top_categories(counts: Vec<u64>, vocabulary: &[String]) -> ColumnValues {
    let top = most_frequent(vocabulary.iter().cloned().zip(counts));
    ColumnValues::Category { top, n_categories: vocabulary.len() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories_are_counted_most_frequent_first_and_missing_codes_apart() {
        let codes = arrow_array::Int64Array::from(vec![Some(1), Some(0), Some(1), Some(-1), None, Some(7)]);
        let vocabulary = ["a".to_string(), "b".to_string(), "c".to_string()];
        let mut counts = vec![0; 3];
        let missing = count_categories(&codes, &mut counts);
        let values = top_categories(counts, &vocabulary);
        assert_eq!(missing, 3);
        assert_eq!(values, ColumnValues::Category { top: vec![("b".into(), 2), ("a".into(), 1)], n_categories: 3 });
    }

    #[test]
    fn strings_are_counted_most_frequent_first_ties_by_value() {
        let counts: HashMap<String, u64> = (0..40u64).map(|k| (format!("s{k:02}"), 1 + k % 5)).collect();
        let ColumnValues::String { distinct, read, top } = string_values(counts, 123) else { panic!("not strings") };
        assert_eq!((distinct, read, top.len()), (40, 123, TOP_CATEGORIES));
        // 8 values each of 5, 4, 3 cells come first, then 2: s01 s06 ... by value within a count.
        assert_eq!(&top[..2], &[("s04".to_string(), 5), ("s09".to_string(), 5)]);
        assert!(top.windows(2).all(|w| w[0].1 > w[1].1 || (w[0].1 == w[1].1 && w[0].0 < w[1].0)));
        assert_eq!(top.iter().filter(|t| t.1 == 2).count(), 6);
    }

    #[test]
    fn a_histogram_keeps_every_value_of_a_small_column_and_a_bounded_spread_of_a_large_one() {
        assert_eq!(histogram_stride(0), 1);
        assert_eq!(histogram_stride(NUMERIC_SAMPLE as u64), 1);
        for n in [NUMERIC_SAMPLE as u64 + 1, 10_000_000, 1_000_000_000, u64::MAX] {
            let stride = histogram_stride(n);
            let kept = n.div_ceil(stride);
            assert!(stride > 1 && kept <= NUMERIC_SAMPLE as u64 && kept > NUMERIC_SAMPLE as u64 / 2, "{n}");
        }
    }

    #[test]
    fn only_the_most_frequent_categories_are_kept_ties_by_name() {
        // Category k has k + 1 cells (k < 40), and categories 40..45 one cell each: the top 30 are 39 down to 10.
        let vocabulary: Vec<String> = (0..45).map(|k| format!("c{k:02}")).collect();
        let codes: Vec<i64> =
            (0..45i64).flat_map(|k| std::iter::repeat_n(k, if k < 40 { k as usize + 1 } else { 1 })).collect();
        let mut counts = vec![0; 45];
        let missing = count_categories(&arrow_array::Int64Array::from(codes), &mut counts);
        let values = top_categories(counts, &vocabulary);
        assert_eq!(missing, 0);
        let ColumnValues::Category { top, n_categories } = values else { panic!("not a category summary") };
        assert_eq!((top.len(), n_categories), (TOP_CATEGORIES, 45));
        let expected: Vec<(String, u64)> = (10..40u64).rev().map(|k| (format!("c{k:02}"), k + 1)).collect();
        assert_eq!(top, expected);
    }
}
