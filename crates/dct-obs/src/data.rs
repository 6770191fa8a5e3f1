//! In-memory obs input for the writer and the schema builder: one tile's (or one input's) columns.

use std::sync::Arc;

use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;

/// A categorical column as pandas stores it: integer codes into the input's own categories, -1 for missing.
#[derive(Debug, Clone, PartialEq)]
pub struct CategoryData {
    /// One code per cell; `-1` is missing, otherwise an index into `categories`.
    pub codes: Vec<i32>,
    /// The input's categories (local vocabulary). Share one `Arc` between the tiles of an input: the writer
    /// remembers the translation of the last vocabulary it saw.
    pub categories: Arc<[String]>,
    /// Whether the categories are ordered (pandas `ordered=True`). The schema keeps a column ordered when every
    /// input gives it ordered, with the same categories.
    pub ordered: bool,
}

/// The values of one column for some cells.
#[derive(Debug, Clone)]
pub enum ColumnData {
    /// Categorical codes and their local vocabulary.
    Category(CategoryData),
    /// A numeric (any integer width, float32, float64), boolean or UTF-8 string Arrow array; nulls are missing
    /// values. For a column stored as a category, a string array of labels is accepted too.
    Array(ArrayRef),
}

impl ColumnData {
    /// A categorical column from codes (-1 = missing) and the categories they index.
    pub fn category(codes: Vec<i32>, categories: Arc<[String]>) -> Self {
        ColumnData::Category(CategoryData { codes, categories, ordered: false })
    }

    /// A categorical column whose categories are ordered (or not: `ordered`).
    pub fn category_ordered(codes: Vec<i32>, categories: Arc<[String]>, ordered: bool) -> Self {
        ColumnData::Category(CategoryData { codes, categories, ordered })
    }

    /// The number of cells.
    pub fn len(&self) -> usize {
        match self {
            ColumnData::Category(c) => c.codes.len(),
            ColumnData::Array(a) => a.len(),
        }
    }

    /// Whether there are no cells.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Cells `offset .. offset + len` (zero-copy for arrays; codes are copied, categories shared).
    ///
    /// # Panics
    /// If the range is out of bounds.
    pub fn slice(&self, offset: usize, len: usize) -> ColumnData {
        match self {
            ColumnData::Category(c) => ColumnData::Category(CategoryData {
                codes: c.codes[offset..offset + len].to_vec(),
                categories: c.categories.clone(),
                ordered: c.ordered,
            }),
            ColumnData::Array(a) => ColumnData::Array(a.slice(offset, len)),
        }
    }

    /// The Arrow type of an array column; `None` for a category.
    pub fn data_type(&self) -> Option<&DataType> {
        match self {
            ColumnData::Category(_) => None,
            ColumnData::Array(a) => Some(a.data_type()),
        }
    }
}

impl From<ArrayRef> for ColumnData {
    fn from(a: ArrayRef) -> Self {
        ColumnData::Array(a)
    }
}

/// Named columns for a block of cells (one tile when handed to the writer, or one whole input when handed to the
/// schema builder). A column of the schema that a tile lacks is written as missing values.
#[derive(Debug, Clone, Default)]
pub struct TileObs {
    /// `(name, values)` pairs; names must be unique.
    pub columns: Vec<(String, ColumnData)>,
}

impl TileObs {
    /// No columns.
    pub fn new() -> Self {
        TileObs::default()
    }

    /// Adds a column (builder style).
    pub fn with(mut self, name: impl Into<String>, data: impl Into<ColumnData>) -> Self {
        self.push(name, data);
        self
    }

    /// Adds a column.
    pub fn push(&mut self, name: impl Into<String>, data: impl Into<ColumnData>) {
        self.columns.push((name.into(), data.into()));
    }

    /// The column called `name`.
    pub fn get(&self, name: &str) -> Option<&ColumnData> {
        self.columns.iter().find(|(n, _)| n == name).map(|(_, d)| d)
    }

    /// Cells `offset .. offset + len` of every column (see [`ColumnData::slice`]).
    ///
    /// # Panics
    /// If the range is out of bounds for a column.
    pub fn slice(&self, offset: usize, len: usize) -> TileObs {
        TileObs { columns: self.columns.iter().map(|(n, d)| (n.clone(), d.slice(offset, len))).collect() }
    }
}
