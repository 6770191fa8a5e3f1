//! What to convert and how: the options a plan is made from.

use std::path::PathBuf;

use dct_codec::Preset;
pub use dct_corpus::GeneSpace;
use dct_format::Version;
use dct_input::{H5adMatrix, InputOptions};
use dct_obs::{DEFAULT_MAX_CATEGORIES, DEFAULT_TILES_PER_FILE};

use crate::error::ConvertError;
use crate::obs::Selection;

/// How the output's gene (column) order is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GeneSort {
    /// By decreasing total count over every input (ties by source index): the smallest tiles. Reads every input
    /// once more before writing.
    AllInputs,
    /// By decreasing total over an evenly spread sample of this many inputs.
    Sample(usize),
    /// Keep the source order.
    Keep,
}

/// What to convert and how.
#[derive(Debug, Clone)]
pub struct ConvertOptions {
    /// Output dataset: a local path or an object-store URL.
    pub output: String,
    /// Cells per tile (default 10,000).
    pub tile_size: u64,
    /// zstd level (default 19).
    pub level: i32,
    /// How the zstd parameters follow from the level (default [`Preset::Tuned`]).
    pub preset: Preset,
    /// Chunks per tile (default 8).
    pub n_chunks: usize,
    /// Which matrix of `.h5ad` inputs (X, a layer, raw/X).
    pub matrix: H5adMatrix,
    /// Feature type kept from 10x inputs (default `Gene Expression`; `None` keeps all).
    pub feature_type: Option<String>,
    /// Gene order.
    pub gene_sort: GeneSort,
    /// Write obs (per-cell metadata): the cell names as `obs_names` plus the obs columns of `.h5ad` inputs
    /// (default `true`; inputs without obs give `obs_names` only).
    pub write_obs: bool,
    /// Keep only these obs columns, in this order (`obs_names` names the cell names; leave it out to drop them);
    /// `None` (the default) keeps `obs_names` and every column.
    pub obs_columns: Option<Vec<String>>,
    /// Leave these obs columns out (needed for columns the reader cannot convert, such as datetimes).
    pub obs_exclude: Vec<String>,
    /// Write the gene table `var.parquet` (default `true`; the gene names, `var_names.txt`, are written either way).
    pub write_var: bool,
    /// Tiles (row groups) per obs shard (default 1000).
    pub obs_tiles_per_file: u64,
    /// Format version of the tiles and manifest (default 2; version 1 for readers that know only it: at most
    /// 65,536 genes, refused at plan time, and counts of at most 65,535, refused at the tile that holds a larger
    /// one, naming its cell and gene).
    pub format_version: Version,
    /// Categorical columns with more categories than this over all inputs are stored as strings (default 20,000).
    pub max_categories: usize,
    /// The dataset's genes when the inputs list different ones: their union, their intersection or a given
    /// vocabulary (see [`GeneSpace`]); a gene an input lacks is zero for its cells. `None` (the default): every
    /// input must list the same genes in the same order.
    pub genes: Option<GeneSpace>,
    /// How genes are matched across inputs with [`ConvertOptions::genes`]: `None` (the default) by their names
    /// (the var index of `.h5ad` inputs, the feature names of 10x inputs), or a column of each `.h5ad` input's
    /// gene table (e.g. `gene_ids`); 10x inputs answer any column with their feature IDs.
    pub gene_key: Option<String>,
}

impl ConvertOptions {
    /// Defaults for `output`.
    pub fn new(output: impl Into<String>) -> Self {
        ConvertOptions {
            output: output.into(),
            tile_size: 10_000,
            level: 19,
            preset: Preset::default(),
            n_chunks: 8,
            matrix: H5adMatrix::X,
            feature_type: Some("Gene Expression".into()),
            gene_sort: GeneSort::AllInputs,
            write_obs: true,
            obs_columns: None,
            obs_exclude: Vec::new(),
            write_var: true,
            obs_tiles_per_file: DEFAULT_TILES_PER_FILE,
            max_categories: DEFAULT_MAX_CATEGORIES,
            format_version: Version::V2,
            genes: None,
            gene_key: None,
        }
    }

    pub(crate) fn input_options(&self) -> InputOptions {
        InputOptions { matrix: self.matrix.clone(), feature_type: self.feature_type.clone() }
    }

    pub(crate) fn obs_selection(&self) -> Selection<'_> {
        Selection { columns: self.obs_columns.as_deref(), exclude: &self.obs_exclude }
    }
}

/// Checks the inputs and options before any input is read.
pub(crate) fn check_options(inputs: &[PathBuf], opts: &ConvertOptions) -> Result<(), ConvertError> {
    if inputs.is_empty() {
        return Err(ConvertError::Inputs("no inputs given".into()));
    }
    // The writer's own limits (the preset's base level is what the tiles are made at).
    let level = opts.preset.base_level().unwrap_or(opts.level);
    dct_dataset::check_encoder_settings(opts.tile_size, opts.n_chunks, level).map_err(ConvertError::Inputs)?;
    if opts.write_obs && opts.obs_tiles_per_file == 0 {
        return Err(ConvertError::Inputs("obs tiles per file must be at least 1".into()));
    }
    Ok(())
}

/// Which of `n` inputs the gene sort sums counts over.
pub(crate) fn sample_flags(sort: GeneSort, n: usize) -> Vec<bool> {
    match sort {
        GeneSort::AllInputs => vec![true; n],
        GeneSort::Keep => vec![false; n],
        GeneSort::Sample(k) => {
            let k = k.clamp(1, n);
            let mut s = vec![false; n];
            for i in 0..k {
                let pick = if k == 1 { 0 } else { i * (n - 1) / (k - 1) };
                s[pick] = true;
            }
            s
        }
    }
}
