//! Obs (per-cell metadata) and the gene table of a conversion.
//!
//! * At plan time every `.h5ad` input's obs is read once ([`summarize`]) and [`build_schema`] makes ONE global
//!   schema: the cell names as `obs_names` (string), then the selected columns; one vocabulary per categorical column
//!   (the union over inputs, in order of first appearance), vocabularies above `max_categories` stored as strings,
//!   numeric types widened across inputs. The exact `obs/schema.json` text goes into the plan, so parts and finalize
//!   agree and the plan's fingerprint covers it.
//! * At finalize each input's obs is read again and converted to the schema ([`InputObs::read`]: categorical codes
//!   remapped to the global vocabulary, NaN floats as nulls, types widened), then cut into tiles across input
//!   boundaries ([`TileCutter`], exactly one row group per tile) and handed to the `dct-obs` shard writer.
//! * [`var_table`]: the gene table of the first input in output column order, for `var.parquet`.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use arrow_array::{
    Array, ArrayRef, BooleanArray, Float64Array, Int64Array, StringArray, UInt32Array, UInt64Array, new_null_array,
};
use arrow_cast::{CastOptions, cast_with_options};
use arrow_schema::DataType;
use dct_input::{Column, ColumnData as InputData, Frame, GeneTable};
use dct_obs::{ArrowType, ColumnData, ColumnKind, ObsSchema, ObsSchemaBuilder, TileObs, VarTable};

use crate::error::ConvertError;

/// The obs column holding the cell names (the obs index of `.h5ad` inputs, the barcodes of 10x inputs).
pub const OBS_NAMES: &str = "obs_names";

/// Which obs columns to keep.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Selection<'a> {
    /// Only these, in this order (`None`: every column).
    pub(crate) columns: Option<&'a [String]>,
    /// Never these.
    pub(crate) exclude: &'a [String],
}

impl Selection<'_> {
    fn keeps(&self, name: &str) -> bool {
        self.columns.is_none_or(|c| c.iter().any(|n| n == name)) && !self.exclude.iter().any(|n| n == name)
    }
}

/// What one obs column of one input contributes to the schema (serialized in per-input scan files).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
enum Contribution {
    /// A categorical column with these categories.
    Category(Vec<String>),
    /// A categorical column with more categories than `max_categories`: stored as strings.
    Overflow,
    /// A numeric, boolean or string column.
    Plain(#[serde(with = "arrow_type_name")] ArrowType),
    /// A column the input reader could not read, and why.
    Unsupported(String),
}

/// An [`ArrowType`] as its `schema.json` name.
mod arrow_type_name {
    use dct_obs::ArrowType;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(t: &ArrowType, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(t.as_str())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ArrowType, D::Error> {
        let name = String::deserialize(d)?;
        ArrowType::parse(&name).ok_or_else(|| serde::de::Error::custom(format!("unknown Arrow type {name:?}")))
    }
}

/// The obs columns of one input, as far as the schema needs them (categories only up to `max_categories`, so a
/// plan never holds more than that many labels per column and input).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct InputSummary {
    /// The selected columns.
    columns: Vec<(String, Contribution)>,
    /// Every column of the input (to check the names given in a selection).
    names: Vec<String>,
}

/// The Arrow type a (non-categorical) input column is stored as: its stored width, floats as float32/double.
fn plain_type(column: &Column) -> ArrowType {
    let t = column.stored_type.as_str();
    match &column.data {
        InputData::Str(_) | InputData::NullableStr { .. } | InputData::Categorical { .. } => ArrowType::String,
        InputData::Bool(_) | InputData::NullableBool { .. } => ArrowType::Bool,
        InputData::Float(_) => {
            if t == "f32" {
                ArrowType::Float
            } else {
                ArrowType::Double
            }
        }
        InputData::Int(_) | InputData::NullableInt { .. } | InputData::UInt(_) => match t {
            "i8" => ArrowType::Int8,
            "i16" => ArrowType::Int16,
            "i32" => ArrowType::Int32,
            "u8" => ArrowType::UInt8,
            "u16" => ArrowType::UInt16,
            "u32" => ArrowType::UInt32,
            "u64" => ArrowType::UInt64,
            _ if matches!(column.data, InputData::UInt(_)) => ArrowType::UInt64,
            _ => ArrowType::Int64,
        },
    }
}

/// Summarizes the selected obs columns of one input's obs frame.
pub(crate) fn summarize(frame: &Frame, selection: Selection<'_>, max_categories: usize) -> InputSummary {
    let mut columns = Vec::new();
    for c in frame.columns.iter().filter(|c| selection.keeps(&c.name)) {
        let contribution = match &c.data {
            InputData::Categorical { categories, .. } if categories.len() > max_categories => Contribution::Overflow,
            InputData::Categorical { categories, .. } => Contribution::Category(categories.clone()),
            _ => Contribution::Plain(plain_type(c)),
        };
        columns.push((c.name.clone(), contribution));
    }
    for (name, why) in frame.skipped.iter().filter(|(n, _)| selection.keeps(n)) {
        columns.push((name.clone(), Contribution::Unsupported(why.clone())));
    }
    let names = frame.columns.iter().map(|c| c.name.clone()).chain(frame.skipped.iter().map(|(n, _)| n.clone()));
    InputSummary { columns, names: names.collect() }
}

/// Builds the global obs schema from every input's summary (`None` for inputs without obs beyond cell names), in
/// input order. Returns `None` when no column is selected.
pub(crate) fn build_schema(
    inputs: &[(&str, Option<&InputSummary>)],
    selection: Selection<'_>,
    max_categories: usize,
) -> Result<Option<ObsSchema>, ConvertError> {
    let mut available: Vec<&str> = Vec::new();
    let mut seen: HashSet<&str> = HashSet::from([OBS_NAMES]);
    for (_, summary) in inputs {
        for name in summary.map(|s| s.names.as_slice()).unwrap_or_default() {
            if seen.insert(name) {
                available.push(name);
            }
        }
    }
    available.push(OBS_NAMES);
    let listed = selection.columns.unwrap_or_default().iter().chain(selection.exclude);
    for name in listed {
        if !seen.contains(name.as_str()) {
            return Err(ConvertError::Inputs(format!(
                "obs column {name:?} (given with --obs-columns or --obs-exclude) is in no input; the inputs' obs \
                 columns are {}",
                available.iter().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", ")
            )));
        }
    }
    let mut builder = ObsSchemaBuilder::with_max_categories(max_categories);
    for (path, summary) in inputs {
        let Some(summary) = summary else { continue };
        for (name, contribution) in &summary.columns {
            let added = match contribution {
                _ if name == OBS_NAMES => {
                    return Err(ConvertError::Inputs(format!(
                        "{path}: its obs has a column named {OBS_NAMES:?}, the name the converter gives the cell \
                         names; rename that column in the input (with --obs-exclude {OBS_NAMES} both are left out)"
                    )));
                }
                Contribution::Unsupported(why) => {
                    return Err(ConvertError::Inputs(format!(
                        "{path}: obs column {name:?} cannot be converted ({why}); leave it out with --obs-exclude \
                         {name}, choose columns with --obs-columns, or convert it to strings, numbers or a \
                         categorical in the input"
                    )));
                }
                Contribution::Category(categories) => builder.add_category(name, categories),
                Contribution::Overflow => builder.add_plain(name, ArrowType::String),
                Contribution::Plain(t) => builder.add_plain(name, *t),
            };
            added.map_err(|e| ConvertError::Inputs(format!("{path}: {e}")))?;
        }
    }
    // The cell names come last, after the inputs' columns, as the original converter orders them (so schema.json
    // and the obs fingerprint are byte-equal to its for the same inputs).
    if selection.keeps(OBS_NAMES) {
        builder.add_plain(OBS_NAMES, ArrowType::String).map_err(|e| ConvertError::Inputs(e.to_string()))?;
    }
    let mut schema = builder.finish();
    if let Some(order) = selection.columns {
        let rank = |name: &str| order.iter().position(|n| n == name).unwrap_or(usize::MAX);
        schema.columns.sort_by_key(|c| rank(&c.name));
    }
    if schema.columns.is_empty() {
        return Ok(None);
    }
    let schema = ObsSchema::new(schema.columns).map_err(|e| ConvertError::Inputs(e.to_string()))?;
    Ok(Some(schema))
}

/// One schema column of one input, converted to its stored form.
#[derive(Debug, Clone)]
enum Piece {
    /// Global category codes (-1 = missing).
    Codes(Vec<i32>),
    /// Values of the schema's Arrow type.
    Array(ArrayRef),
    /// The input lacks the column: every value is missing.
    Missing,
}

impl Piece {
    fn slice(&self, offset: usize, len: usize) -> Piece {
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
    schema: ObsSchema,
    vocab: Vec<Option<Vocabulary>>,
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
    n_cells: usize,
    pieces: Vec<Piece>,
}

fn changed(path: &str, name: &str, what: String) -> ConvertError {
    ConvertError::Inputs(format!(
        "{path}: obs column {name:?} {what}, which the plan's obs schema does not allow: the input changed since the \
         plan was made; make a new plan"
    ))
}

fn cast_to(a: ArrayRef, t: ArrowType, path: &str, name: &str) -> Result<ArrayRef, ConvertError> {
    let target = t.data_type();
    if a.data_type() == &target {
        return Ok(a);
    }
    // Not `safe`: a value that does not fit is an error, never a silent null.
    let opts = CastOptions { safe: false, ..CastOptions::default() };
    cast_with_options(&a, &target, &opts).map_err(|e| changed(path, name, format!("does not fit {t} ({e})")))
}

/// An input column's values as an Arrow array (categoricals as their labels; NaN floats, masked values and missing
/// codes as nulls), of the widest type of its kind; [`cast_to`] narrows it.
fn natural_array(data: InputData) -> ArrayRef {
    match data {
        InputData::Str(v) => Arc::new(StringArray::from(v)),
        InputData::Int(v) => Arc::new(Int64Array::from(v)),
        InputData::UInt(v) => Arc::new(UInt64Array::from(v)),
        InputData::Float(v) => Arc::new(v.into_iter().map(|x| (!x.is_nan()).then_some(x)).collect::<Float64Array>()),
        InputData::Bool(v) => Arc::new(BooleanArray::from(v)),
        InputData::NullableInt { values, valid } => {
            Arc::new(values.into_iter().zip(valid).map(|(v, ok)| ok.then_some(v)).collect::<Int64Array>())
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
                (ColumnKind::Numeric, d @ InputData::NullableInt { .. }) => {
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
        InputData::UInt(_) => "unsigned integers",
        InputData::Float(_) => "floats",
        InputData::Bool(_) | InputData::NullableBool { .. } => "booleans",
        InputData::Categorical { .. } => "categorical",
    }
}

/// Cuts the inputs' obs, in order, into tiles of `tile_cells[t]` cells that cross input boundaries.
pub(crate) struct TileCutter<'a> {
    plan: &'a SchemaPlan,
    tile_cells: &'a [u64],
    next_tile: usize,
    filled: usize,
    /// Per schema column, the pieces of the tile being assembled, with their lengths.
    parts: Vec<Vec<(Piece, usize)>>,
}

impl<'a> TileCutter<'a> {
    pub(crate) fn new(plan: &'a SchemaPlan, tile_cells: &'a [u64]) -> Self {
        TileCutter { plan, tile_cells, next_tile: 0, filled: 0, parts: vec![Vec::new(); plan.schema.columns.len()] }
    }

    /// Adds the next input's cells; `emit` receives each tile they complete, in order.
    pub(crate) fn push(
        &mut self,
        input: &InputObs,
        mut emit: impl FnMut(usize, TileObs) -> Result<(), ConvertError>,
    ) -> Result<(), ConvertError> {
        let mut offset = 0;
        while offset < input.n_cells {
            let Some(&rows) = self.tile_cells.get(self.next_tile) else {
                return Err(ConvertError::Inputs(format!(
                    "the inputs hold more cells than the plan's {} tiles: an input changed since the plan was made; \
                     make a new plan",
                    self.tile_cells.len()
                )));
            };
            let take = (rows as usize - self.filled).min(input.n_cells - offset);
            for (parts, piece) in self.parts.iter_mut().zip(&input.pieces) {
                parts.push((piece.slice(offset, take), take));
            }
            offset += take;
            self.filled += take;
            if self.filled == rows as usize {
                let tile = self.assemble()?;
                emit(self.next_tile, tile)?;
                self.next_tile += 1;
                self.filled = 0;
            }
        }
        Ok(())
    }

    fn assemble(&mut self) -> Result<TileObs, ConvertError> {
        let mut tile = TileObs::new();
        for ((column, vocab), parts) in self.plan.schema.columns.iter().zip(&self.plan.vocab).zip(&mut self.parts) {
            let parts = std::mem::take(parts);
            let data = match vocab {
                Some((categories, _)) => {
                    let mut codes = Vec::with_capacity(parts.iter().map(|(_, n)| n).sum());
                    for (piece, n) in parts {
                        match piece {
                            Piece::Codes(c) => codes.extend_from_slice(&c),
                            _ => codes.extend(std::iter::repeat_n(-1, n)),
                        }
                    }
                    ColumnData::category(codes, categories.clone())
                }
                None => {
                    let t: DataType = column.arrow_type.data_type();
                    let arrays: Vec<ArrayRef> = parts
                        .into_iter()
                        .map(|(piece, n)| match piece {
                            Piece::Array(a) => a,
                            _ => new_null_array(&t, n),
                        })
                        .collect();
                    let array = if arrays.len() == 1 {
                        arrays.into_iter().next().expect("one array")
                    } else {
                        let refs: Vec<&dyn Array> = arrays.iter().map(|a| a.as_ref()).collect();
                        arrow_select::concat::concat(&refs).map_err(|e| {
                            ConvertError::Inputs(format!("joining obs column {:?} across inputs: {e}", column.name))
                        })?
                    };
                    ColumnData::Array(array)
                }
            };
            tile.push(column.name.clone(), data);
        }
        Ok(tile)
    }

    /// Checks that every tile was completed.
    pub(crate) fn finish(self) -> Result<(), ConvertError> {
        if self.next_tile != self.tile_cells.len() || self.filled != 0 {
            return Err(ConvertError::Inputs(format!(
                "the inputs' obs filled {} of the plan's {} tiles: an input changed since the plan was made; make a \
                 new plan",
                self.next_tile,
                self.tile_cells.len()
            )));
        }
        Ok(())
    }
}

/// The gene table of `source` in output column order (`gene_order[j]` is the source gene of column `j`), with its
/// index (the gene names) and every var column the reader could type (categoricals as strings; NaN floats as
/// nulls). Returns the var columns left out, with the reason.
pub(crate) fn var_table(
    genes: &GeneTable,
    gene_order: &[u32],
    path: &Path,
) -> Result<(VarTable, Vec<(String, String)>), ConvertError> {
    let index_name = (genes.index_name != "_index").then(|| genes.index_name.clone());
    let index: Vec<String> = gene_order.iter().map(|&g| genes.names[g as usize].clone()).collect();
    let take = UInt32Array::from(gene_order.to_vec());
    let mut skipped = genes.skipped.clone();
    let mut columns = Vec::with_capacity(genes.columns.len());
    let index_field = index_name.as_deref().unwrap_or("__index_level_0__");
    for c in &genes.columns {
        if c.name == index_field {
            skipped.push((c.name.clone(), "it has the name of the index".into()));
            continue;
        }
        if c.data.len() != genes.names.len() {
            skipped.push((c.name.clone(), format!("{} values for {} genes", c.data.len(), genes.names.len())));
            continue;
        }
        let natural = natural_array(c.data.clone());
        let stored = cast_to(natural, plain_type(c), &path.display().to_string(), &c.name)?;
        let ordered = arrow_select::take::take(&stored, &take, None)
            .map_err(|e| ConvertError::Inputs(format!("{}: var column {:?}: {e}", path.display(), c.name)))?;
        columns.push((c.name.clone(), ordered));
    }
    Ok((VarTable { index_name, index, columns }, skipped))
}

#[cfg(test)]
mod tests;
