//! The obs of a corpus: the members' columns as one set, category columns with one vocabulary across members.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int32Type;
use arrow_array::{Array, ArrayRef, Int32Array, StringArray, new_null_array};
use arrow_schema::DataType;
use dct_dataset::dct_obs::{ArrowType, ColumnKind, Obs, ObsOptions, keeps_order, promote};

use crate::concurrent::on_each;
use crate::corpus::Corpus;
use crate::error::CorpusError;

/// One obs column of a corpus.
#[derive(Debug, Clone, PartialEq)]
pub struct CorpusObsColumn {
    /// Its name.
    pub name: String,
    /// Its kind: the same in every member that has it, except that a column of category labels in some members
    /// and strings in others is a string column (the categories read as their labels).
    pub kind: ColumnKind,
    /// For a category column, the corpus's vocabulary: every member's categories, in order of first appearance.
    /// Codes refer to it.
    pub categories: Option<Vec<String>>,
    /// Whether a category column's categories are ordered: every member that has categories for it stores it
    /// ordered, in the first one's order (`dct_obs::keeps_order`).
    pub ordered: bool,
    /// The Arrow type values come in: `Int32` codes for categories; a number column whose members store
    /// different types comes in a type that holds every member's values (as [`promote`] says: `Int16` for
    /// `Int8` and `Int16`, `Float64` where no integer type does).
    pub data_type: DataType,
    /// Per member: whether it has the column, and how its values become the corpus's.
    members: Vec<Option<MemberValues>>,
    /// Whether some cell of the corpus lacks a value, once known (see [`CorpusObs::has_nulls`]).
    has_nulls: std::sync::OnceLock<bool>,
}

/// How a member's values of a column become the corpus's.
#[derive(Debug, Clone, PartialEq)]
enum MemberValues {
    /// As they are (cast to the column's type).
    Stored,
    /// Category codes, each code's place in the corpus's vocabulary.
    Codes(Vec<i32>),
    /// Category codes read as their labels: a column that is a category in some members and strings in others
    /// is a string column of the corpus.
    Labels(Vec<String>),
}

impl CorpusObsColumn {
    /// Makes a category column a string column of type `data_type` (the members' categories read as their
    /// labels); a string column stays as it is.
    fn as_strings(&mut self, data_type: DataType) {
        let Some(vocabulary) = self.categories.take() else { return };
        self.kind = ColumnKind::String;
        self.ordered = false;
        self.data_type = data_type;
        for part in self.members.iter_mut().flatten() {
            if let MemberValues::Codes(codes) = part {
                let labels = codes.iter().map(|&i| vocabulary[i as usize].clone()).collect();
                *part = MemberValues::Labels(labels);
            }
        }
    }
}

/// The members' obs as one table (see [`Corpus::obs`]): a column a member lacks is missing (null) for its cells.
#[derive(Debug)]
pub struct CorpusObs {
    members: Vec<Option<Obs>>,
    columns: Vec<CorpusObsColumn>,
    /// The columns whose kind differs between members, each as its first disagreement
    /// ([`CorpusError::ObsConflict`]): not among `columns`, and refused when asked for.
    conflicts: Vec<CorpusError>,
}

impl Corpus {
    /// The members' obs as one set of columns: the union of the members' columns (in order of first
    /// appearance), category columns with one vocabulary (the members' categories in order of first appearance),
    /// a column a member lacks missing for its cells; a column of category labels in some members and strings in
    /// others is a string column. Any other column whose kind differs between members is left out of
    /// the columns and refused when asked for, naming both members ([`CorpusObs::conflicts`] lists them), so the
    /// other columns stay usable. Members without obs have every column missing.
    pub fn obs(&self, options: &ObsOptions) -> Result<CorpusObs, CorpusError> {
        // Each member's obs schema may be a round trip to its store: members are opened at once.
        let members: Vec<Option<Obs>> = on_each(self.members(), |_, m| {
            if !m.dataset.manifest().has_obs {
                return Ok(None);
            }
            m.dataset.obs(options.clone()).map(Some).map_err(|e| CorpusError::member(&m.name, e))
        })?;
        let n = members.len();
        let mut columns: Vec<CorpusObsColumn> = Vec::new();
        // The first member that has each column, and the kind it stores it as.
        let mut first_member: Vec<(usize, ColumnKind)> = Vec::new();
        let mut position: HashMap<String, usize> = HashMap::new();
        let mut conflicts: Vec<CorpusError> = Vec::new();
        let mut conflicted: std::collections::HashSet<String> = std::collections::HashSet::new();
        for (m, obs) in members.iter().enumerate() {
            let Some(obs) = obs else { continue };
            for c in &obs.schema().columns {
                if conflicted.contains(&c.name) {
                    continue;
                }
                let data_type = c.arrow_type.data_type();
                let at = match position.get(&c.name) {
                    Some(&at) => at,
                    None => {
                        position.insert(c.name.clone(), columns.len());
                        first_member.push((m, c.kind));
                        columns.push(CorpusObsColumn {
                            name: c.name.clone(),
                            kind: c.kind,
                            categories: (c.kind == ColumnKind::Category).then(Vec::new),
                            ordered: c.ordered,
                            data_type: if c.kind == ColumnKind::Category { DataType::Int32 } else { data_type.clone() },
                            members: vec![None; n],
                            has_nulls: std::sync::OnceLock::new(),
                        });
                        columns.len() - 1
                    }
                };
                let column = &mut columns[at];
                let text = |k: ColumnKind| matches!(k, ColumnKind::Category | ColumnKind::String);
                if column.kind != c.kind && text(column.kind) && text(c.kind) {
                    // Labels in some members, strings in others (an h5ad categorical beside a plain string
                    // column): the column is strings, each member's categories read as their labels.
                    column.as_strings(if c.kind == ColumnKind::String { data_type.clone() } else { DataType::Utf8 });
                    column.members[m] = Some(match c.kind {
                        ColumnKind::Category => MemberValues::Labels(c.categories.clone().unwrap_or_default()),
                        _ => MemberValues::Stored,
                    });
                    continue;
                }
                if column.kind != c.kind {
                    let (first, first_kind) = first_member[at];
                    conflicts.push(CorpusError::ObsConflict {
                        column: c.name.clone(),
                        first: self.members()[first].name.clone(),
                        first_kind: first_kind.as_str(),
                        member: self.members()[m].name.clone(),
                        kind: c.kind.as_str(),
                    });
                    conflicted.insert(c.name.clone());
                    continue;
                }
                if column.kind == ColumnKind::Numeric && column.data_type != data_type {
                    column.data_type = common_number_type(&column.data_type, &data_type);
                }
                if let (Some(vocabulary), Some(own)) = (&column.categories, &c.categories) {
                    // A member of no category (every value missing) says nothing of the order; the first with
                    // categories sets the vocabulary, so the others must list it as it is.
                    if !own.is_empty() && !vocabulary.is_empty() {
                        column.ordered &= c.ordered && keeps_order(vocabulary, own);
                    } else if !own.is_empty() {
                        column.ordered = c.ordered;
                    }
                }
                let codes = column.categories.as_mut().map(|vocabulary| {
                    let mut index: HashMap<String, i32> =
                        vocabulary.iter().enumerate().map(|(i, l)| (l.clone(), i as i32)).collect();
                    c.categories
                        .iter()
                        .flatten()
                        .map(|label| {
                            *index.entry(label.clone()).or_insert_with(|| {
                                vocabulary.push(label.clone());
                                (vocabulary.len() - 1) as i32
                            })
                        })
                        .collect()
                });
                column.members[m] = Some(codes.map_or(MemberValues::Stored, MemberValues::Codes));
            }
        }
        columns.retain(|c| !conflicted.contains(&c.name));
        Ok(CorpusObs { members, columns, conflicts })
    }
}

impl CorpusObs {
    /// The columns, in order of first appearance.
    pub fn columns(&self) -> &[CorpusObsColumn] {
        &self.columns
    }

    /// The columns left out because their kind differs between members: one [`CorpusError::ObsConflict`] each,
    /// naming the column, the first member that has it and the first that disagrees.
    pub fn conflicts(&self) -> &[CorpusError] {
        &self.conflicts
    }

    /// The column `name`: [`CorpusError::ObsConflict`] if its kind differs between members,
    /// [`CorpusError::UnknownObsColumn`] if no member has it.
    pub fn column(&self, name: &str) -> Result<&CorpusObsColumn, CorpusError> {
        if let Some(conflict) =
            self.conflicts.iter().find(|e| matches!(e, CorpusError::ObsConflict { column, .. } if column == name))
        {
            return Err(conflict.clone());
        }
        self.columns.iter().find(|c| c.name == name).ok_or_else(|| CorpusError::UnknownObsColumn {
            column: name.to_string(),
            available: self.columns.iter().map(|c| c.name.clone()).collect(),
        })
    }

    /// Whether the localized column `name` has a missing value in some cell of the corpus: a member lacks it, or
    /// a member's value is missing somewhere (see `dct_obs::Obs::has_nulls`).
    pub fn has_nulls(&self, corpus: &Corpus, name: &str) -> Result<bool, CorpusError> {
        let column = self.column(name)?;
        if let Some(&known) = column.has_nulls.get() {
            return Ok(known);
        }
        let found = self.find_nulls(corpus, column)?;
        Ok(*column.has_nulls.get_or_init(|| found))
    }

    /// [`CorpusObs::has_nulls`] looked up member by member (their cached columns know).
    fn find_nulls(&self, corpus: &Corpus, column: &CorpusObsColumn) -> Result<bool, CorpusError> {
        let name = column.name.as_str();
        for (m, (obs, part)) in self.members.iter().zip(&column.members).enumerate() {
            let Some(obs) = obs.as_ref().filter(|_| part.is_some()) else { return Ok(true) };
            if obs.has_nulls(name).map_err(|e| obs_error(corpus, m, e))? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Makes `columns` local in every member that has them (see `dct_obs::Obs::localize`).
    ///
    /// Returns the columns that were fetched from (or rebuilt out of) some member's shards rather than found in the
    /// node's cache, in the order asked.
    pub fn localize(&self, corpus: &Corpus, columns: &[&str]) -> Result<Vec<String>, CorpusError> {
        for &name in columns {
            self.column(name)?;
        }
        // Members at once: each localization fetches the member's shards of the columns.
        let reports = on_each(&self.members, |m, obs| {
            let Some(obs) = obs else { return Ok(Vec::new()) };
            let present: Vec<&str> = columns.iter().copied().filter(|&c| obs.schema().column(c).is_some()).collect();
            if present.is_empty() {
                return Ok(Vec::new());
            }
            let report = obs.localize_blocking(&present).map_err(|e| obs_error(corpus, m, e))?;
            Ok(report.fetched.into_iter().chain(report.rebuilt).collect())
        })?;
        let fetched: std::collections::HashSet<String> = reports.into_iter().flatten().collect();
        Ok(columns.iter().filter(|c| fetched.contains(**c)).map(|c| c.to_string()).collect())
    }

    /// The values of `columns` (localized) at corpus `cells`, in request order: category columns as `Int32` codes
    /// into the corpus's vocabulary, the others in the column's [`data_type`](CorpusObsColumn::data_type); null
    /// where a cell's member lacks the column or its value is missing.
    pub fn take(
        &self,
        corpus: &Corpus,
        cells: &[u64],
        columns: &[&str],
    ) -> Result<Vec<(String, ArrayRef)>, CorpusError> {
        let wanted = columns.iter().map(|&c| self.column(c)).collect::<Result<Vec<_>, _>>()?;
        let located = corpus.locate(cells)?;
        let mut member_cells: Vec<Vec<u64>> = vec![Vec::new(); self.members.len()];
        let mut place = Vec::with_capacity(cells.len());
        for &(m, local) in &located {
            place.push((m as usize, member_cells[m as usize].len()));
            member_cells[m as usize].push(local);
        }
        let mut out = Vec::with_capacity(wanted.len());
        for column in wanted {
            let mut parts: Vec<ArrayRef> = Vec::with_capacity(self.members.len());
            for (m, locals) in member_cells.iter().enumerate() {
                parts.push(self.member_part(corpus, m, column, locals)?);
            }
            let refs: Vec<&dyn Array> = parts.iter().map(|a| a.as_ref()).collect();
            let array = arrow_select::interleave::interleave(&refs, &place)
                .map_err(|e| CorpusError::InvalidArgument(format!("obs column {:?}: {e}", column.name)))?;
            out.push((column.name.clone(), array));
        }
        Ok(out)
    }

    /// Member `m`'s values of `column` at its cells `locals`, in the column's corpus type.
    fn member_part(
        &self,
        corpus: &Corpus,
        m: usize,
        column: &CorpusObsColumn,
        locals: &[u64],
    ) -> Result<ArrayRef, CorpusError> {
        let (Some(obs), Some(part)) = (&self.members[m], &column.members[m]) else {
            return Ok(new_null_array(&column.data_type, locals.len()));
        };
        if locals.is_empty() {
            return Ok(new_null_array(&column.data_type, 0));
        }
        let batch = obs.take(locals, &[column.name.as_str()]).map_err(|e| obs_error(corpus, m, e))?;
        let values = batch.column(0);
        let cast = |a: &ArrayRef, t: &DataType| {
            arrow_cast::cast(a, t)
                .map_err(|e| CorpusError::InvalidArgument(format!("obs column {:?}: {e}", column.name)))
        };
        let codes = || -> Result<ArrayRef, CorpusError> { cast(values, &DataType::Int32) };
        match part {
            MemberValues::Codes(map) => {
                let local = codes()?;
                let remapped: Int32Array = local
                    .as_primitive::<Int32Type>()
                    .iter()
                    .map(|c| c.and_then(|c| usize::try_from(c).ok().and_then(|i| map.get(i).copied())))
                    .collect();
                Ok(Arc::new(remapped))
            }
            MemberValues::Labels(labels) => {
                let local = codes()?;
                let text: StringArray = local
                    .as_primitive::<Int32Type>()
                    .iter()
                    .map(|c| c.and_then(|c| usize::try_from(c).ok().and_then(|i| labels.get(i))))
                    .collect();
                let text: ArrayRef = Arc::new(text);
                if column.data_type == DataType::Utf8 { Ok(text) } else { cast(&text, &column.data_type) }
            }
            MemberValues::Stored if values.data_type() == &column.data_type => Ok(values.clone()),
            MemberValues::Stored => cast(values, &column.data_type),
        }
    }
}

fn obs_error(corpus: &Corpus, m: usize, e: dct_dataset::dct_obs::ObsError) -> CorpusError {
    CorpusError::Obs { member: corpus.members()[m].name.clone(), message: e.to_string() }
}

/// The type of a number column whose members store `a` and `b`: the one holding every value of both
/// ([`promote`], the rule the converter and `ObsSchema.infer` follow), `Float64` where none does.
pub(crate) fn common_number_type(a: &DataType, b: &DataType) -> DataType {
    let (Some(x), Some(y)) = (ArrowType::from_data_type(a), ArrowType::from_data_type(b)) else {
        return DataType::Float64;
    };
    promote(x, y).map_or(DataType::Float64, |t| t.data_type())
}

#[cfg(test)]
mod number_tests {
    use super::common_number_type;
    use arrow_schema::DataType::*;

    #[test]
    fn members_numbers_meet_in_the_narrowest_type_holding_both() {
        for (a, b, want) in [
            (Int8, Int16, Int16),
            (UInt8, UInt32, UInt32),
            (Int8, UInt8, Int16),
            (Int64, UInt32, Int64),
            (Int64, UInt64, Float64),
            (Float32, Float32, Float32),
            (Float64, Int64, Float64),
        ] {
            assert_eq!(common_number_type(&a, &b), want, "{a} and {b}");
            assert_eq!(common_number_type(&b, &a), want, "{b} and {a}");
        }
    }
}
