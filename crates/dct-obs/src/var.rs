//! `var.parquet`: the gene table, with pandas metadata so that pandas restores its index.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use bytes::Bytes;
use dct_store::Store;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};

use crate::error::{ObsError, Result};
use crate::manifest::VAR_TABLE_NAME;
use crate::pyjson;

/// Largest `var.parquet` accepted (512 MiB).
pub const MAX_VAR_BYTES: u64 = 512 << 20;
/// The Arrow schema metadata key holding the pandas metadata.
pub const PANDAS_METADATA_KEY: &str = "pandas";
/// The Arrow schema metadata key holding each categorical column's categories in their order, unused ones
/// included (a JSON object of column name to list): parquet keeps only the labels a column uses, in the order it
/// meets them, so without this a reader would see other categories (and other codes) than were written.
pub const CATEGORIES_METADATA_KEY: &str = "deltacells.categories";

/// A gene table: the pandas index (gene ids) and named columns, one row per gene in output order.
#[derive(Debug, Clone)]
pub struct VarTable {
    /// The index's name (`None` for an unnamed pandas index, stored as `__index_level_0__`).
    pub index_name: Option<String>,
    /// The index values.
    pub index: Vec<String>,
    /// The columns: strings, booleans, integers, float32 or float64 (nulls allowed), and categoricals as
    /// dictionaries of strings with 8-, 16- or 32-bit keys ([`categorical_array`]).
    pub columns: Vec<(String, ArrayRef)>,
    /// The categorical columns whose categories are ordered (pandas `ordered=True`).
    pub ordered: Vec<String>,
}

/// A categorical var column: `codes` index `categories` (-1 is missing), as an Arrow dictionary of strings,
/// which pandas reads back as a categorical with these categories in this order.
pub fn categorical_array(codes: &[i32], categories: &[String]) -> Result<ArrayRef> {
    let keys: arrow_array::Int32Array = codes.iter().map(|&c| (c >= 0).then_some(c)).collect();
    let values: ArrayRef = Arc::new(StringArray::from_iter_values(categories));
    let array = arrow_array::DictionaryArray::<arrow_array::types::Int32Type>::try_new(keys, values)
        .map_err(|e| ObsError::arrow("a categorical var column", e))?;
    Ok(Arc::new(array))
}

/// The codes (-1 for missing) and categories of a dictionary-of-strings column (of any string type: pyarrow writes
/// pandas 3's as large strings); `None` for another type.
pub fn categorical_parts(a: &dyn Array) -> Option<(Vec<i32>, Vec<String>)> {
    let dict = a.as_any_dictionary_opt()?;
    let values = match dict.values().data_type() {
        DataType::Utf8 => dict.values().clone(),
        DataType::LargeUtf8 | DataType::Utf8View => arrow_cast::cast(dict.values(), &DataType::Utf8).ok()?,
        _ => return None,
    };
    let values = values.as_string_opt::<i32>()?;
    let categories = values.iter().map(|v| v.unwrap_or_default().to_string()).collect();
    let keys = arrow_cast::cast(dict.keys(), &DataType::Int32).ok()?;
    let keys = keys.as_primitive::<arrow_array::types::Int32Type>();
    let codes = (0..keys.len()).map(|i| if keys.is_null(i) { -1 } else { keys.value(i) }).collect();
    Some((codes, categories))
}

fn pandas_types(t: &DataType) -> Option<(&'static str, &'static str)> {
    Some(match t {
        // A categorical: its codes' numpy type, as pyarrow writes it.
        DataType::Dictionary(key, value) if value.as_ref() == &DataType::Utf8 => match key.as_ref() {
            DataType::Int8 => ("categorical", "int8"),
            DataType::Int16 => ("categorical", "int16"),
            DataType::Int32 => ("categorical", "int32"),
            _ => return None,
        },
        DataType::Utf8 => ("unicode", "object"),
        DataType::Boolean => ("bool", "bool"),
        DataType::Int8 => ("int8", "int8"),
        DataType::Int16 => ("int16", "int16"),
        DataType::Int32 => ("int32", "int32"),
        DataType::Int64 => ("int64", "int64"),
        DataType::UInt8 => ("uint8", "uint8"),
        DataType::UInt16 => ("uint16", "uint16"),
        DataType::UInt32 => ("uint32", "uint32"),
        DataType::UInt64 => ("uint64", "uint64"),
        DataType::Float32 => ("float32", "float32"),
        DataType::Float64 => ("float64", "float64"),
        _ => return None,
    })
}

impl VarTable {
    /// The Arrow field name of the index column.
    pub fn index_field_name(&self) -> &str {
        self.index_name.as_deref().unwrap_or("__index_level_0__")
    }

    /// The pandas metadata JSON (as pyarrow writes it: `index_columns`, `column_indexes`, `columns`, `attributes`,
    /// `creator`).
    pub fn pandas_metadata(&self) -> String {
        let mut out = String::from("{\"index_columns\": ");
        pyjson::write_str_list(&mut out, &[self.index_field_name()]);
        out.push_str(
            ", \"column_indexes\": [{\"name\": null, \"field_name\": null, \"pandas_type\": \"unicode\", \
             \"numpy_type\": \"object\", \"metadata\": {\"encoding\": \"UTF-8\"}}], \"columns\": [",
        );
        let mut entries: Vec<(Option<&str>, &str, &DataType, Option<&ArrayRef>)> =
            self.columns.iter().map(|(n, a)| (Some(n.as_str()), n.as_str(), a.data_type(), Some(a))).collect();
        entries.push((self.index_name.as_deref(), self.index_field_name(), &DataType::Utf8, None));
        for (i, (name, field, t, array)) in entries.into_iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            let (pt, nt) = pandas_types(t).unwrap_or(("object", "object"));
            out.push_str("{\"name\": ");
            match name {
                Some(n) => pyjson::write_str(&mut out, n),
                None => out.push_str("null"),
            }
            out.push_str(", \"field_name\": ");
            pyjson::write_str(&mut out, field);
            let metadata = match array.and_then(|a| a.as_any_dictionary_opt()) {
                Some(d) => format!(
                    "{{\"num_categories\": {}, \"ordered\": {}}}",
                    d.values().len(),
                    self.ordered.iter().any(|o| o == field)
                ),
                None => "null".to_string(),
            };
            out.push_str(&format!(", \"pandas_type\": \"{pt}\", \"numpy_type\": \"{nt}\", \"metadata\": {metadata}}}"));
        }
        out.push_str("], \"attributes\": {}, \"creator\": {\"library\": \"deltacells\", \"version\": ");
        pyjson::write_str(&mut out, env!("CARGO_PKG_VERSION"));
        out.push_str("}}");
        out
    }

    /// The table as a record batch: the columns, then the index as a string column, with the pandas metadata.
    pub fn to_record_batch(&self) -> Result<RecordBatch> {
        let n = self.index.len();
        let idx = self.index_field_name();
        let mut fields = Vec::with_capacity(self.columns.len() + 1);
        let mut arrays: Vec<ArrayRef> = Vec::with_capacity(self.columns.len() + 1);
        let mut categories_of = serde_json::Map::new();
        for (name, a) in &self.columns {
            if name == idx {
                return Err(ObsError::input(Some(name), "a var column has the index's name"));
            }
            if a.len() != n {
                return Err(ObsError::input(Some(name), format!("{} values for {n} genes", a.len())));
            }
            if pandas_types(a.data_type()).is_none() {
                return Err(ObsError::input(Some(name), format!("type {} is not supported in var", a.data_type())));
            }
            let mut field = Field::new(name, a.data_type().clone(), a.null_count() > 0);
            if let Some((_, categories)) = categorical_parts(a.as_ref()) {
                field = field.with_dict_is_ordered(self.ordered.contains(name));
                categories_of.insert(name.clone(), serde_json::Value::from(categories));
            }
            fields.push(field);
            arrays.push(a.clone());
        }
        fields.push(Field::new(idx, DataType::Utf8, false));
        arrays.push(Arc::new(StringArray::from_iter_values(&self.index)));
        let mut metadata = std::collections::HashMap::from([(PANDAS_METADATA_KEY.to_string(), self.pandas_metadata())]);
        if !categories_of.is_empty() {
            metadata.insert(CATEGORIES_METADATA_KEY.to_string(), serde_json::Value::Object(categories_of).to_string());
        }
        let schema = Schema::new(fields).with_metadata(metadata);
        RecordBatch::try_new(Arc::new(schema), arrays).map_err(|e| ObsError::arrow("assembling the var table", e))
    }

    /// The table from a record batch read back from `var.parquet`: the index is the (first) column named by the
    /// pandas metadata's `index_columns` (or, without pandas metadata, the last string column).
    pub fn from_record_batch(batch: &RecordBatch) -> Result<VarTable> {
        let bad = |column: Option<&str>, message| ObsError::VarTable { column: column.map(str::to_string), message };
        let names: Vec<String> = batch.schema().fields().iter().map(|f| f.name().clone()).collect();
        let idx = index_column(batch)
            .or_else(|| {
                batch.schema().fields().iter().rposition(|f| f.data_type() == &DataType::Utf8).map(|i| names[i].clone())
            })
            .ok_or_else(|| bad(None, "it has no index column and no string column".into()))?;
        let pos = names
            .iter()
            .position(|n| *n == idx)
            .ok_or_else(|| bad(Some(&idx), "its pandas metadata names an index column the table lacks".into()))?;
        let index = batch.column(pos);
        let index = index
            .as_string_opt::<i32>()
            .ok_or_else(|| bad(Some(&idx), format!("its index is {}, not strings", index.data_type())))?;
        let index: Vec<String> = index.iter().map(|v| v.unwrap_or_default().to_string()).collect();
        let columns = names
            .iter()
            .zip(batch.columns())
            .filter(|(n, _)| **n != idx)
            .map(|(n, a)| (n.clone(), a.clone()))
            .collect();
        let index_name = if idx == "__index_level_0__" { None } else { Some(idx) };
        let ordered = batch
            .schema()
            .fields()
            .iter()
            .filter(|f| f.dict_is_ordered() == Some(true))
            .map(|f| f.name().clone())
            .collect();
        Ok(VarTable { index_name, index, columns, ordered })
    }
}

/// The first index column named by a batch's pandas metadata.
pub fn index_column(batch: &RecordBatch) -> Option<String> {
    let meta = batch.schema().metadata().get(PANDAS_METADATA_KEY)?.clone();
    let v: serde_json::Value = serde_json::from_str(&meta).ok()?;
    v.get("index_columns")?.as_array()?.first()?.as_str().map(str::to_string)
}

/// Encodes a gene table as parquet (zstd, no statistics), index last, with the pandas metadata.
pub fn encode_var_parquet(table: &VarTable) -> Result<Bytes> {
    let batch = table.to_record_batch()?;
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_statistics_enabled(EnabledStatistics::None)
        .set_created_by(format!("deltacells dct-obs {}", env!("CARGO_PKG_VERSION")))
        .build();
    let perr = |source| ObsError::Parquet { url: VAR_TABLE_NAME.into(), tile: None, column: None, cause: source };
    let mut w = ArrowWriter::try_new(Vec::new(), batch.schema(), Some(props)).map_err(perr)?;
    w.write(&batch).map_err(perr)?;
    Ok(Bytes::from(w.into_inner().map_err(perr)?))
}

/// Decodes `var.parquet` bytes into one record batch (schema metadata kept, including `"pandas"`); `url` names the
/// file in errors.
pub fn decode_var_parquet(bytes: Bytes, url: &str) -> Result<RecordBatch> {
    std::panic::catch_unwind(|| decode_var_inner(bytes, url)).unwrap_or_else(|_| {
        Err(ObsError::Parquet {
            url: url.to_string(),
            tile: None,
            column: None,
            cause: parquet::errors::ParquetError::General("the decoder failed on malformed input".into()),
        })
    })
}

fn decode_var_inner(bytes: Bytes, url: &str) -> Result<RecordBatch> {
    let perr = |source| ObsError::Parquet { url: url.to_string(), tile: None, column: None, cause: source };
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes).map_err(perr)?;
    let schema = builder.schema().clone();
    let reader = builder.with_batch_size(64 << 10).build().map_err(perr)?;
    let mut batches = Vec::new();
    for b in reader {
        // A damaged column chunk surfaces here, as an Arrow error: said as the corrupt file it is.
        batches.push(b.map_err(|e| {
            let text = match e {
                arrow_schema::ArrowError::ParquetError(inner) => inner,
                other => other.to_string(),
            };
            perr(parquet::errors::ParquetError::General(text))
        })?);
    }
    let batch = arrow_select::concat::concat_batches(&schema, &batches)
        .map_err(|e| ObsError::arrow(format!("{url}: joining the var table"), e))?;
    normalized(&batch).map_err(|e| ObsError::arrow(format!("{url}: reading the var table"), e))
}

/// A decoded gene table in the forms the rest of the library reads: strings of every Arrow string type as `Utf8`
/// (pyarrow writes pandas 3's strings as large strings), categoricals as dictionaries of `Utf8` with 32-bit keys
/// holding the categories as written ([`CATEGORIES_METADATA_KEY`], when the file has it and it covers the labels
/// used) and marked ordered when the field or the pandas metadata says so.
fn normalized(batch: &RecordBatch) -> std::result::Result<RecordBatch, arrow_schema::ArrowError> {
    let schema = batch.schema();
    let written: serde_json::Map<String, serde_json::Value> =
        schema.metadata().get(CATEGORIES_METADATA_KEY).and_then(|s| serde_json::from_str(s).ok()).unwrap_or_default();
    let pandas_ordered = pandas_ordered_columns(&schema);
    let mut fields = Vec::with_capacity(batch.num_columns());
    let mut arrays = Vec::with_capacity(batch.num_columns());
    for (field, array) in schema.fields().iter().zip(batch.columns()) {
        let name = field.name();
        let (array, ordered) = match field.data_type() {
            DataType::LargeUtf8 | DataType::Utf8View => (arrow_cast::cast(array, &DataType::Utf8)?, false),
            DataType::Dictionary(..) => match categorical_parts(array.as_ref()) {
                Some((codes, used)) => {
                    let (codes, categories) = with_written_categories(codes, used, written.get(name));
                    let a = categorical_array(&codes, &categories)
                        .map_err(|e| arrow_schema::ArrowError::InvalidArgumentError(e.to_string()))?;
                    (a, field.dict_is_ordered() == Some(true) || pandas_ordered.contains(name))
                }
                None => (array.clone(), false),
            },
            _ => (array.clone(), false),
        };
        let mut f = Field::new(name, array.data_type().clone(), field.is_nullable() || array.null_count() > 0)
            .with_metadata(field.metadata().clone());
        if ordered {
            f = f.with_dict_is_ordered(true);
        }
        fields.push(f);
        arrays.push(array);
    }
    let schema = Schema::new(fields).with_metadata(schema.metadata().clone());
    RecordBatch::try_new(Arc::new(schema), arrays)
}

/// Codes and categories re-expressed in the categories a column was written with (`written`: a JSON list of
/// distinct strings holding every label used); as they are when there is no such list.
fn with_written_categories(
    codes: Vec<i32>,
    used: Vec<String>,
    written: Option<&serde_json::Value>,
) -> (Vec<i32>, Vec<String>) {
    let Some(list) = written.and_then(|w| w.as_array()) else { return (codes, used) };
    let Some(all) = list.iter().map(|v| v.as_str().map(str::to_string)).collect::<Option<Vec<String>>>() else {
        return (codes, used);
    };
    let at: std::collections::HashMap<&str, i32> =
        all.iter().enumerate().filter_map(|(i, c)| Some((c.as_str(), i32::try_from(i).ok()?))).collect();
    if at.len() != all.len() {
        return (codes, used); // duplicates: not a list of categories
    }
    // Labels no code refers to (what a reader makes of a column with no value) need not be in the list.
    let mut referenced = vec![false; used.len()];
    for c in codes.iter().filter_map(|&c| usize::try_from(c).ok()) {
        if let Some(r) = referenced.get_mut(c) {
            *r = true;
        }
    }
    let mut moved = Vec::with_capacity(used.len());
    for (label, &needed) in used.iter().zip(&referenced) {
        match at.get(label.as_str()) {
            Some(&i) => moved.push(i),
            None if !needed => moved.push(-1),
            None => return (codes, used),
        }
    }
    let codes = codes.into_iter().map(|c| if c < 0 { -1 } else { moved.get(c as usize).copied().unwrap_or(-1) });
    (codes.collect(), all)
}

/// The columns the pandas metadata marks as ordered categoricals.
fn pandas_ordered_columns(schema: &Schema) -> Vec<String> {
    let Some(meta) = schema.metadata().get(PANDAS_METADATA_KEY) else { return Vec::new() };
    let Ok(v) = serde_json::from_str::<serde_json::Value>(meta) else { return Vec::new() };
    let Some(columns) = v.get("columns").and_then(|c| c.as_array()) else { return Vec::new() };
    columns
        .iter()
        .filter(|c| c.get("metadata").and_then(|m| m.get("ordered")).and_then(|o| o.as_bool()) == Some(true))
        .filter_map(|c| c.get("field_name").or_else(|| c.get("name")).and_then(|n| n.as_str()).map(str::to_string))
        .collect()
}

/// Reads `var.parquet` of the dataset at `store`, as stored (the digest a manifest records is checked by
/// `dct_dataset`'s reader, which reads the table through it).
pub async fn read_var_table(store: &Store) -> Result<RecordBatch> {
    let bytes = store.get_limited(VAR_TABLE_NAME, MAX_VAR_BYTES).await?;
    decode_var_parquet(bytes, &store.url(VAR_TABLE_NAME))
}

/// Writes `var.parquet` of the dataset at `store`; returns its size. The file alone: the dataset's manifest, which
/// records its digest, is the writer's to write (`dct_dataset::finish_dataset`), so this serves datasets being
/// written, not finished ones.
pub async fn write_var_table(store: &Store, table: &VarTable) -> Result<u64> {
    let bytes = encode_var_parquet(table)?;
    let n = bytes.len() as u64;
    store.put(VAR_TABLE_NAME, bytes).await?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Int64Array;

    #[test]
    fn a_stored_table_without_string_names_is_a_gene_table_error() {
        let numbers: ArrayRef = Arc::new(Int64Array::from(vec![1, 2, 3]));
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(schema.clone(), vec![numbers.clone()]).unwrap();
        let e = VarTable::from_record_batch(&batch).unwrap_err();
        assert!(matches!(e, ObsError::VarTable { column: None, .. }), "{e:?}");
        assert!(e.to_string().starts_with("the gene table: it has no index column"), "{e}");
        let meta: std::collections::HashMap<String, String> =
            [(PANDAS_METADATA_KEY.to_string(), r#"{"index_columns": ["id"]}"#.to_string())].into();
        let named = RecordBatch::try_new(Arc::new(schema.as_ref().clone().with_metadata(meta)), vec![numbers]).unwrap();
        let e = VarTable::from_record_batch(&named).unwrap_err();
        assert!(matches!(&e, ObsError::VarTable { column: Some(c), .. } if c == "id"), "{e:?}");
        assert!(e.to_string().contains("its index is Int64, not strings"), "{e}");
        assert!(!e.to_string().contains("invalid obs input"), "{e}");
    }

    #[test]
    fn categories_come_back_as_written_unused_and_ordered_included() {
        // Parquet keeps only the labels a column uses, in the order it meets them: "high" before "low", no "mid".
        let cats: Vec<String> = ["low", "mid", "high"].map(String::from).to_vec();
        let columns = vec![
            ("level".to_string(), categorical_array(&[2, 0, 2, -1], &cats).unwrap()),
            ("kind".to_string(), categorical_array(&[1, 1, 0, 0], &["b".into(), "a".into()]).unwrap()),
            ("none".to_string(), categorical_array(&[-1, -1, -1, -1], &["x".into(), "y".into()]).unwrap()),
        ];
        let table = VarTable {
            index_name: Some("gene".into()),
            index: (0..4).map(|i| format!("g{i}")).collect(),
            columns,
            ordered: vec!["level".into()],
        };
        let back = decode_var_parquet(encode_var_parquet(&table).unwrap(), "var.parquet").unwrap();
        let back = VarTable::from_record_batch(&back).unwrap();
        assert_eq!(categorical_parts(back.columns[0].1.as_ref()), Some((vec![2, 0, 2, -1], cats)));
        assert_eq!(
            categorical_parts(back.columns[1].1.as_ref()),
            Some((vec![1, 1, 0, 0], vec!["b".into(), "a".into()]))
        );
        assert_eq!(categorical_parts(back.columns[2].1.as_ref()), Some((vec![-1; 4], vec!["x".into(), "y".into()])));
        assert_eq!(back.ordered, ["level"]);
        assert!(back.pandas_metadata().contains(r#""field_name": "level", "pandas_type": "categorical", "numpy_type": "int32", "metadata": {"num_categories": 3, "ordered": true}"#), "{}", back.pandas_metadata());
    }

    #[test]
    fn large_strings_and_small_keys_as_pyarrow_writes_pandas_3_tables_read_as_strings() {
        let keys = arrow_array::Int8Array::from(vec![Some(1), Some(0), None]);
        let values: ArrayRef = Arc::new(arrow_array::LargeStringArray::from(vec!["x", "y"]));
        let dict: ArrayRef =
            Arc::new(arrow_array::DictionaryArray::<arrow_array::types::Int8Type>::try_new(keys, values).unwrap());
        let index: ArrayRef = Arc::new(arrow_array::LargeStringArray::from(vec!["a", "b", "c"]));
        let pandas = r#"{"index_columns": ["gene"], "columns": [{"name": "t", "field_name": "t",
            "pandas_type": "categorical", "metadata": {"num_categories": 2, "ordered": true}}]}"#;
        let schema = Schema::new(vec![
            Field::new("t", dict.data_type().clone(), true),
            Field::new("gene", DataType::LargeUtf8, false),
        ])
        .with_metadata([(PANDAS_METADATA_KEY.to_string(), pandas.to_string())]);
        let batch = RecordBatch::try_new(Arc::new(schema), vec![dict, index]).unwrap();
        let mut w = ArrowWriter::try_new(Vec::new(), batch.schema(), None).unwrap();
        w.write(&batch).unwrap();
        let bytes = Bytes::from(w.into_inner().unwrap());
        let back = VarTable::from_record_batch(&decode_var_parquet(bytes, "var.parquet").unwrap()).unwrap();
        assert_eq!(back.index, ["a", "b", "c"]);
        assert_eq!(back.index_name.as_deref(), Some("gene"));
        // Labels, not codes: a writer other than pyarrow may order the labels as it meets them.
        let (codes, cats) = categorical_parts(back.columns[0].1.as_ref()).unwrap();
        let labels: Vec<Option<&str>> = codes.iter().map(|&c| (c >= 0).then(|| cats[c as usize].as_str())).collect();
        assert_eq!(labels, [Some("y"), Some("x"), None]);
        assert_eq!(back.ordered, ["t"]);
        // And it can be written again as it was read.
        encode_var_parquet(&back).unwrap();
    }
}
