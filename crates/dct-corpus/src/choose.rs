//! Choosing cells by their obs: [`Corpus::filter`] (conditions on columns) and [`Corpus::split`] (deterministic
//! parts, whole groups to one part). Both read the columns a block of cells at a time, so memory is one block's
//! values and the ranges of the cells chosen, whatever the corpus's size.

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int32Type};
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;
use dct_dataset::dct_obs::ColumnKind;

use crate::corpus::Corpus;
use crate::error::CorpusError;
use crate::obs::{CorpusObs, CorpusObsColumn};
use crate::selection::SelectionBuilder;

/// Cells whose obs are read at once while choosing.
const BLOCK: u64 = 1 << 20;

/// A value a condition names.
#[derive(Debug, Clone, PartialEq)]
pub enum ObsValue {
    /// A category label or a string.
    Text(String),
    /// A number.
    Number(f64),
    /// A boolean.
    Bool(bool),
}

/// A condition on one obs column.
#[derive(Debug, Clone, PartialEq)]
pub enum Condition {
    /// The value is one of these (categories by label, strings, numbers exactly, booleans).
    OneOf(Vec<ObsValue>),
    /// A number column's value lies in `low ..= high` (`None`: that end is open).
    Range(Option<f64>, Option<f64>),
}

/// A condition made ready for one column: which values pass.
enum Test {
    Codes(Vec<bool>),
    Texts(std::collections::HashSet<String>),
    Numbers(Vec<f64>),
    Bools(Vec<bool>),
    Range(f64, f64),
}

impl Test {
    fn new(column: &CorpusObsColumn, condition: &Condition) -> Result<Test, CorpusError> {
        let bad = |why: String| {
            Err(CorpusError::InvalidArgument(format!("condition on obs column {:?}: {why}", column.name)))
        };
        match (column.kind, condition) {
            (ColumnKind::Category, Condition::OneOf(values)) => {
                let cats = column.categories.as_deref().unwrap_or_default();
                let mut pass = vec![false; cats.len()];
                for v in values {
                    match v {
                        ObsValue::Text(label) => {
                            if let Some(i) = cats.iter().position(|c| c == label) {
                                pass[i] = true;
                            }
                        }
                        other => return bad(format!("{other:?} is not a category label")),
                    }
                }
                Ok(Test::Codes(pass))
            }
            (ColumnKind::String, Condition::OneOf(values)) => {
                let texts = each(column, values, "a string", |v| match v {
                    ObsValue::Text(t) => Some(t.clone()),
                    _ => None,
                })?;
                Ok(Test::Texts(texts.into_iter().collect()))
            }
            (ColumnKind::Numeric, Condition::OneOf(values)) => each(column, values, "a number", |v| match v {
                ObsValue::Number(x) => Some(*x),
                _ => None,
            })
            .map(Test::Numbers),
            (ColumnKind::Bool, Condition::OneOf(values)) => each(column, values, "a boolean", |v| match v {
                ObsValue::Bool(b) => Some(*b),
                _ => None,
            })
            .map(Test::Bools),
            (ColumnKind::Numeric, Condition::Range(lo, hi)) => {
                Ok(Test::Range(lo.unwrap_or(f64::NEG_INFINITY), hi.unwrap_or(f64::INFINITY)))
            }
            (kind, Condition::Range(..)) => {
                bad(format!("a range needs a number column; this one is {}", kind.as_str()))
            }
        }
    }

    /// Whether each value of `a` (the column's values of a block) passes; missing values never do.
    fn eval(&self, a: &ArrayRef, out: &mut [bool]) {
        match self {
            Test::Codes(pass) => {
                let codes = a.as_primitive::<Int32Type>();
                for (o, c) in out.iter_mut().zip(codes.iter()) {
                    *o &= c.and_then(|c| pass.get(c as usize).copied()).unwrap_or(false);
                }
            }
            Test::Texts(set) => {
                for (o, v) in out.iter_mut().zip(a.as_string::<i32>().iter()) {
                    *o &= v.is_some_and(|v| set.contains(v));
                }
            }
            Test::Numbers(values) => {
                let x = numbers(a);
                for (o, v) in out.iter_mut().zip(x.iter()) {
                    *o &= v.is_some_and(|v| values.contains(&v));
                }
            }
            Test::Range(lo, hi) => {
                let x = numbers(a);
                for (o, v) in out.iter_mut().zip(x.iter()) {
                    *o &= v.is_some_and(|v| *lo <= v && v <= *hi);
                }
            }
            Test::Bools(values) => {
                for (o, v) in out.iter_mut().zip(a.as_boolean().iter()) {
                    *o &= v.is_some_and(|v| values.contains(&v));
                }
            }
        }
    }
}

/// The values of a one-of condition as `T` (`pick`), or the error naming the column and the value that is not
/// `what`.
fn each<T>(
    column: &CorpusObsColumn,
    values: &[ObsValue],
    what: &str,
    pick: impl Fn(&ObsValue) -> Option<T>,
) -> Result<Vec<T>, CorpusError> {
    values
        .iter()
        .map(|v| {
            pick(v).ok_or_else(|| {
                CorpusError::InvalidArgument(format!("condition on obs column {:?}: {v:?} is not {what}", column.name))
            })
        })
        .collect()
}

fn numbers(a: &ArrayRef) -> arrow_array::Float64Array {
    let x = arrow_cast::cast(a, &DataType::Float64)
        .unwrap_or_else(|_| arrow_array::new_null_array(&DataType::Float64, a.len()));
    x.as_primitive::<Float64Type>().clone()
}

impl Corpus {
    /// The cells whose obs meet every condition (`(column, condition)` pairs, combined with AND), as a corpus of
    /// their own. An unknown column is refused naming the corpus's columns; a condition that does not fit its
    /// column's kind (a range on a category column, a number for a string column) is refused naming both.
    pub fn filter(&self, obs: &CorpusObs, conditions: &[(String, Condition)]) -> Result<Corpus, CorpusError> {
        let mut tests = Vec::with_capacity(conditions.len());
        for (name, condition) in conditions {
            tests.push(Test::new(obs.column(name)?, condition)?);
        }
        let names: Vec<&str> = conditions.iter().map(|(n, _)| n.as_str()).collect();
        obs.localize(self, &names)?;
        let mut chosen = SelectionBuilder::default();
        let n = self.n_cells();
        let mut lo = 0;
        while lo < n {
            let hi = (lo + BLOCK).min(n);
            let cells: Vec<u64> = (lo..hi).collect();
            let values = obs.take(self, &cells, &names)?;
            let mut pass = vec![true; cells.len()];
            for (test, (_, array)) in tests.iter().zip(&values) {
                test.eval(array, &mut pass);
            }
            for (&c, _) in cells.iter().zip(&pass).filter(|(_, p)| **p) {
                chosen.push(self.selection().base_cell(c, 0)?);
            }
            lo = hi;
        }
        self.with_selection(chosen.finish())
    }

    /// Disjoint parts covering every cell, one per `(name, fraction)` (fractions summing to 1): each cell, or with
    /// `by` each group of cells sharing that obs column's value (cells missing it form one group), goes to the
    /// part its seeded hash falls in. The same `(fractions, by, seed)` always gives the same parts, also after
    /// members are added at the end, since a group's part depends on its value (or a cell's on its member's
    /// name and its place in that member) alone; parts come as close to the fractions as the groups' sizes allow
    /// by chance, not by search.
    pub fn split(
        &self,
        obs: &CorpusObs,
        fractions: &[(String, f64)],
        by: Option<&str>,
        seed: u64,
    ) -> Result<Vec<(String, Corpus)>, CorpusError> {
        if fractions.is_empty() || fractions.iter().any(|(_, f)| !(f.is_finite() && *f >= 0.0)) {
            return Err(CorpusError::InvalidArgument("split fractions must be finite and not negative".into()));
        }
        let total: f64 = fractions.iter().map(|(_, f)| f).sum();
        if (total - 1.0).abs() > 1e-6 {
            return Err(CorpusError::InvalidArgument(format!("split fractions add up to {total}, not 1")));
        }
        let mut bounds = Vec::with_capacity(fractions.len());
        let mut acc = 0.0;
        for (_, f) in fractions {
            acc += f;
            bounds.push(acc);
        }
        let column = by.map(|c| obs.column(c)).transpose()?;
        if let Some(c) = by {
            obs.localize(self, &[c])?;
        }
        let member_hash: Vec<u64> = self.members().iter().map(|m| fnv(m.name.as_bytes())).collect();
        let mut parts: Vec<SelectionBuilder> = (0..fractions.len()).map(|_| SelectionBuilder::default()).collect();
        let n = self.n_cells();
        let mut lo = 0;
        while lo < n {
            let hi = (lo + BLOCK).min(n);
            let cells: Vec<u64> = (lo..hi).collect();
            let keys: Vec<u64> = match (by, column) {
                (Some(name), Some(column)) => {
                    let values = obs.take(self, &cells, &[name])?;
                    group_keys(column, &values[0].1)
                }
                _ => self.locate(&cells)?.iter().map(|&(m, local)| mix(member_hash[m as usize], local)).collect(),
            };
            for (&c, &key) in cells.iter().zip(&keys) {
                let u = (mix(seed, key) >> 11) as f64 / (1u64 << 53) as f64;
                let part = bounds.iter().position(|&b| u < b).unwrap_or(bounds.len() - 1);
                parts[part].push(self.selection().base_cell(c, 0)?);
            }
            lo = hi;
        }
        fractions
            .iter()
            .zip(parts)
            .map(|((name, _), builder)| Ok((name.clone(), self.with_selection(builder.finish())?)))
            .collect()
    }
}

/// Each value's group key: a hash of its text (category label, string, number, boolean); missing values share one.
fn group_keys(column: &CorpusObsColumn, a: &ArrayRef) -> Vec<u64> {
    const MISSING: u64 = 0x9e37_79b9_7f4a_7c15;
    match column.kind {
        ColumnKind::Category => {
            let cats = column.categories.as_deref().unwrap_or_default();
            let hashes: Vec<u64> = cats.iter().map(|c| fnv(c.as_bytes())).collect();
            a.as_primitive::<Int32Type>()
                .iter()
                .map(|c| c.and_then(|c| hashes.get(c as usize).copied()).unwrap_or(MISSING))
                .collect()
        }
        _ => {
            let text = arrow_cast::cast(a, &DataType::Utf8)
                .unwrap_or_else(|_| arrow_array::new_null_array(&DataType::Utf8, a.len()));
            text.as_string::<i32>().iter().map(|v| v.map_or(MISSING, |v| fnv(v.as_bytes()))).collect()
        }
    }
}

/// FNV-1a, 64 bits: a stable hash of bytes (the same on every platform and run).
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// splitmix64 of two words: a well-mixed, stable hash.
fn mix(a: u64, b: u64) -> u64 {
    let mut z = a.wrapping_add(b.wrapping_mul(0x9e37_79b9_7f4a_7c15)).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
