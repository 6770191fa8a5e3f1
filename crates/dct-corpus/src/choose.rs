//! Choosing cells by their obs: [`Corpus::filter`] (conditions on columns; [`Corpus::split`], in `split.rs`, cuts
//! parts). Columns are read a block of cells at a time, so memory is one block's values and the cells chosen,
//! whatever the corpus's size.

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
pub(crate) const BLOCK: u64 = 1 << 20;

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
    /// Strings equal to one of the texts, or reading as one of the numbers.
    Texts(std::collections::HashSet<String>, Vec<f64>),
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
                        // Categories of numbers (pandas' `Categorical([1, 2, 3])`) are stored as their text: a
                        // number names the labels that read as it, as pandas' `isin([1])` does.
                        ObsValue::Number(x) => {
                            for (i, c) in cats.iter().enumerate() {
                                if c.trim().parse::<f64>().is_ok_and(|v| v == *x) {
                                    pass[i] = true;
                                }
                            }
                        }
                        other => return bad(format!("{other:?} is not a category label")),
                    }
                }
                Ok(Test::Codes(pass))
            }
            (ColumnKind::String, Condition::OneOf(values)) => {
                // A number names the strings that read as it, as for categories of numbers (a column stored as
                // categories in one member and as strings in another is strings, and takes the same conditions).
                let texts = each(column, values, "a string or a number", |v| match v {
                    ObsValue::Text(t) => Some((Some(t.clone()), None)),
                    ObsValue::Number(x) => Some((None, Some(*x))),
                    _ => None,
                })?;
                let (texts, numbers): (Vec<_>, Vec<_>) = texts.into_iter().unzip();
                Ok(Test::Texts(texts.into_iter().flatten().collect(), numbers.into_iter().flatten().collect()))
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
            Test::Texts(set, numbers) => {
                let reads_as =
                    |v: &str| !numbers.is_empty() && v.trim().parse::<f64>().is_ok_and(|x| numbers.contains(&x));
                for (o, v) in out.iter_mut().zip(a.as_string::<i32>().iter()) {
                    *o &= v.is_some_and(|v| set.contains(v) || reads_as(v));
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
}
