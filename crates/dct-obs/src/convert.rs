//! Obs input in stored form: each column of a tile's [`TileObs`] translated to the schema's Arrow type (category
//! labels to global codes, numbers widened), as the shards store it. Used by the shard encoder and by callers
//! that want the stored form without writing (the Python package's `ObsSchema.encode`).

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::StringBuilder;
use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, Int8Array, Int16Array, Int32Array, RecordBatch, new_null_array};
use arrow_schema::{DataType, SchemaRef};

use crate::data::{CategoryData, ColumnData, TileObs};
use crate::error::{ObsError, Result};
use crate::infer::{arrow_type_of, promote};
use crate::schema::{ArrowType, ColumnKind, ObsColumn, ObsSchema};

/// Translates the columns of tiles to their stored form, tile after tile (remembering the last local vocabulary of
/// each category column, so the tiles of one input translate their codes once).
#[derive(Debug)]
pub(crate) struct TileConverter {
    arrow_schema: SchemaRef,
    columns: Vec<Converter>,
}

impl TileConverter {
    pub(crate) fn new(schema: &ObsSchema) -> Self {
        TileConverter {
            arrow_schema: schema.arrow_schema(),
            columns: schema.columns.iter().cloned().map(Converter::new).collect(),
        }
    }

    /// Tile `t` (for messages) of `rows` cells in stored form: every column must have `rows` values; schema columns
    /// the tile lacks become missing values; a column the schema lacks is an error.
    pub(crate) fn convert(&mut self, tile: &TileObs, rows: usize, t: usize) -> Result<RecordBatch> {
        for (name, _) in &tile.columns {
            if !self.columns.iter().any(|c| c.name() == name) {
                return Err(ObsError::input(
                    Some(name),
                    format!("tile {t} has a column the schema lacks; add every input to the schema builder"),
                ));
            }
        }
        let arrays = self
            .columns
            .iter_mut()
            .map(|c| {
                let data = tile.get(&c.column.name);
                c.convert(data, rows).map_err(|e| match e {
                    ObsError::Input { column, message } => {
                        ObsError::Input { column, message: format!("tile {t}: {message}") }
                    }
                    e => e,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        RecordBatch::try_new(self.arrow_schema.clone(), arrays)
            .map_err(|e| ObsError::arrow(format!("assembling obs tile {t}"), e))
    }
}

/// The obs of `rows` cells in the stored form of `schema` (what a shard's row group for them holds), without
/// writing anything: category columns as global codes (-1 for missing), numbers widened to the schema's types.
pub fn encode_obs(schema: &ObsSchema, obs: &TileObs, rows: usize) -> Result<RecordBatch> {
    TileConverter::new(schema).convert(obs, rows, 0)
}

/// Translates one column's inputs to its stored form.
#[derive(Debug)]
struct Converter {
    column: ObsColumn,
    /// Global code of each label, for a category column.
    index: HashMap<String, i32>,
    /// The last local vocabulary seen and its translation to global codes.
    last: Option<(Arc<[String]>, Vec<i32>)>,
}

impl Converter {
    fn new(column: ObsColumn) -> Self {
        let index = column
            .categories
            .as_deref()
            .unwrap_or_default()
            .iter()
            .enumerate()
            .map(|(i, c)| (c.clone(), i as i32))
            .collect();
        Converter { column, index, last: None }
    }

    fn name(&self) -> &str {
        &self.column.name
    }

    fn err(&self, message: impl Into<String>) -> ObsError {
        ObsError::input(Some(&self.column.name), message)
    }

    fn convert(&mut self, data: Option<&ColumnData>, rows: usize) -> Result<ArrayRef> {
        let Some(data) = data else {
            return Ok(match self.column.kind {
                ColumnKind::Category => codes_array(self.column.arrow_type, &vec![-1; rows]),
                _ => new_null_array(&self.column.arrow_type.data_type(), rows),
            });
        };
        if data.len() != rows {
            return Err(self.err(format!("has {} values but the tile has {rows} cells", data.len())));
        }
        match (self.column.kind, data) {
            (ColumnKind::Category, ColumnData::Category(c)) => {
                let map = self.local_to_global(c)?;
                let codes = translate(&c.codes, &map).map_err(|code| {
                    self.err(format!("code {code} is outside its {} categories (and is not -1)", c.categories.len()))
                })?;
                Ok(codes_array(self.column.arrow_type, &codes))
            }
            (ColumnKind::Category, ColumnData::Array(a)) if arrow_type_of(a.data_type()) == Some(ArrowType::String) => {
                let a = to_utf8(a).map_err(|e| ObsError::arrow(format!("column {:?}", self.name()), e))?;
                let a = a.as_string::<i32>();
                let mut codes = Vec::with_capacity(a.len());
                for v in a.iter() {
                    codes.push(match v {
                        None => -1,
                        Some(label) => *self
                            .index
                            .get(label)
                            .ok_or_else(|| self.err(format!("label {label:?} is not in the schema's categories")))?,
                    });
                }
                Ok(codes_array(self.column.arrow_type, &codes))
            }
            (ColumnKind::String, ColumnData::Category(c)) => {
                let mut b = StringBuilder::with_capacity(c.codes.len(), 16 * c.codes.len());
                for &code in &c.codes {
                    match usize::try_from(code).ok().and_then(|i| c.categories.get(i)) {
                        Some(label) => b.append_value(label),
                        None if code == -1 => b.append_null(),
                        None => {
                            return Err(self.err(format!(
                                "code {code} is outside its {} categories (and is not -1)",
                                c.categories.len()
                            )));
                        }
                    }
                }
                Ok(Arc::new(b.finish()))
            }
            (ColumnKind::String, ColumnData::Array(a)) if arrow_type_of(a.data_type()) == Some(ArrowType::String) => {
                to_utf8(a).map_err(|e| ObsError::arrow(format!("column {:?}", self.name()), e))
            }
            (ColumnKind::Numeric | ColumnKind::Bool, ColumnData::Array(a)) => {
                let target = self.column.arrow_type;
                let from = arrow_type_of(a.data_type());
                if from == Some(target) {
                    return Ok(a.clone());
                }
                match from {
                    Some(f) if promote(f, target) == Some(target) => arrow_cast::cast(a, &target.data_type())
                        .map_err(|e| ObsError::arrow(format!("widening column {:?} to {target}", self.name()), e)),
                    _ => Err(self.err(format!("is stored as {target} but a tile gives {}", a.data_type()))),
                }
            }
            (kind, data) => Err(self.err(format!(
                "is a {kind} column but a tile gives {}",
                data.data_type().map_or("categorical codes".to_string(), |t| t.to_string())
            ))),
        }
    }

    fn local_to_global(&mut self, c: &CategoryData) -> Result<Vec<i32>> {
        if let Some((cats, map)) = &self.last
            && Arc::ptr_eq(cats, &c.categories)
        {
            return Ok(map.clone());
        }
        let map = c
            .categories
            .iter()
            .map(|l| {
                self.index.get(l.as_str()).copied().ok_or_else(|| {
                    self.err(format!(
                        "category {l:?} is not in the schema's vocabulary; build the schema from every input first"
                    ))
                })
            })
            .collect::<Result<Vec<i32>>>()?;
        self.last = Some((c.categories.clone(), map.clone()));
        Ok(map)
    }
}

/// Global codes from local ones; `Err(code)` for a code that is neither -1 nor a local category.
fn translate(codes: &[i32], map: &[i32]) -> std::result::Result<Vec<i32>, i32> {
    codes
        .iter()
        .map(|&c| match usize::try_from(c) {
            Ok(i) => map.get(i).copied().ok_or(c),
            Err(_) if c == -1 => Ok(-1),
            Err(_) => Err(c),
        })
        .collect()
}

/// A code array of the code type `t` (int8 / int16 / int32); the codes fit by construction of the schema.
fn codes_array(t: ArrowType, codes: &[i32]) -> ArrayRef {
    match t {
        ArrowType::Int8 => Arc::new(Int8Array::from_iter_values(codes.iter().map(|&c| c as i8))),
        ArrowType::Int16 => Arc::new(Int16Array::from_iter_values(codes.iter().map(|&c| c as i16))),
        _ => Arc::new(Int32Array::from_iter_values(codes.iter().copied())),
    }
}

fn to_utf8(a: &ArrayRef) -> std::result::Result<ArrayRef, arrow_schema::ArrowError> {
    if a.data_type() == &DataType::Utf8 { Ok(a.clone()) } else { arrow_cast::cast(a, &DataType::Utf8) }
}
