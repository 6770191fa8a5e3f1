//! Finalize time: the schema as the converter uses it (vocabularies and their codes), and each input's obs read
//! again and converted to it.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, BooleanArray, Float64Array, Int64Array, StringArray, UInt64Array};
use arrow_cast::{CastOptions, cast_with_options};
use dct_input::{ColumnData as InputData, Frame};
use dct_obs::{ArrowType, ColumnKind, ObsSchema};

use super::schema::OBS_NAMES;
use crate::error::ConvertError;

/// One schema column of one input, converted to its stored form.
#[derive(Debug, Clone)]
pub(super) enum Piece {
    /// Global category codes (-1 = missing).
    Codes(Vec<i32>),
    /// Values of the schema's Arrow type.
    Array(ArrayRef),
    /// The input lacks the column: every value is missing.
    Missing,
}

impl Piece {
    pub(super) fn slice(&self, offset: usize, len: usize) -> Piece {
        match self {
            Piece::Codes(c) => Piece::Codes(c[offset..offset + len].to_vec()),
            Piece::Array(a) => Piece::Array(a.slice(offset, len)),
            Piece::Missing => Piece::Missing,
        }
    }
}

/// A category column's global vocabulary (shared by every tile) and the code of each label.
type Vocabulary = (Arc<[String]>, HashMap<String, i32>);

/// The converter's view of the schema: each column with, for categories, its global vocabulary and label index.
pub(crate) struct SchemaPlan {
    pub(super) schema: ObsSchema,
    pub(super) vocab: Vec<Option<Vocabulary>>,
    needs_frame: bool,
}

impl SchemaPlan {
    pub(crate) fn new(schema: ObsSchema) -> Self {
        let vocab = schema
            .columns
            .iter()
            .map(|c| {
                c.categories.as_ref().map(|cats| {
                    let index = cats.iter().enumerate().map(|(i, l)| (l.clone(), i as i32)).collect();
                    (Arc::from(cats.clone()), index)
                })
            })
            .collect();
        let needs_frame = schema.columns.iter().any(|c| c.name != OBS_NAMES);
        SchemaPlan { schema, vocab, needs_frame }
    }

    /// The schema.
    pub(crate) fn schema(&self) -> &ObsSchema {
        &self.schema
    }

    /// Whether any column comes from an input's obs frame (not only the cell names).
    pub(crate) fn needs_frame(&self) -> bool {
        self.needs_frame
    }
}

/// One input's obs converted to the schema: one piece per schema column, `n_cells` values each.
pub(crate) struct InputObs {
    pub(super) n_cells: usize,
    pub(super) pieces: Vec<Piece>,
}

fn changed(path: &str, name: &str, what: String) -> ConvertError {
    ConvertError::Inputs(format!(
        "{path}: obs column {name:?} {what}, which the plan's obs schema does not allow: the input changed since the \
         plan was made; make a new plan"
    ))
}

pub(super) fn cast_to(a: ArrayRef, t: ArrowType, path: &str, name: &str) -> Result<ArrayRef, ConvertError> {
    let target = t.data_type();
    if a.data_type() == &target {
        return Ok(a);
    }
    // Not `safe`: a value that does not fit is an error, never a silent null.
    let opts = CastOptions { safe: false, ..CastOptions::default() };
    cast_with_options(&a, &target, &opts).map_err(|e| changed(path, name, format!("does not fit {t} ({e})")))
}

/// [`natural_array`] of borrowed values (strings copied once, into the array).
pub(super) fn natural_array_of(data: &InputData) -> ArrayRef {
    match data {
        InputData::Str(v) => Arc::new(StringArray::from_iter_values(v)),
        InputData::NullableStr { values, valid } => {
            Arc::new(values.iter().zip(valid).map(|(v, &ok)| ok.then_some(v)).collect::<StringArray>())
        }
        InputData::Categorical { codes, categories, .. } => Arc::new(
            codes
                .iter()
                .map(|&c| usize::try_from(c).ok().and_then(|i| categories.get(i)).map(String::as_str))
                .collect::<StringArray>(),
        ),
        other => natural_array(other.clone()),
    }
}

/// An input column's values as an Arrow array (categoricals as their labels; NaN floats, masked values and missing
/// codes as nulls), of the widest type of its kind; [`cast_to`] narrows it.
pub(super) fn natural_array(data: InputData) -> ArrayRef {
    match data {
        InputData::Str(v) => Arc::new(StringArray::from(v)),
        InputData::Int(v) => Arc::new(Int64Array::from(v)),
        InputData::UInt(v) => Arc::new(UInt64Array::from(v)),
        InputData::Float(v) => Arc::new(v.into_iter().map(|x| (!x.is_nan()).then_some(x)).collect::<Float64Array>()),
        InputData::Bool(v) => Arc::new(BooleanArray::from(v)),
        InputData::NullableInt { values, valid } => {
            Arc::new(values.into_iter().zip(valid).map(|(v, ok)| ok.then_some(v)).collect::<Int64Array>())
        }
        InputData::NullableUInt { values, valid } => {
            Arc::new(values.into_iter().zip(valid).map(|(v, ok)| ok.then_some(v)).collect::<UInt64Array>())
        }
        InputData::NullableBool { values, valid } => {
            Arc::new(values.into_iter().zip(valid).map(|(v, ok)| ok.then_some(v)).collect::<BooleanArray>())
        }
        InputData::NullableStr { values, valid } => {
            Arc::new(values.into_iter().zip(valid).map(|(v, ok)| ok.then_some(v)).collect::<StringArray>())
        }
        InputData::Categorical { codes, categories, .. } => Arc::new(
            codes
                .into_iter()
                .map(|c| usize::try_from(c).ok().and_then(|i| categories.get(i)).map(String::as_str))
                .collect::<StringArray>(),
        ),
    }
}

impl InputObs {
    /// Converts one input's obs: `frame` (its obs data frame, or `None` for inputs without one) and its
    /// `cell_names`. Columns the input lacks are missing values; columns of the input the schema lacks are dropped.
    pub(crate) fn read(
        plan: &SchemaPlan,
        path: &str,
        frame: Option<Frame>,
        cell_names: Vec<String>,
    ) -> Result<InputObs, ConvertError> {
        let n_cells = cell_names.len();
        let mut by_name: HashMap<String, InputData> = HashMap::new();
        if let Some(frame) = frame {
            for c in frame.columns {
                if c.data.len() != n_cells {
                    return Err(changed(path, &c.name, format!("has {} values for {n_cells} cells", c.data.len())));
                }
                if plan.schema.column(&c.name).is_some() {
                    by_name.insert(c.name, c.data);
                }
            }
        }
        let mut cell_names = Some(cell_names);
        let mut pieces = Vec::with_capacity(plan.schema.columns.len());
        for (column, vocab) in plan.schema.columns.iter().zip(&plan.vocab) {
            let name = column.name.as_str();
            let data = if name == OBS_NAMES { cell_names.take().map(InputData::Str) } else { by_name.remove(name) };
            let Some(data) = data else {
                pieces.push(Piece::Missing);
                continue;
            };
            let piece = match (column.kind, data) {
                (ColumnKind::Category, InputData::Categorical { codes, categories, .. }) => {
                    let index = &vocab.as_ref().expect("category columns have a vocabulary").1;
                    let map = categories
                        .iter()
                        .map(|l| {
                            index.get(l).copied().ok_or_else(|| changed(path, name, format!("has category {l:?}")))
                        })
                        .collect::<Result<Vec<i32>, _>>()?;
                    let k = map.len();
                    let codes = codes
                        .into_iter()
                        .map(|c| match usize::try_from(c) {
                            Ok(i) => map.get(i).copied().ok_or(c),
                            Err(_) if c == -1 => Ok(-1),
                            Err(_) => Err(c),
                        })
                        .collect::<Result<Vec<i32>, i64>>()
                        .map_err(|c| {
                            ConvertError::Inputs(format!(
                                "{path}: obs column {name:?} has code {c}, outside its {k} categories (and not -1): \
                                 the file is malformed; re-save it with anndata"
                            ))
                        })?;
                    Piece::Codes(codes)
                }
                (ColumnKind::Category, other) => {
                    return Err(changed(path, name, format!("is {} and not categorical", kind_name(&other))));
                }
                (
                    ColumnKind::String,
                    d @ (InputData::Str(_) | InputData::NullableStr { .. } | InputData::Categorical { .. }),
                ) => Piece::Array(natural_array(d)),
                (ColumnKind::Numeric, d @ (InputData::Int(_) | InputData::UInt(_) | InputData::Float(_))) => {
                    Piece::Array(cast_to(natural_array(d), column.arrow_type, path, name)?)
                }
                (ColumnKind::Numeric, d @ (InputData::NullableInt { .. } | InputData::NullableUInt { .. })) => {
                    Piece::Array(cast_to(natural_array(d), column.arrow_type, path, name)?)
                }
                (ColumnKind::Bool, d @ (InputData::Bool(_) | InputData::NullableBool { .. })) => {
                    Piece::Array(natural_array(d))
                }
                (kind, other) => {
                    return Err(changed(
                        path,
                        name,
                        format!("is {} where the schema has a {kind} column", kind_name(&other)),
                    ));
                }
            };
            pieces.push(piece);
        }
        Ok(InputObs { n_cells, pieces })
    }

    /// Number of cells.
    pub(crate) fn n_cells(&self) -> usize {
        self.n_cells
    }
}

fn kind_name(d: &InputData) -> &'static str {
    match d {
        InputData::Str(_) | InputData::NullableStr { .. } => "strings",
        InputData::Int(_) | InputData::NullableInt { .. } => "integers",
        InputData::UInt(_) | InputData::NullableUInt { .. } => "unsigned integers",
        InputData::Float(_) => "floats",
        InputData::Bool(_) | InputData::NullableBool { .. } => "booleans",
        InputData::Categorical { .. } => "categorical",
    }
}
