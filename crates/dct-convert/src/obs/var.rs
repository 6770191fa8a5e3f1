//! The gene table of a conversion, for `var.parquet`.

use std::path::Path;

use arrow_array::UInt32Array;
use dct_input::{ColumnData as InputData, GeneTable};
use dct_obs::VarTable;

use super::convert::{cast_to, natural_array};
use super::schema::plain_type;
use crate::error::ConvertError;

/// The gene table of `source` in output column order (`gene_order[j]` is the source gene of column `j`), with its
/// index (the gene names) and every var column the reader could type (categoricals kept categorical; NaN floats
/// as nulls). Returns the var columns left out, with the reason.
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
        let stored = match &c.data {
            InputData::Categorical { codes, categories, .. } => {
                let bad =
                    || ConvertError::Inputs(format!("{}: var column {:?}: codes out of range", path.display(), c.name));
                let codes: Vec<i32> =
                    codes.iter().map(|&k| i32::try_from(k).map_err(|_| bad())).collect::<Result<_, _>>()?;
                dct_obs::categorical_array(&codes, categories)
                    .map_err(|e| ConvertError::Inputs(format!("{}: var column {:?}: {e}", path.display(), c.name)))?
            }
            data => cast_to(natural_array(data.clone()), plain_type(c), &path.display().to_string(), &c.name)?,
        };
        let ordered = arrow_select::take::take(&stored, &take, None)
            .map_err(|e| ConvertError::Inputs(format!("{}: var column {:?}: {e}", path.display(), c.name)))?;
        columns.push((c.name.clone(), ordered));
    }
    Ok((VarTable { index_name, index, columns }, skipped))
}
