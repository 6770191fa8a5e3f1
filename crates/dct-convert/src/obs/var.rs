//! The gene table of a conversion, for `var.parquet`.

use std::path::Path;

use arrow_array::UInt32Array;
use dct_input::{ColumnData as InputData, GeneTable};
use dct_obs::VarTable;
use rayon::prelude::*;

use super::convert::{cast_to, natural_array_of};
use super::schema::plain_type;
use crate::error::ConvertError;

/// The gene table of `source` in output column order (`gene_order[j]` is the source gene of column `j`; `None`:
/// the source's order), with its index (the gene names; left empty without `with_index`) and every var column the
/// reader could type (categoricals kept categorical; NaN floats as nulls). Returns the var columns left out, with
/// the reason.
pub(crate) fn var_table(
    genes: &GeneTable,
    gene_order: Option<&[u32]>,
    with_index: bool,
    path: &Path,
) -> Result<(VarTable, Vec<(String, String)>), ConvertError> {
    let index_name = (genes.index_name != "_index").then(|| genes.index_name.clone());
    let index: Vec<String> = match (with_index, gene_order) {
        (false, _) => Vec::new(),
        (true, Some(order)) => order.iter().map(|&g| genes.names[g as usize].clone()).collect(),
        (true, None) => genes.names.clone(),
    };
    let take = gene_order.map(|order| UInt32Array::from(order.to_vec()));
    let mut skipped = genes.skipped.clone();
    let mut columns = Vec::with_capacity(genes.columns.len());
    let mut ordered_columns = Vec::new();
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
        let stored = match &c.data {
            InputData::Categorical { codes, categories, ordered } => {
                if *ordered {
                    ordered_columns.push(c.name.clone());
                }
                let bad =
                    || ConvertError::Inputs(format!("{}: var column {:?}: codes out of range", path.display(), c.name));
                let codes: Vec<i32> =
                    codes.iter().map(|&k| i32::try_from(k).map_err(|_| bad())).collect::<Result<_, _>>()?;
                dct_obs::categorical_array(&codes, categories)
                    .map_err(|e| ConvertError::Inputs(format!("{}: var column {:?}: {e}", path.display(), c.name)))?
            }
            data => cast_to(natural_array_of(data), plain_type(c), &path.display().to_string(), &c.name)?,
        };
        let ordered = match &take {
            Some(take) => arrow_select::take::take(&stored, take, None)
                .map_err(|e| ConvertError::Inputs(format!("{}: var column {:?}: {e}", path.display(), c.name)))?,
            None => stored,
        };
        columns.push((c.name.clone(), ordered));
    }
    Ok((VarTable { index_name, index, columns, ordered: ordered_columns }, skipped))
}

/// One input's part in a gene space's table: its gene table in its own gene order, and the output column of each of
/// its genes ([`crate::NO_COLUMN`] for genes the dataset leaves out).
pub(crate) struct InputVar {
    pub(crate) table: VarTable,
    pub(crate) columns: Vec<u32>,
}

/// Whether the values of two arrays of one type differ, row by row (a null against a value differs; categoricals
/// are compared by their strings).
fn distinct(a: &arrow_array::ArrayRef, b: &arrow_array::ArrayRef) -> Result<arrow_array::BooleanArray, String> {
    use arrow_schema::DataType;
    match arrow_ord::cmp::distinct(a, b) {
        Ok(d) => Ok(d),
        Err(_) => {
            let text = |x: &arrow_array::ArrayRef| arrow_cast::cast(x, &DataType::Utf8).map_err(|e| e.to_string());
            arrow_ord::cmp::distinct(&text(a)?, &text(b)?).map_err(|e| e.to_string())
        }
    }
}

/// The gene table of a dataset made from inputs with different gene lists: per output gene, the row of the first
/// input that has it (`names` are the output genes' names). A column takes its type from the first input that has
/// it; an input whose column has another type that does not cast, or that lacks the column, leaves it null for
/// the genes taken from it. Returns the table and how many genes a later input describes differently (any column
/// both have, compared as displayed).
pub(crate) fn combined_var_table(inputs: &[InputVar], names: Vec<String>) -> Result<(VarTable, u64), ConvertError> {
    use arrow_array::{Array, ArrayRef};

    let n = names.len();
    // Where each output gene comes from, and every input that has it.
    let mut holders: Vec<Vec<(usize, usize)>> = vec![Vec::new(); n];
    for (m, input) in inputs.iter().enumerate() {
        for (r, &c) in input.columns.iter().enumerate() {
            if c != crate::NO_COLUMN {
                holders[c as usize].push((m, r));
            }
        }
    }
    let mut order: Vec<&str> = Vec::new();
    for input in inputs {
        for (name, _) in &input.table.columns {
            if !order.contains(&name.as_str()) {
                order.push(name);
            }
        }
    }
    // Per input, the genes it has that an earlier input described first (output gene, row in this input).
    let mut shared: Vec<(Vec<u32>, Vec<u32>)> = vec![(Vec::new(), Vec::new()); inputs.len()];
    for (g, h) in holders.iter().enumerate() {
        for &(m, r) in h.iter().skip(1) {
            shared[m].0.push(g as u32);
            shared[m].1.push(r as u32);
        }
    }
    // Columns are built and compared in parallel; each says which output genes an input describes differently.
    let built: Vec<(String, ArrayRef, Vec<u32>)> = order
        .par_iter()
        .map(|&name| {
            let found: Vec<Option<&ArrayRef>> =
                inputs.iter().map(|i| i.table.columns.iter().find(|(c, _)| c == name).map(|(_, a)| a)).collect();
            let data_type = found.iter().flatten().next().expect("listed from an input").data_type().clone();
            let sources: Vec<Option<ArrayRef>> = found
                .iter()
                .map(|a| {
                    a.and_then(|a| {
                        if a.data_type() == &data_type { Some(a.clone()) } else { arrow_cast::cast(a, &data_type).ok() }
                    })
                })
                .collect();
            let null = arrow_array::new_null_array(&data_type, 1);
            let mut arrays: Vec<&dyn Array> = sources.iter().flatten().map(|a| a.as_ref()).collect();
            arrays.push(null.as_ref());
            let slot: Vec<Option<usize>> = {
                let mut k = 0;
                sources.iter().map(|s| s.as_ref().map(|_| (k, k += 1).0)).collect()
            };
            let picks: Vec<(usize, usize)> = holders
                .iter()
                .map(|h| h.first().and_then(|&(m, r)| slot[m].map(|s| (s, r))).unwrap_or((arrays.len() - 1, 0)))
                .collect();
            let err = |e: String| ConvertError::Inputs(format!("var column {name:?}: {e}"));
            let column = arrow_select::interleave::interleave(&arrays, &picks).map_err(|e| err(e.to_string()))?;
            // Each later input's values of the genes it shares with the one they were taken from, against those.
            let mut differing = Vec::new();
            for (m, source) in sources.iter().enumerate() {
                let Some(source) = source else { continue };
                let (genes, rows) = &shared[m];
                if genes.is_empty() {
                    continue;
                }
                let kept = arrow_select::take::take(&column, &UInt32Array::from(genes.clone()), None);
                let theirs = arrow_select::take::take(source, &UInt32Array::from(rows.clone()), None);
                let (kept, theirs) = (kept.map_err(|e| err(e.to_string()))?, theirs.map_err(|e| err(e.to_string()))?);
                let differ = distinct(&kept, &theirs).map_err(err)?;
                differing.extend(genes.iter().zip(differ.iter()).filter(|(_, d)| *d != Some(false)).map(|(g, _)| *g));
            }
            Ok((name.to_string(), column, differing))
        })
        .collect::<Result<_, ConvertError>>()?;
    let mut disagree = vec![false; n];
    let mut columns = Vec::with_capacity(built.len());
    for (name, column, differing) in built {
        differing.iter().for_each(|&g| disagree[g as usize] = true);
        columns.push((name, column));
    }
    let index_name = inputs.first().and_then(|i| i.table.index_name.clone());
    let disagreeing = disagree.iter().filter(|&&d| d).count() as u64;
    // Ordered as the first input that has the column says (whose type the column took).
    let first_with = |name: &str| inputs.iter().find(|i| i.table.columns.iter().any(|(c, _)| c == name));
    let ordered = columns
        .iter()
        .filter(|(name, _)| first_with(name).is_some_and(|i| i.table.ordered.contains(name)))
        .map(|(name, _)| name.clone())
        .collect();
    Ok((VarTable { index_name, index: names, columns, ordered }, disagreeing))
}
