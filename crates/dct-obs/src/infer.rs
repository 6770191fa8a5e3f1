//! Global vocabularies and schema inference over one or more inputs.

use std::collections::HashMap;

use arrow_schema::DataType;

use crate::data::{ColumnData, TileObs};
use crate::error::{ObsError, Result};
use crate::schema::{ArrowType, ColumnKind, ObsColumn, ObsSchema};

/// Default largest vocabulary kept as a category column; larger ones (e.g. cell barcodes) become string columns.
pub const DEFAULT_MAX_CATEGORIES: usize = 20_000;

/// The union of categorical vocabularies in order of first appearance.
///
/// With a limit, the builder stops storing labels as soon as the union exceeds it (so memory stays bounded for
/// barcode-like columns) and reports [`overflowed`](Self::overflowed).
#[derive(Debug, Clone, Default)]
pub struct VocabularyBuilder {
    index: HashMap<String, u32>,
    labels: Vec<String>,
    limit: Option<usize>,
    overflowed: bool,
}

impl VocabularyBuilder {
    /// An unlimited, empty vocabulary.
    pub fn new() -> Self {
        VocabularyBuilder::default()
    }

    /// An empty vocabulary that overflows above `max` labels.
    pub fn with_limit(max: usize) -> Self {
        VocabularyBuilder { limit: Some(max), ..Default::default() }
    }

    /// Adds the labels of `categories` not seen yet, in order.
    pub fn add<S: AsRef<str>>(&mut self, categories: &[S]) {
        for c in categories {
            self.add_one(c.as_ref());
            if self.overflowed {
                return;
            }
        }
    }

    /// Adds one label; returns its global code, or `None` once the vocabulary overflowed.
    pub fn add_one(&mut self, label: &str) -> Option<u32> {
        if self.overflowed {
            return None;
        }
        if let Some(&code) = self.index.get(label) {
            return Some(code);
        }
        if self.limit.is_some_and(|max| self.labels.len() >= max) || self.labels.len() >= u32::MAX as usize {
            self.overflowed = true;
            self.index = HashMap::new();
            self.labels = Vec::new();
            return None;
        }
        let code = self.labels.len() as u32;
        self.index.insert(label.to_string(), code);
        self.labels.push(label.to_string());
        Some(code)
    }

    /// Whether the union exceeded the limit (the labels are then dropped).
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// The number of labels (0 after an overflow).
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether there are no labels.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The labels so far, in order of first appearance.
    pub fn categories(&self) -> &[String] {
        &self.labels
    }

    /// The global code of `label`.
    pub fn code(&self, label: &str) -> Option<u32> {
        self.index.get(label).copied()
    }

    /// The translation of an input's local categories to global codes (`out[local] = global`); `None` if a label
    /// is unknown or the vocabulary overflowed.
    pub fn remap<S: AsRef<str>>(&self, local: &[S]) -> Option<Vec<i32>> {
        local.iter().map(|l| self.code(l.as_ref()).and_then(|c| i32::try_from(c).ok())).collect()
    }

    /// The final vocabulary, or `None` if it overflowed.
    pub fn finish(self) -> Option<Vec<String>> {
        if self.overflowed { None } else { Some(self.labels) }
    }
}

/// Whether an ordered column's `categories` (one input's) keep the order of `vocabulary` (the column's so far):
/// each is in it, in its order. An input may leave categories out, but one adding a category, or listing two in
/// another order, leaves the column with no order (where a new category goes, nothing says). The one rule for
/// schemas inferred over inputs, appends and corpora.
pub fn keeps_order<S: AsRef<str>>(vocabulary: &[String], categories: &[S]) -> bool {
    let mut from = 0;
    categories.iter().all(|c| match vocabulary[from..].iter().position(|v| v == c.as_ref()) {
        Some(i) => {
            from += i + 1;
            true
        }
        None => false,
    })
}

/// The common type of two numeric types that holds every value of both, if one exists: integers widen to the
/// narrowest integer type holding both ranges (mixing uint64 with a signed type is refused); floats widen to double;
/// an integer of up to 16 bits with float stays float, otherwise a float/integer mix becomes double.
pub fn promote(a: ArrowType, b: ArrowType) -> Option<ArrowType> {
    use ArrowType::*;
    if a == b {
        return Some(a);
    }
    if !a.is_numeric() || !b.is_numeric() {
        return None;
    }
    let int = |t: ArrowType| -> Option<(bool, u32)> {
        Some(match t {
            Int8 => (true, 8),
            Int16 => (true, 16),
            Int32 => (true, 32),
            Int64 => (true, 64),
            UInt8 => (false, 8),
            UInt16 => (false, 16),
            UInt32 => (false, 32),
            UInt64 => (false, 64),
            _ => return None,
        })
    };
    let signed = |bits: u32| match bits {
        8 => Some(Int8),
        16 => Some(Int16),
        32 => Some(Int32),
        64 => Some(Int64),
        _ => None,
    };
    let unsigned = |bits: u32| match bits {
        8 => Some(UInt8),
        16 => Some(UInt16),
        32 => Some(UInt32),
        64 => Some(UInt64),
        _ => None,
    };
    match (int(a), int(b)) {
        (Some((sa, ba)), Some((sb, bb))) => match (sa, sb) {
            (true, true) => signed(ba.max(bb)),
            (false, false) => unsigned(ba.max(bb)),
            _ => {
                let (sbits, ubits) = if sa { (ba, bb) } else { (bb, ba) };
                if sbits > ubits { signed(sbits) } else { signed(ubits * 2) }
            }
        },
        (None, None) => Some(Double),
        (Some((_, bits)), None) | (None, Some((_, bits))) => {
            let float = if int(a).is_none() { a } else { b };
            if float == Float && bits <= 16 { Some(Float) } else { Some(Double) }
        }
    }
}

/// The schema [`ArrowType`] for an input Arrow type (string-like types map to `string`).
pub fn arrow_type_of(data_type: &DataType) -> Option<ArrowType> {
    match data_type {
        DataType::LargeUtf8 | DataType::Utf8View => Some(ArrowType::String),
        d => ArrowType::from_data_type(d),
    }
}

#[derive(Debug, Clone)]
enum Acc {
    /// The vocabulary so far, and whether the column stays ordered: every input so far that has categories gave
    /// it ordered, with the same categories (`None` until one has categories).
    Category(VocabularyBuilder, Option<bool>),
    Plain(ArrowType),
}

/// Infers an [`ObsSchema`] from one or more inputs: columns in order of first appearance, one global vocabulary
/// per categorical column (the union over inputs, in order of first appearance), code widths by vocabulary size,
/// vocabularies above `max_categories` turned into string columns, numeric types widened across inputs
/// (see [`promote`]), and a categorical column that is a string column in another input stored as strings. A
/// category column is ordered when every input with categories gives it ordered and keeps the first one's order
/// ([`keeps_order`]).
#[derive(Debug, Clone)]
pub struct ObsSchemaBuilder {
    max_categories: usize,
    columns: Vec<(String, Acc)>,
    by_name: HashMap<String, usize>,
}

impl Default for ObsSchemaBuilder {
    fn default() -> Self {
        ObsSchemaBuilder::new()
    }
}

impl ObsSchemaBuilder {
    /// A builder with `max_categories` = [`DEFAULT_MAX_CATEGORIES`].
    pub fn new() -> Self {
        ObsSchemaBuilder::with_max_categories(DEFAULT_MAX_CATEGORIES)
    }

    /// A builder keeping vocabularies of up to `max_categories` labels as categories.
    pub fn with_max_categories(max_categories: usize) -> Self {
        ObsSchemaBuilder { max_categories, columns: Vec::new(), by_name: HashMap::new() }
    }

    fn slot(&mut self, name: &str, fresh: Acc) -> (&mut Acc, bool) {
        if let Some(&i) = self.by_name.get(name) {
            return (&mut self.columns[i].1, false);
        }
        self.by_name.insert(name.to_string(), self.columns.len());
        self.columns.push((name.to_string(), fresh));
        (&mut self.columns.last_mut().expect("just pushed").1, true)
    }

    /// Records a categorical column with these (local) categories.
    pub fn add_category<S: AsRef<str>>(&mut self, name: &str, categories: &[S]) -> Result<()> {
        self.add_category_ordered(name, categories, false)
    }

    /// Records a categorical column with these (local) categories, ordered or not.
    pub fn add_category_ordered<S: AsRef<str>>(&mut self, name: &str, categories: &[S], ordered: bool) -> Result<()> {
        let max = self.max_categories;
        let (acc, _) = self.slot(name, Acc::Category(VocabularyBuilder::with_limit(max), None));
        match acc {
            // An input without categories (no value at all) says nothing of the order.
            Acc::Category(_, _) if categories.is_empty() => {}
            Acc::Category(v, order) => {
                *order = Some(match *order {
                    None => ordered,
                    Some(before) => before && ordered && keeps_order(v.categories(), categories),
                });
                v.add(categories);
            }
            Acc::Plain(ArrowType::String) => {}
            Acc::Plain(t) => {
                return Err(ObsError::input(
                    Some(name),
                    format!("categorical in one input but {t} in another; convert it to one kind in every input"),
                ));
            }
        }
        Ok(())
    }

    /// Records a numeric, boolean or string column of type `arrow_type`.
    pub fn add_plain(&mut self, name: &str, arrow_type: ArrowType) -> Result<()> {
        let (acc, _) = self.slot(name, Acc::Plain(arrow_type));
        match acc {
            Acc::Category(..) if arrow_type == ArrowType::String => *acc = Acc::Plain(ArrowType::String),
            Acc::Category(..) => {
                return Err(ObsError::input(
                    Some(name),
                    format!("categorical in one input but {arrow_type} in another; convert it to one kind everywhere"),
                ));
            }
            Acc::Plain(t) => {
                *t = promote(*t, arrow_type).ok_or_else(|| {
                    ObsError::input(
                        Some(name),
                        format!("{t} in one input but {arrow_type} in another, which have no common type"),
                    )
                })?;
            }
        }
        Ok(())
    }

    /// Records a column of values (its kind and type, and a category's vocabulary).
    pub fn add_column(&mut self, name: &str, data: &ColumnData) -> Result<()> {
        match data {
            ColumnData::Category(c) => self.add_category_ordered(name, &c.categories, c.ordered),
            ColumnData::Array(a) => {
                let t = arrow_type_of(a.data_type()).ok_or_else(|| {
                    ObsError::input(
                        Some(name),
                        format!(
                            "Arrow type {} is not supported in obs (use integers, float, double, bool or strings; \
                             convert datetimes and other types first)",
                            a.data_type()
                        ),
                    )
                })?;
                self.add_plain(name, t)
            }
        }
    }

    /// Records every column of an input (or tile).
    pub fn add_input(&mut self, input: &TileObs) -> Result<()> {
        for (name, data) in &input.columns {
            self.add_column(name, data)?;
        }
        Ok(())
    }

    /// The schema.
    pub fn finish(self) -> ObsSchema {
        let columns = self
            .columns
            .into_iter()
            .map(|(name, acc)| match acc {
                Acc::Category(v, ordered) => match v.finish() {
                    Some(cats) => ObsColumn::category(name, cats).with_ordered(ordered == Some(true)),
                    None => ObsColumn::plain(name, ArrowType::String),
                },
                Acc::Plain(t) => ObsColumn::plain(name, t),
            })
            .collect();
        // Names are unique by construction and kinds agree with types.
        ObsSchema { columns }
    }

    /// The kinds recorded so far, in order.
    pub fn kinds(&self) -> Vec<(String, ColumnKind)> {
        self.columns
            .iter()
            .map(|(n, a)| {
                let k = match a {
                    Acc::Category(v, _) if !v.overflowed() => ColumnKind::Category,
                    Acc::Category(..) => ColumnKind::String,
                    Acc::Plain(t) => ObsColumn::plain("", *t).kind,
                };
                (n.clone(), k)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ArrowType::*;

    #[test]
    fn promotion_rules() {
        assert_eq!(promote(Int8, Int32), Some(Int32));
        assert_eq!(promote(UInt8, Int8), Some(Int16));
        assert_eq!(promote(UInt32, Int64), Some(Int64));
        assert_eq!(promote(UInt32, Int32), Some(Int64));
        assert_eq!(promote(UInt64, Int8), None);
        assert_eq!(promote(UInt16, UInt64), Some(UInt64));
        assert_eq!(promote(Float, Double), Some(Double));
        assert_eq!(promote(Float, Int16), Some(Float));
        assert_eq!(promote(Float, Int32), Some(Double));
        assert_eq!(promote(Double, UInt64), Some(Double));
        assert_eq!(promote(Bool, Int8), None);
        assert_eq!(promote(String, Double), None);
    }

    #[test]
    fn vocabulary_overflow_drops_labels() {
        let mut v = VocabularyBuilder::with_limit(3);
        v.add(&["a", "b", "a", "c"]);
        assert!(!v.overflowed());
        assert_eq!(v.remap(&["c", "a"]), Some(vec![2, 0]));
        v.add(&["d"]);
        assert!(v.overflowed());
        assert!(v.is_empty());
        assert_eq!(v.finish(), None);
    }
}
