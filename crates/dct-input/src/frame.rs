//! Typed data-frame columns, and the reader for AnnData data frames (`var`, `raw/var`, `obs`).

use crate::error::InputError;
use crate::h5::{H5, Node, Values, attr_bool, attr_string, join};
use hdf5_pure::{AttrValue, DType};

/// The values of one data-frame column.
#[derive(Debug, Clone, PartialEq)]
pub enum ColumnData {
    /// Strings.
    Str(Vec<String>),
    /// Signed integers (any stored width).
    Int(Vec<i64>),
    /// Unsigned integers (any stored width).
    UInt(Vec<u64>),
    /// Floating point (float32 widened exactly); NaN marks a missing value in pandas.
    Float(Vec<f64>),
    /// Booleans.
    Bool(Vec<bool>),
    /// Categorical: `codes[i]` indexes `categories`, `-1` means missing. Non-string categories are written as
    /// Python's `str()` writes them (`True`, `1`, `2.5`).
    Categorical {
        /// One code per row.
        codes: Vec<i64>,
        /// The vocabulary.
        categories: Vec<String>,
        /// Whether the categories are ordered.
        ordered: bool,
    },
    /// Nullable integers (pandas `Int64` etc.): `valid[i]` is false where the value is missing.
    NullableInt {
        /// Values (meaningless where not valid).
        values: Vec<i64>,
        /// Validity per row.
        valid: Vec<bool>,
    },
    /// Nullable unsigned integers (pandas `UInt64` etc.): `valid[i]` is false where the value is missing.
    NullableUInt {
        /// Values (meaningless where not valid).
        values: Vec<u64>,
        /// Validity per row.
        valid: Vec<bool>,
    },
    /// Nullable booleans (pandas `boolean`).
    NullableBool {
        /// Values (meaningless where not valid).
        values: Vec<bool>,
        /// Validity per row.
        valid: Vec<bool>,
    },
    /// Nullable strings (pandas `string` dtype, AnnData `nullable-string-array`): `valid[i]` is false where the
    /// value is missing (`pd.NA`).
    NullableStr {
        /// Values (meaningless where not valid).
        values: Vec<String>,
        /// Validity per row.
        valid: Vec<bool>,
    },
}

impl ColumnData {
    /// Number of rows.
    pub fn len(&self) -> usize {
        match self {
            ColumnData::Str(v) => v.len(),
            ColumnData::Int(v) => v.len(),
            ColumnData::UInt(v) => v.len(),
            ColumnData::Float(v) => v.len(),
            ColumnData::Bool(v) => v.len(),
            ColumnData::Categorical { codes, .. } => codes.len(),
            ColumnData::NullableInt { values, .. } => values.len(),
            ColumnData::NullableUInt { values, .. } => values.len(),
            ColumnData::NullableBool { values, .. } => values.len(),
            ColumnData::NullableStr { values, .. } => values.len(),
        }
    }

    /// Whether the column has no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The values as strings, for string columns, nullable string columns without missing values and categoricals
    /// without missing codes.
    pub fn as_strings(&self) -> Option<Vec<String>> {
        match self {
            ColumnData::Str(v) => Some(v.clone()),
            ColumnData::NullableStr { values, valid } => valid.iter().all(|&ok| ok).then(|| values.clone()),
            ColumnData::Categorical { codes, categories, .. } => {
                codes.iter().map(|&c| usize::try_from(c).ok().and_then(|c| categories.get(c)).cloned()).collect()
            }
            _ => None,
        }
    }
}

/// A named, typed column.
#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    /// Column name.
    pub name: String,
    /// HDF5 element type of the stored values (`f32`, `i64`, `string`, `bool`, ...), to keep widths on output.
    pub stored_type: String,
    /// Values.
    pub data: ColumnData,
}

/// A data frame read from an AnnData file.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    /// Name of the index (the `_index` attribute).
    pub index_name: String,
    /// Index values.
    pub index: Vec<String>,
    /// Columns in `column-order`.
    pub columns: Vec<Column>,
    /// Columns that could not be read (unsupported encodings), with the reason.
    pub skipped: Vec<(String, String)>,
}

impl Frame {
    /// The column called `name`.
    pub fn column(&self, name: &str) -> Option<&Column> {
        self.columns.iter().find(|c| c.name == name)
    }
}

fn string_list(v: &AttrValue) -> Option<Vec<String>> {
    match v {
        AttrValue::StringArray(a)
        | AttrValue::AsciiStringArray(a)
        | AttrValue::VarLenStringArray(a)
        | AttrValue::VarLenAsciiStringArray(a) => Some(a.clone()),
        AttrValue::StringArraySized { values, .. } | AttrValue::AsciiStringArraySized { values, .. } => {
            Some(values.clone())
        }
        other => attr_string(other).map(|s| vec![s]),
    }
}

/// Reads the AnnData data frame in `group` (current encoding: `encoding-type = dataframe`, `_index` and
/// `column-order` attributes, one dataset or group per column). Every column must have `n_rows` rows when given.
pub(crate) fn read_dataframe(h5: &H5, group: &str, n_rows: Option<u64>) -> Result<Frame, InputError> {
    let index_name = index_name(h5, group)?;
    let index = read_string_like(h5, &join(group, &index_name), n_rows)?;
    let n = index.len() as u64;
    let order = column_order(h5, group)?;
    let mut columns = Vec::new();
    let mut skipped = Vec::new();
    for name in order {
        if name.is_empty() {
            continue;
        }
        let obj = join(group, &name);
        match read_column(h5, group, &obj, &name, n) {
            Ok(Some(c)) => columns.push(c),
            Ok(None) => skipped.push((name, "unsupported column encoding".to_string())),
            Err(e @ InputError::TooLarge { .. }) => return Err(e),
            Err(e @ InputError::Malformed { .. }) => return Err(e),
            Err(e) => skipped.push((name, e.to_string())),
        }
    }
    Ok(Frame { index_name, index, columns, skipped })
}

/// The name of the index dataset of the data frame `group` (its `_index` attribute).
pub(crate) fn index_name(h5: &H5, group: &str) -> Result<String, InputError> {
    h5.attrs(group)?
        .get("_index")
        .and_then(attr_string)
        .ok_or_else(|| h5.malformed(group, "data frame has no '_index' attribute naming its index dataset"))
}

/// The index of the data frame `group`, alone.
pub(crate) fn read_index(h5: &H5, group: &str, n_rows: Option<u64>) -> Result<Vec<String>, InputError> {
    read_string_like(h5, &join(group, &index_name(h5, group)?), n_rows)
}

/// The column names of the data frame `group`, in order (its `column-order` attribute; none if absent).
pub(crate) fn column_order(h5: &H5, group: &str) -> Result<Vec<String>, InputError> {
    Ok(match h5.attrs(group)?.get("column-order") {
        Some(v) => string_list(v).unwrap_or_default(),
        None => Vec::new(),
    })
}

/// A string dataset, a categorical of strings (some writers store an index that way), or a nullable string array
/// without missing values (anndata 0.13 with pandas 3 writes an index of pandas' `string` dtype so).
fn read_string_like(h5: &H5, obj: &str, n_rows: Option<u64>) -> Result<Vec<String>, InputError> {
    match h5.node(obj)? {
        Node::Dataset => h5.read_strings(obj, n_rows),
        Node::Group
            if h5.attrs(obj)?.get("encoding-type").and_then(attr_string).as_deref()
                == Some("nullable-string-array") =>
        {
            let values = h5.read_strings(&join(obj, "values"), n_rows)?;
            let n = values.len() as u64;
            if bools(h5, &join(obj, "mask"), n)?.into_iter().any(|missing| missing) {
                return Err(h5.malformed(obj, "the index has missing values"));
            }
            Ok(values)
        }
        Node::Group => {
            let col = read_categorical(h5, obj, n_rows)?;
            col.as_strings().ok_or_else(|| h5.malformed(obj, "categorical index has missing values"))
        }
        Node::Absent => Err(h5.malformed(obj, "dataset is missing")),
    }
}

fn dtype_name(h5: &H5, obj: &str) -> Result<(DType, String), InputError> {
    let ds = h5.dataset(obj)?;
    let dt = h5.guard(obj, || ds.dtype())?;
    let name = match &dt {
        DType::Enum(_) => "bool".to_string(),
        DType::VariableLengthString | DType::String => "string".to_string(),
        // Float16 values are read widened; float32 holds each exactly (as the Python writer stores them).
        dt if crate::h5::half_float_order(dt).is_some() => "f32".to_string(),
        other => other.to_string(),
    };
    Ok((dt, name))
}

fn read_numeric(h5: &H5, obj: &str, n: u64) -> Result<(ColumnData, String), InputError> {
    let (dt, name) = dtype_name(h5, obj)?;
    let vals = h5.read_values(obj, Some(n))?;
    let data = match (dt, vals) {
        (DType::Enum(_), Values::Unsigned(v)) => ColumnData::Bool(v.into_iter().map(|x| x != 0).collect()),
        (_, Values::Float(v)) => ColumnData::Float(v),
        (_, Values::Signed(v)) => ColumnData::Int(v),
        (_, Values::Unsigned(v)) => ColumnData::UInt(v),
    };
    Ok((data, name))
}

fn read_categorical(h5: &H5, obj: &str, n_rows: Option<u64>) -> Result<ColumnData, InputError> {
    let codes_obj = join(obj, "codes");
    let cats_obj = join(obj, "categories");
    let ordered = h5.attrs(obj)?.get("ordered").and_then(attr_bool).unwrap_or(false);
    let codes = match h5.read_values(&codes_obj, n_rows)? {
        Values::Signed(v) => v,
        Values::Unsigned(v) => v.into_iter().map(|x| i64::try_from(x).unwrap_or(-1)).collect(),
        Values::Float(_) => return Err(h5.malformed(&codes_obj, "categorical codes are not integers")),
    };
    let categories = categories_as_strings(h5, &cats_obj)?;
    let k = categories.len() as i64;
    if let Some(bad) = codes.iter().find(|&&c| c < -1 || c >= k) {
        return Err(h5.malformed(&codes_obj, format!("code {bad} is outside -1..{k}")));
    }
    Ok(ColumnData::Categorical { codes, categories, ordered })
}

/// Categories as text, spelled as Python's `str()` spells them (`True`, `1`, `2.5`, `1.0`), which is how a
/// categorical of the same values written from pandas (`DatasetWriter`, `ObsSchema.infer`) names them: one
/// vocabulary whichever way a dataset was made.
fn categories_as_strings(h5: &H5, obj: &str) -> Result<Vec<String>, InputError> {
    let (dt, _) = dtype_name(h5, obj)?;
    match dt {
        DType::VariableLengthString | DType::String => h5.read_strings(obj, None),
        DType::Enum(_) => Ok(match h5.read_values(obj, None)? {
            Values::Unsigned(v) => v.iter().map(|&x| python_bool(x != 0)).collect(),
            Values::Signed(v) => v.iter().map(|&x| python_bool(x != 0)).collect(),
            Values::Float(v) => v.iter().map(|&x| python_bool(x != 0.0)).collect(),
        }),
        _ => Ok(match h5.read_values(obj, None)? {
            Values::Float(v) => v.iter().map(|&x| python_float(x)).collect(),
            Values::Signed(v) => v.iter().map(|x| x.to_string()).collect(),
            Values::Unsigned(v) => v.iter().map(|x| x.to_string()).collect(),
        }),
    }
}

fn python_bool(b: bool) -> String {
    if b { "True" } else { "False" }.to_string()
}

/// A float as Python's `str()` writes it for the values categories hold: `1.0` (not `1`), `2.5`, `nan`, `inf`,
/// `1e+16` from 10^16 on.
fn python_float(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.into();
    }
    let magnitude = x.abs();
    if magnitude != 0.0 && !(1e-4..1e16).contains(&magnitude) {
        // Python's exponent form: mantissa as short as round-trips, exponent signed and at least two digits.
        let text = format!("{x:e}");
        let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
        let exponent: i32 = exponent.parse().unwrap_or(0);
        return format!("{mantissa}e{}{:02}", if exponent < 0 { '-' } else { '+' }, exponent.abs());
    }
    let text = x.to_string();
    if text.contains('.') { text } else { format!("{text}.0") }
}

fn bools(h5: &H5, obj: &str, n: u64) -> Result<Vec<bool>, InputError> {
    Ok(match h5.read_values(obj, Some(n))? {
        Values::Unsigned(v) => v.into_iter().map(|x| x != 0).collect(),
        Values::Signed(v) => v.into_iter().map(|x| x != 0).collect(),
        Values::Float(v) => v.into_iter().map(|x| x != 0.0).collect(),
    })
}

pub(crate) fn read_column(h5: &H5, group: &str, obj: &str, name: &str, n: u64) -> Result<Option<Column>, InputError> {
    let col = |stored_type: String, data: ColumnData| Some(Column { name: name.to_string(), stored_type, data });
    match h5.node(obj)? {
        Node::Absent => Err(h5.malformed(obj, "column listed in column-order is missing")),
        Node::Dataset => {
            // anndata 0.7 stored categoricals as codes here with the categories in <group>/__categories/<name>.
            let legacy_cats = join(&join(group, "__categories"), name);
            if h5.node(&legacy_cats)? == Node::Dataset {
                let codes = match h5.read_values(obj, Some(n))? {
                    Values::Signed(v) => v,
                    Values::Unsigned(v) => v.into_iter().map(|x| i64::try_from(x).unwrap_or(-1)).collect(),
                    Values::Float(_) => return Ok(None),
                };
                let categories = categories_as_strings(h5, &legacy_cats)?;
                return Ok(col("category".into(), ColumnData::Categorical { codes, categories, ordered: false }));
            }
            let (dt, tname) = dtype_name(h5, obj)?;
            match dt {
                DType::VariableLengthString | DType::String => {
                    Ok(col(tname, ColumnData::Str(h5.read_strings(obj, Some(n))?)))
                }
                _ => {
                    let (data, tname) = read_numeric(h5, obj, n)?;
                    Ok(col(tname, data))
                }
            }
        }
        Node::Group => match h5.encoding_type(obj)?.as_deref() {
            Some("categorical") => Ok(col("category".into(), read_categorical(h5, obj, Some(n))?)),
            Some("nullable-integer") => {
                let values_obj = join(obj, "values");
                let (_, tname) = dtype_name(h5, &values_obj)?;
                let values = h5.read_values(&values_obj, Some(n))?;
                let valid = bools(h5, &join(obj, "mask"), n)?.into_iter().map(|m| !m).collect();
                Ok(col(
                    tname,
                    match values {
                        Values::Signed(values) => ColumnData::NullableInt { values, valid },
                        // Kept unsigned: pandas' UInt64 holds values past i64's.
                        Values::Unsigned(values) => ColumnData::NullableUInt { values, valid },
                        Values::Float(_) => return Ok(None),
                    },
                ))
            }
            Some("nullable-boolean") => {
                let values = bools(h5, &join(obj, "values"), n)?;
                let mask = bools(h5, &join(obj, "mask"), n)?;
                Ok(col(
                    "bool".into(),
                    ColumnData::NullableBool { values, valid: mask.into_iter().map(|m| !m).collect() },
                ))
            }
            Some("nullable-string-array") => {
                let values_obj = join(obj, "values");
                let (dt, _) = dtype_name(h5, &values_obj)?;
                if !matches!(dt, DType::VariableLengthString | DType::String) {
                    return Err(h5.malformed(&values_obj, format!("nullable string values are of type {dt}")));
                }
                let values = h5.read_strings(&values_obj, Some(n))?;
                let mask = bools(h5, &join(obj, "mask"), n)?;
                Ok(col(
                    "string".into(),
                    ColumnData::NullableStr { values, valid: mask.into_iter().map(|m| !m).collect() },
                ))
            }
            _ => Ok(None),
        },
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn non_string_categories_are_spelled_as_python_spells_them() {
        let cases = [
            (1.0, "1.0"),
            (2.5, "2.5"),
            (-0.0, "-0.0"),
            (0.0001, "0.0001"),
            (1.5e-5, "1.5e-05"),
            (1e16, "1e+16"),
            (1.25e300, "1.25e+300"),
            (0.1 + 0.2, "0.30000000000000004"),
            (f64::NAN, "nan"),
            (f64::NEG_INFINITY, "-inf"),
        ];
        for (x, python) in cases {
            assert_eq!(super::python_float(x), python, "{x}");
        }
        assert_eq!((super::python_bool(true), super::python_bool(false)), ("True".into(), "False".into()));
    }
}
