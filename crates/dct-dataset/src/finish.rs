//! Finishing a dataset: the side files beside its tiles, then `manifest.json`, last. The one way a dataset is
//! finished, by [`DatasetWriter`](crate::DatasetWriter) and by the converter alike.

use bytes::Bytes;
use dct_store::Store;

use crate::error::DatasetError;
use crate::manifest::{GENE_ORDER_NAME, MANIFEST_NAME, Manifest, VAR_NAMES_NAME, VAR_TABLE_NAME};
use crate::side_files::check_permutation;

/// The files of a dataset beside its tiles and manifest, checked as they are set and stored by [`finish_dataset`]:
/// the gene order (`gene_order.npy`), the gene names (`var_names.txt`) and any other file (`var.parquet`, obs
/// shards and schema, ...), in the order they were added.
#[derive(Debug, Clone, Default)]
pub struct SideFiles {
    n_genes: u64,
    gene_order: Option<Vec<i32>>,
    var_names: Option<Vec<String>>,
    files: Vec<(String, Bytes)>,
    /// Files stored already, before the finish (large ones, such as obs shards, written as they are made).
    stored: Vec<String>,
}

impl SideFiles {
    /// No side files yet, for a dataset of `n_genes` genes.
    pub fn new(n_genes: u64) -> Self {
        SideFiles { n_genes, ..SideFiles::default() }
    }

    /// Sets the gene order: stored column `j` was column `order[j]` of the source. Must be a permutation of
    /// `0..n_genes`.
    pub fn set_gene_order(&mut self, order: Vec<i32>) -> Result<(), DatasetError> {
        if order.len() as u64 != self.n_genes {
            return Err(DatasetError::InvalidArgument(format!(
                "gene order has {} entries but the dataset has {} genes",
                order.len(),
                self.n_genes
            )));
        }
        check_permutation(&order).map_err(|m| DatasetError::InvalidArgument(format!("gene order: {m}")))?;
        self.gene_order = Some(order);
        Ok(())
    }

    /// Sets the gene names, one per gene in stored column order. Names may not contain a line break.
    pub fn set_var_names(&mut self, names: Vec<String>) -> Result<(), DatasetError> {
        if names.len() as u64 != self.n_genes {
            return Err(DatasetError::InvalidArgument(format!(
                "{} gene names given but the dataset has {} genes",
                names.len(),
                self.n_genes
            )));
        }
        if let Some((j, name)) = names.iter().enumerate().find(|(_, n)| n.contains(['\n', '\r'])) {
            return Err(DatasetError::InvalidArgument(format!(
                "gene name {j} ({name:?}) contains a line break, which var_names.txt cannot hold"
            )));
        }
        self.var_names = Some(names);
        Ok(())
    }

    /// Adds another file at `rel` (e.g. `var.parquet`, `obs/schema.json`), stored before the manifest. The
    /// manifest, tiles, `gene_order.npy` and `var_names.txt` are refused (they have setters or are the dataset's
    /// own), as are empty, `.` and `..` path parts.
    pub fn add_file(&mut self, rel: &str, bytes: Bytes) -> Result<(), DatasetError> {
        check_path(rel)?;
        self.files.push((rel.to_string(), bytes));
        Ok(())
    }

    /// Checks `rel` as [`add_file`](Self::add_file) does, for a file about to be stored at once (before the finish),
    /// and records it (storing `var.parquet` so sets `has_var_table`).
    pub fn add_stored(&mut self, rel: &str) -> Result<(), DatasetError> {
        check_path(rel)?;
        self.stored.push(rel.to_string());
        Ok(())
    }

    /// Whether a gene order is set.
    pub fn has_gene_order(&self) -> bool {
        self.gene_order.is_some()
    }

    /// Whether gene names are set.
    pub fn has_var_names(&self) -> bool {
        self.var_names.is_some()
    }

    /// Whether `var.parquet` was added.
    pub fn has_var_table(&self) -> bool {
        self.files.iter().any(|(rel, _)| rel == VAR_TABLE_NAME) || self.stored.iter().any(|rel| rel == VAR_TABLE_NAME)
    }

    /// Every file to store, encoded, in order: the added files, then the gene order and names.
    fn encoded(self) -> Vec<(String, Bytes)> {
        let mut files = self.files;
        if let Some(order) = &self.gene_order {
            files.push((GENE_ORDER_NAME.into(), Bytes::from(crate::npy::write_i32(order))));
        }
        if let Some(names) = &self.var_names {
            let mut text = String::with_capacity(names.iter().map(|n| n.len() + 1).sum());
            for n in names {
                text.push_str(n);
                text.push('\n');
            }
            files.push((VAR_NAMES_NAME.into(), Bytes::from(text)));
        }
        files
    }
}

/// Refuses paths a caller may not store side files at: the manifest, tiles, `gene_order.npy` and `var_names.txt`
/// (stored by the finish itself), and empty, `.` or `..` parts.
fn check_path(rel: &str) -> Result<(), DatasetError> {
    let reserved = rel == MANIFEST_NAME || rel == GENE_ORDER_NAME || rel == VAR_NAMES_NAME;
    let valid = !rel.is_empty() && rel.split('/').all(|p| !p.is_empty() && p != "." && p != "..");
    if reserved || rel.starts_with(dct_format::objects::TILES_DIR) || !valid {
        return Err(DatasetError::InvalidArgument(format!(
            "put_file({rel:?}): not an allowed side-file path (the writer stores the manifest, tiles, \
             gene_order.npy and var_names.txt itself)"
        )));
    }
    Ok(())
}

/// Finishes the dataset at `store` whose tiles are stored: sets the manifest's `has_gene_order`, `has_var_names`
/// and `has_var_table` from `side` and records the side files' digests (`side_file_sha256`), validates it, stores the side files and then `manifest.json`, last, so that a
/// dataset interrupted before the end has no manifest and never looks complete. Returns the manifest stored.
pub async fn finish_dataset(store: &Store, mut manifest: Manifest, side: SideFiles) -> Result<Manifest, DatasetError> {
    if side.n_genes != manifest.n_genes {
        return Err(DatasetError::Internal(format!(
            "side files made for {} genes, the manifest has {}",
            side.n_genes, manifest.n_genes
        )));
    }
    manifest.has_gene_order = side.has_gene_order();
    manifest.has_var_names = side.has_var_names();
    manifest.has_var_table = side.has_var_table();
    let files = side.encoded();
    manifest.side_file_sha256.clear();
    for (rel, bytes) in &files {
        manifest.record_side_file(rel, bytes);
    }
    manifest.validate().map_err(|source| DatasetError::Manifest { url: store.url(MANIFEST_NAME), cause: source })?;
    for (rel, bytes) in files {
        store.put(&rel, bytes).await?;
    }
    // Every object is written: temporary files that writes of an interrupted earlier run left go before the
    // manifest says the dataset is whole.
    store.remove_leftovers("", dct_format::objects::is_dataset_object).await?;
    store.put(MANIFEST_NAME, Bytes::from(manifest.to_json_pretty())).await?;
    Ok(manifest)
}
