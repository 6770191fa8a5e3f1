//! The obs schema (`obs/schema.json`): its model, its exact serialization and a robust parser.

use std::collections::HashSet;
use std::fmt;

use arrow_schema::{DataType, Field, Schema, SchemaRef};
use serde_json::Value;

use crate::error::{ObsError, Result};
use crate::pyjson;

/// The `format` value of `obs/schema.json`.
pub const SCHEMA_FORMAT: &str = "deltacells-obs";
/// The `version` value of `obs/schema.json` this crate reads and writes.
pub const SCHEMA_VERSION: u64 = 1;
/// Largest `obs/schema.json` accepted (64 MiB: 20,000 categories of 100 bytes in 30 columns fit).
pub const MAX_SCHEMA_BYTES: u64 = 64 << 20;

/// What a column holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ColumnKind {
    /// Integer codes into a global vocabulary (`categories`); code -1 is missing.
    Category,
    /// Integers or floats; missing values are nulls.
    Numeric,
    /// Booleans; missing values are nulls.
    Bool,
    /// UTF-8 strings; missing values are nulls.
    String,
}

impl ColumnKind {
    /// The name used in `schema.json`.
    pub fn as_str(self) -> &'static str {
        match self {
            ColumnKind::Category => "category",
            ColumnKind::Numeric => "numeric",
            ColumnKind::Bool => "bool",
            ColumnKind::String => "string",
        }
    }

    /// Parses a `schema.json` kind name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "category" => ColumnKind::Category,
            "numeric" => ColumnKind::Numeric,
            "bool" => ColumnKind::Bool,
            "string" => ColumnKind::String,
            _ => return None,
        })
    }
}

impl fmt::Display for ColumnKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The Arrow type a column is stored as, by its `schema.json` name (the names pyarrow prints).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ArrowType {
    /// `int8`
    Int8,
    /// `int16`
    Int16,
    /// `int32`
    Int32,
    /// `int64`
    Int64,
    /// `uint8`
    UInt8,
    /// `uint16`
    UInt16,
    /// `uint32`
    UInt32,
    /// `uint64`
    UInt64,
    /// `float` (32-bit)
    Float,
    /// `double` (64-bit)
    Double,
    /// `bool`
    Bool,
    /// `string` (UTF-8, 32-bit offsets)
    String,
}

impl ArrowType {
    /// Every type, in a fixed order.
    pub const ALL: [ArrowType; 12] = [
        ArrowType::Int8,
        ArrowType::Int16,
        ArrowType::Int32,
        ArrowType::Int64,
        ArrowType::UInt8,
        ArrowType::UInt16,
        ArrowType::UInt32,
        ArrowType::UInt64,
        ArrowType::Float,
        ArrowType::Double,
        ArrowType::Bool,
        ArrowType::String,
    ];

    /// The name used in `schema.json`.
    pub fn as_str(self) -> &'static str {
        match self {
            ArrowType::Int8 => "int8",
            ArrowType::Int16 => "int16",
            ArrowType::Int32 => "int32",
            ArrowType::Int64 => "int64",
            ArrowType::UInt8 => "uint8",
            ArrowType::UInt16 => "uint16",
            ArrowType::UInt32 => "uint32",
            ArrowType::UInt64 => "uint64",
            ArrowType::Float => "float",
            ArrowType::Double => "double",
            ArrowType::Bool => "bool",
            ArrowType::String => "string",
        }
    }

    /// Parses a `schema.json` type name.
    pub fn parse(s: &str) -> Option<Self> {
        ArrowType::ALL.into_iter().find(|t| t.as_str() == s)
    }

    /// The Arrow data type.
    pub fn data_type(self) -> DataType {
        match self {
            ArrowType::Int8 => DataType::Int8,
            ArrowType::Int16 => DataType::Int16,
            ArrowType::Int32 => DataType::Int32,
            ArrowType::Int64 => DataType::Int64,
            ArrowType::UInt8 => DataType::UInt8,
            ArrowType::UInt16 => DataType::UInt16,
            ArrowType::UInt32 => DataType::UInt32,
            ArrowType::UInt64 => DataType::UInt64,
            ArrowType::Float => DataType::Float32,
            ArrowType::Double => DataType::Float64,
            ArrowType::Bool => DataType::Boolean,
            ArrowType::String => DataType::Utf8,
        }
    }

    /// The type naming `data_type`, if it is one of the supported ones.
    pub fn from_data_type(data_type: &DataType) -> Option<Self> {
        ArrowType::ALL.into_iter().find(|t| &t.data_type() == data_type)
    }

    /// Whether this is an integer or floating-point type.
    pub fn is_numeric(self) -> bool {
        !matches!(self, ArrowType::Bool | ArrowType::String)
    }

    /// The number of categories whose codes (`0..n`, plus -1 for missing) this type holds, for the code types
    /// int8 / int16 / int32; `None` for the others.
    pub fn max_categories(self) -> Option<usize> {
        match self {
            ArrowType::Int8 => Some(i8::MAX as usize + 1),
            ArrowType::Int16 => Some(i16::MAX as usize + 1),
            ArrowType::Int32 => Some(i32::MAX as usize + 1),
            _ => None,
        }
    }
}

impl fmt::Display for ArrowType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The narrowest code type for a vocabulary of `n` categories: codes `0..n` and -1 must fit, so int8 up to 128
/// categories (codes 0..=127), int16 up to 32,768, int32 above.
pub fn code_type_for(n: usize) -> ArrowType {
    if n <= i8::MAX as usize + 1 {
        ArrowType::Int8
    } else if n <= i16::MAX as usize + 1 {
        ArrowType::Int16
    } else {
        ArrowType::Int32
    }
}

/// One obs column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObsColumn {
    /// The column name (the pandas obs column name).
    pub name: String,
    /// What it holds.
    pub kind: ColumnKind,
    /// How it is stored.
    pub arrow_type: ArrowType,
    /// The global vocabulary of a category column (code `i` means `categories[i]`); `None` for other kinds.
    pub categories: Option<Vec<String>>,
    /// Whether a category column's categories are ordered (pandas `ordered=True`: `categories[0] <
    /// categories[1] < ...`). Stored as `"ordered": true` after `categories`, and left out when false, so a
    /// schema without ordered columns is byte-equal to the original package's.
    pub ordered: bool,
}

impl ObsColumn {
    /// A category column with the narrowest code type for `categories`.
    pub fn category(name: impl Into<String>, categories: Vec<String>) -> Self {
        ObsColumn {
            name: name.into(),
            kind: ColumnKind::Category,
            arrow_type: code_type_for(categories.len()),
            categories: Some(categories),
            ordered: false,
        }
    }

    /// This column with its categories ordered (or not).
    pub fn with_ordered(mut self, ordered: bool) -> Self {
        self.ordered = ordered;
        self
    }

    /// A numeric, bool or string column of Arrow type `arrow_type` (its kind follows from the type).
    pub fn plain(name: impl Into<String>, arrow_type: ArrowType) -> Self {
        let kind = match arrow_type {
            ArrowType::Bool => ColumnKind::Bool,
            ArrowType::String => ColumnKind::String,
            _ => ColumnKind::Numeric,
        };
        ObsColumn { name: name.into(), kind, arrow_type, categories: None, ordered: false }
    }

    /// The Arrow field of this column in the shards and in the cache (always nullable).
    pub fn field(&self) -> Field {
        Field::new(&self.name, self.arrow_type.data_type(), true)
    }

    /// Checks that kind, type and categories agree; the message says what does not.
    pub fn check(&self) -> std::result::Result<(), String> {
        let name = &self.name;
        match (self.kind, &self.categories) {
            (ColumnKind::Category, None) => return Err(format!("column {name:?} is a category without categories")),
            (ColumnKind::Category, Some(_)) => {}
            (kind, Some(_)) => return Err(format!("column {name:?} of kind {kind} has categories (must be null)")),
            (_, None) => {}
        }
        if self.ordered && self.kind != ColumnKind::Category {
            return Err(format!("column {name:?} of kind {} is ordered (only category columns are)", self.kind));
        }
        let ok = match self.kind {
            ColumnKind::Category => self.arrow_type.max_categories().is_some(),
            ColumnKind::Numeric => self.arrow_type.is_numeric(),
            ColumnKind::Bool => self.arrow_type == ArrowType::Bool,
            ColumnKind::String => self.arrow_type == ArrowType::String,
        };
        if !ok {
            return Err(format!("column {name:?} of kind {} cannot be stored as {}", self.kind, self.arrow_type));
        }
        if let (Some(cats), Some(max)) = (&self.categories, self.arrow_type.max_categories()) {
            if cats.len() > max {
                return Err(format!(
                    "column {name:?} has {} categories, more than {} codes hold ({max})",
                    cats.len(),
                    self.arrow_type
                ));
            }
            let mut seen = HashSet::with_capacity(cats.len());
            if let Some(dup) = cats.iter().find(|c| !seen.insert(c.as_str())) {
                return Err(format!("column {name:?} lists category {dup:?} twice"));
            }
        }
        Ok(())
    }
}

/// The obs schema: the columns of every shard, in order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ObsSchema {
    /// The columns, in shard order.
    pub columns: Vec<ObsColumn>,
}

impl ObsSchema {
    /// A schema of `columns`, checked (unique names, consistent kinds, types and categories).
    pub fn new(columns: Vec<ObsColumn>) -> Result<Self> {
        let schema = ObsSchema { columns };
        schema.check().map_err(|message| ObsError::Schema { url: "(in memory)".into(), message })?;
        Ok(schema)
    }

    fn check(&self) -> std::result::Result<(), String> {
        let mut names = HashSet::with_capacity(self.columns.len());
        for c in &self.columns {
            if !names.insert(c.name.as_str()) {
                return Err(format!("column {:?} appears twice", c.name));
            }
            c.check()?;
        }
        Ok(())
    }

    /// This schema with no column ordered: what a dataset of format version 1 stores, so that the original
    /// package (which knows only the four keys of version 1's columns) reads it as it reads its own.
    pub fn without_order(mut self) -> Self {
        for c in &mut self.columns {
            c.ordered = false;
        }
        self
    }

    /// The column called `name`.
    pub fn column(&self, name: &str) -> Option<&ObsColumn> {
        self.columns.iter().find(|c| c.name == name)
    }

    /// The position of the column called `name`.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }

    /// The column called `name`, or an error listing the available ones.
    pub fn require(&self, name: &str) -> Result<(usize, &ObsColumn)> {
        self.columns.iter().enumerate().find(|(_, c)| c.name == name).ok_or_else(|| ObsError::UnknownColumn {
            name: name.to_string(),
            available: self.columns.iter().map(|c| format!("{:?}", c.name)).collect::<Vec<_>>().join(", "),
        })
    }

    /// The Arrow schema of the shards.
    pub fn arrow_schema(&self) -> SchemaRef {
        std::sync::Arc::new(Schema::new(self.columns.iter().map(ObsColumn::field).collect::<Vec<_>>()))
    }

    /// `schema.json` text, byte for byte what Python's `json.dumps(obj)` gives for the same content: keys in the
    /// order format, version, columns and, per column, name, kind, arrow_type, categories and (only for an
    /// ordered category column) `"ordered": true`; separators `", "` and `": "`; non-ASCII characters as
    /// `\uXXXX` escapes; no trailing newline.
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(256);
        out.push_str("{\"format\": ");
        pyjson::write_str(&mut out, SCHEMA_FORMAT);
        out.push_str(", \"version\": ");
        out.push_str(&SCHEMA_VERSION.to_string());
        out.push_str(", \"columns\": [");
        for (i, c) in self.columns.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            out.push_str("{\"name\": ");
            pyjson::write_str(&mut out, &c.name);
            out.push_str(", \"kind\": ");
            pyjson::write_str(&mut out, c.kind.as_str());
            out.push_str(", \"arrow_type\": ");
            pyjson::write_str(&mut out, c.arrow_type.as_str());
            out.push_str(", \"categories\": ");
            match &c.categories {
                Some(cats) => pyjson::write_str_list(&mut out, cats),
                None => out.push_str("null"),
            }
            if c.ordered {
                out.push_str(", \"ordered\": true");
            }
            out.push('}');
        }
        out.push_str("]}");
        out
    }

    /// Parses `schema.json` bytes; `url` names the file in errors. Rejects text above [`MAX_SCHEMA_BYTES`],
    /// invalid JSON or UTF-8, an unknown format or version, unknown kinds or types, duplicate names, and kinds,
    /// types and categories that disagree. Unknown extra keys are ignored.
    pub fn parse(bytes: &[u8], url: &str) -> Result<Self> {
        let err = |message: String| ObsError::Schema { url: url.to_string(), message };
        if bytes.len() as u64 > MAX_SCHEMA_BYTES {
            return Err(ObsError::TooLarge { url: url.to_string(), size: bytes.len() as u64, limit: MAX_SCHEMA_BYTES });
        }
        let value: Value = serde_json::from_slice(bytes).map_err(|e| err(format!("not valid JSON: {e}")))?;
        let obj = value.as_object().ok_or_else(|| err("the top level is not a JSON object".into()))?;
        match obj.get("format") {
            Some(Value::String(f)) if f == SCHEMA_FORMAT => {}
            other => return Err(err(format!("format is {}, expected {SCHEMA_FORMAT:?}", describe(other)))),
        }
        match obj.get("version") {
            Some(Value::Number(n)) if n.as_u64() == Some(SCHEMA_VERSION) => {}
            other => {
                return Err(err(format!(
                    "version is {}, this reader understands version {SCHEMA_VERSION} (upgrade deltacells)",
                    describe(other)
                )));
            }
        }
        let cols = match obj.get("columns") {
            Some(Value::Array(a)) => a,
            other => return Err(err(format!("columns is {}, expected a list", describe(other)))),
        };
        let mut columns = Vec::with_capacity(cols.len());
        for (i, c) in cols.iter().enumerate() {
            let c = c.as_object().ok_or_else(|| err(format!("columns[{i}] is not an object")))?;
            let text = |key: &str| match c.get(key) {
                Some(Value::String(s)) => Ok(s.clone()),
                other => Err(err(format!("columns[{i}].{key} is {}, expected a string", describe(other)))),
            };
            let name = text("name")?;
            let kind_s = text("kind")?;
            let kind = ColumnKind::parse(&kind_s)
                .ok_or_else(|| err(format!("column {name:?} has unknown kind {kind_s:?}")))?;
            let type_s = text("arrow_type")?;
            let arrow_type = ArrowType::parse(&type_s)
                .ok_or_else(|| err(format!("column {name:?} has unsupported arrow_type {type_s:?}")))?;
            let categories = match c.get("categories") {
                None | Some(Value::Null) => None,
                Some(Value::Array(a)) => Some(
                    a.iter()
                        .map(|v| {
                            v.as_str().map(str::to_string).ok_or_else(|| {
                                err(format!(
                                    "column {name:?} has a category that is not a string: {}",
                                    describe(Some(v))
                                ))
                            })
                        })
                        .collect::<Result<Vec<_>>>()?,
                ),
                other => return Err(err(format!("column {name:?} categories is {}", describe(other)))),
            };
            let ordered = match c.get("ordered") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                other => {
                    return Err(err(format!("column {name:?} ordered is {}, expected true or false", describe(other))));
                }
            };
            columns.push(ObsColumn { name, kind, arrow_type, categories, ordered });
        }
        let schema = ObsSchema { columns };
        schema.check().map_err(err)?;
        Ok(schema)
    }
}

fn describe(v: Option<&Value>) -> String {
    match v {
        None => "missing".into(),
        Some(Value::String(s)) if s.len() <= 64 => format!("{s:?}"),
        Some(Value::String(_)) => "a long string".into(),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(Value::Null) => "null".into(),
        Some(Value::Array(_)) => "a list".into(),
        Some(Value::Object(_)) => "an object".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_type_boundaries() {
        assert_eq!(code_type_for(0), ArrowType::Int8);
        assert_eq!(code_type_for(127), ArrowType::Int8);
        assert_eq!(code_type_for(128), ArrowType::Int8);
        assert_eq!(code_type_for(129), ArrowType::Int16);
        assert_eq!(code_type_for(32_768), ArrowType::Int16);
        assert_eq!(code_type_for(32_769), ArrowType::Int32);
    }

    #[test]
    fn serializes_like_python() {
        let s = ObsSchema::new(vec![
            ObsColumn::category("t", vec!["a".into(), "\u{e9}".into()]),
            ObsColumn::plain("x", ArrowType::Float),
        ])
        .unwrap();
        // json.dumps({"format": "deltacells-obs", "version": 1, "columns": [...]}) in CPython 3.11.
        assert_eq!(
            s.to_json(),
            r#"{"format": "deltacells-obs", "version": 1, "columns": [{"name": "t", "kind": "category", "arrow_type": "int8", "categories": ["a", "\u00e9"]}, {"name": "x", "kind": "numeric", "arrow_type": "float", "categories": null}]}"#
        );
        assert_eq!(ObsSchema::parse(s.to_json().as_bytes(), "x").unwrap(), s);
    }

    #[test]
    fn an_ordered_category_says_so_and_reads_back_ordered() {
        let s = ObsSchema::new(vec![
            ObsColumn::category("stage", vec!["low".into(), "mid".into(), "high".into()]).with_ordered(true),
            ObsColumn::category("t", vec!["a".into()]),
        ])
        .unwrap();
        assert_eq!(
            s.to_json(),
            r#"{"format": "deltacells-obs", "version": 1, "columns": [{"name": "stage", "kind": "category", "arrow_type": "int8", "categories": ["low", "mid", "high"], "ordered": true}, {"name": "t", "kind": "category", "arrow_type": "int8", "categories": ["a"]}]}"#
        );
        let back = ObsSchema::parse(s.to_json().as_bytes(), "x").unwrap();
        assert_eq!(back, s);
        assert!(back.columns[0].ordered && !back.columns[1].ordered);
        // "ordered": false, as other writers may say it, reads as unordered.
        let unordered = r#"{"format": "deltacells-obs", "version": 1, "columns": [{"name": "a", "kind": "category", "arrow_type": "int8", "categories": ["x"], "ordered": false}]}"#;
        assert!(!ObsSchema::parse(unordered.as_bytes(), "s").unwrap().columns[0].ordered);
    }

    #[test]
    fn rejects_bad_schemas() {
        let bad: &[&str] = &[
            "",
            "[]",
            r#"{"format": "other", "version": 1, "columns": []}"#,
            r#"{"format": "deltacells-obs", "version": 2, "columns": []}"#,
            r#"{"format": "deltacells-obs", "version": 1}"#,
            r#"{"format": "deltacells-obs", "version": 1, "columns": [{"name": "a", "kind": "x", "arrow_type": "int8", "categories": null}]}"#,
            r#"{"format": "deltacells-obs", "version": 1, "columns": [{"name": "a", "kind": "numeric", "arrow_type": "int128", "categories": null}]}"#,
            r#"{"format": "deltacells-obs", "version": 1, "columns": [{"name": "a", "kind": "category", "arrow_type": "int8", "categories": null}]}"#,
            r#"{"format": "deltacells-obs", "version": 1, "columns": [{"name": "a", "kind": "category", "arrow_type": "double", "categories": []}]}"#,
            r#"{"format": "deltacells-obs", "version": 1, "columns": [{"name": "a", "kind": "numeric", "arrow_type": "int8", "categories": ["x"]}]}"#,
            r#"{"format": "deltacells-obs", "version": 1, "columns": [{"name": "a", "kind": "category", "arrow_type": "int8", "categories": ["x", "x"]}]}"#,
            r#"{"format": "deltacells-obs", "version": 1, "columns": [{"name": "a", "kind": "bool", "arrow_type": "bool", "categories": null}, {"name": "a", "kind": "bool", "arrow_type": "bool", "categories": null}]}"#,
            r#"{"format": "deltacells-obs", "version": 1, "columns": [{"name": "a", "kind": "string", "arrow_type": "int8", "categories": null}]}"#,
            r#"{"format": "deltacells-obs", "version": 1, "columns": [{"name": "a", "kind": "category", "arrow_type": "int8", "categories": [1]}]}"#,
            r#"{"format": "deltacells-obs", "version": 1, "columns": [{"name": "a", "kind": "category", "arrow_type": "int8", "categories": ["x"], "ordered": "yes"}]}"#,
            r#"{"format": "deltacells-obs", "version": 1, "columns": [{"name": "a", "kind": "numeric", "arrow_type": "int8", "categories": null, "ordered": true}]}"#,
        ];
        for b in bad {
            assert!(ObsSchema::parse(b.as_bytes(), "s").is_err(), "accepted {b}");
        }
        let cats: Vec<String> = (0..129).map(|i| format!("c{i}")).collect();
        let mut col = ObsColumn::category("a", cats);
        assert_eq!(col.arrow_type, ArrowType::Int16);
        col.arrow_type = ArrowType::Int8;
        assert!(ObsSchema::new(vec![col]).is_err());
        let deep = "[".repeat(100_000);
        assert!(ObsSchema::parse(deep.as_bytes(), "s").is_err());
    }
}
