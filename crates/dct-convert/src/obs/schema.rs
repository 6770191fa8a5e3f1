//! Plan time: every input's obs summarized once, and one global schema built from the summaries.

use std::collections::HashSet;

use dct_input::{Column, ColumnData as InputData, Frame};
use dct_obs::{ArrowType, ObsSchema, ObsSchemaBuilder};

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
    /// A categorical column with these categories, ordered.
    OrderedCategory(Vec<String>),
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
pub(super) fn plain_type(column: &Column) -> ArrowType {
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
        InputData::Int(_) | InputData::NullableInt { .. } | InputData::UInt(_) | InputData::NullableUInt { .. } => {
            match t {
                "i8" => ArrowType::Int8,
                "i16" => ArrowType::Int16,
                "i32" => ArrowType::Int32,
                "u8" => ArrowType::UInt8,
                "u16" => ArrowType::UInt16,
                "u32" => ArrowType::UInt32,
                "u64" => ArrowType::UInt64,
                _ if matches!(column.data, InputData::UInt(_) | InputData::NullableUInt { .. }) => ArrowType::UInt64,
                _ => ArrowType::Int64,
            }
        }
    }
}

/// Summarizes the selected obs columns of one input's obs frame.
pub(crate) fn summarize(frame: &Frame, selection: Selection<'_>, max_categories: usize) -> InputSummary {
    let mut columns = Vec::new();
    for c in frame.columns.iter().filter(|c| selection.keeps(&c.name)) {
        let contribution = match &c.data {
            InputData::Categorical { categories, .. } if categories.len() > max_categories => Contribution::Overflow,
            InputData::Categorical { categories, ordered: true, .. } => {
                Contribution::OrderedCategory(categories.clone())
            }
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
                Contribution::OrderedCategory(categories) => builder.add_category_ordered(name, categories, true),
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
