//! The bridge to `dct-obs`: a dataset's obs and var table.

use super::Dataset;
use crate::error::{Category, DatasetError};
use crate::manifest::Manifest;

/// The obs facts of a manifest, as `dct-obs` takes them.
pub(crate) fn obs_manifest(m: &Manifest) -> dct_obs::ObsManifest {
    dct_obs::ObsManifest { tile_cells: m.tile_cells.clone(), fields: m.obs.clone() }
}

impl Dataset {
    /// Opens this dataset's obs (per-cell metadata) for a training job: reads `obs/schema.json` and checks it
    /// against the manifest's obs fingerprint. Then [`localize`](dct_obs::Obs::localize) the columns needed (ranged
    /// reads of their column chunks into the node-local cache, once per node) and look cells up with
    /// [`take`](dct_obs::Obs::take). Needs the `obs` feature (on by default).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use dct_dataset::{Dataset, ReadOptions};
    /// let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/conformance/datasets/v2_with_obs");
    /// let ds = Dataset::open(dir, ReadOptions::default())?;
    /// let cache = tempfile::tempdir()?;
    /// let obs = ds.obs(dct_dataset::dct_obs::ObsOptions { cache_dir: Some(cache.path().into()), ..Default::default() })?;
    /// obs.localize_blocking(&["cell_type"])?;
    /// let batch = obs.take(&[349, 0], &["cell_type"])?; // category codes; labels via obs.categories("cell_type")
    /// assert_eq!(batch.num_rows(), 2);
    /// # Ok(()) }
    /// ```
    pub fn obs(&self, options: dct_obs::ObsOptions) -> Result<dct_obs::Obs, DatasetError> {
        let m = &self.core.manifest;
        if !m.has_obs {
            return Err(DatasetError::InvalidArgument(format!(
                "{} has no obs (has_obs is false in its manifest); convert it again with obs to get per-cell metadata",
                self.url()
            )));
        }
        let store = self.core.store.clone();
        let manifest = obs_manifest(m);
        let opened = self.rt.block_on(async move { dct_obs::Obs::open(store, manifest, options).await })?;
        opened.map_err(|e| obs_error(self.url(), e))
    }
}

impl Dataset {
    /// The gene table (`var.parquet`: one row per gene in stored column order, the pandas index and columns), or
    /// `None` if the dataset has none. Read whole (at most [`dct_obs::MAX_VAR_BYTES`]) and decoded each call.
    pub fn var_table(&self) -> Result<Option<dct_obs::arrow::array::RecordBatch>, DatasetError> {
        if !self.core.manifest.has_var_table {
            return Ok(None);
        }
        let rel = crate::manifest::VAR_TABLE_NAME;
        let bytes = self.side_file(rel, dct_obs::MAX_VAR_BYTES)?;
        decode_var_table(bytes, &self.core.store.url(rel), self.core.manifest.n_genes).map(Some)
    }
}

/// `var.parquet` bytes (at `url`) decoded, with one row per gene of the dataset's `n_genes`; a
/// [`DatasetError::SideFile`] naming the file otherwise.
pub(crate) fn decode_var_table(
    bytes: bytes::Bytes,
    url: &str,
    n_genes: u64,
) -> Result<dct_obs::arrow::array::RecordBatch, DatasetError> {
    let side = |message: String| DatasetError::SideFile { url: url.to_string(), message };
    let table = dct_obs::decode_var_parquet(bytes, url).map_err(|e| {
        // The parquet error names the file already; the side-file error names it once.
        let text = e.to_string();
        side(text.strip_prefix(&format!("{url}: ")).map_or(text.clone(), str::to_string))
    })?;
    if table.num_rows() as u64 != n_genes {
        return Err(side(format!(
            "holds {} rows but the dataset has {n_genes} genes (one row per gene)",
            table.num_rows()
        )));
    }
    Ok(table)
}

/// A `dct-obs` error as a dataset error (storage failures keep their kind; the rest name the dataset).
pub(crate) fn obs_error(dataset: &str, e: dct_obs::ObsError) -> DatasetError {
    use dct_obs::ObsError;
    if let ObsError::Store(e) = e {
        return e.into();
    }
    let category = match &e {
        ObsError::Manifest(_) => Category::ObsFields,
        ObsError::Fingerprint { .. } => Category::ObsSha256,
        ObsError::Cache { .. } | ObsError::NoCacheDir | ObsError::Internal(_) => Category::Io,
        ObsError::UnknownColumn { .. }
        | ObsError::NotLocalized(_)
        | ObsError::CellOutOfRange(_)
        | ObsError::Input { .. } => Category::InvalidArgument,
        _ => Category::ObsShard,
    };
    DatasetError::Obs { category, url: dataset.to_string(), message: e.to_string() }
}
