//! Reports of deltacells datasets: one self-contained HTML page (style and plots inline, nothing fetched from the
//! network) saying what a dataset holds and how it is stored, for people to look at rather than read.
//!
//! Sections: a summary (the manifest's facts, the same numbers as `deltacells info --json`); cells (histograms of
//! nonzeros and counts per cell); tiles (bytes and bytes per nonzero of every tile); chunk balance within tiles;
//! genes (total counts by rank, the top genes); obs (per column: the 30 most frequent categories, or string values
//! when they repeat, a histogram of numbers, true/false counts, missing fractions); and, given the JSON of
//! `deltacells bench --json`, the read's throughput and its batches over time.
//!
//! A large dataset is sampled: the cells, chunk and gene sections decode an even spread of at most
//! [`ReportOptions::sample_tiles`] tiles (first and last included), and say so; tile sizes come from the manifest
//! (every tile) and obs from whole columns, read tile by tile (a numeric column's histogram from at most
//! [`NUMERIC_SAMPLE`] values, a string column's counts from its first [`STRING_SAMPLE`]). Plots are drawn by
//! `plotters` as SVG (see `docs/ARCHITECTURE.md`).
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let ds = dct_dataset::Dataset::open("pbmc.dct", Default::default())?;
//! let report = dct_report::report(&ds, &dct_report::ReportOptions::default())?;
//! std::fs::write("report.html", &report.html)?;
//! # Ok(()) }
//! ```

mod bench;
mod html;
mod obs;
mod plots;
mod sample;
mod sections;

pub use obs::{ColumnSummary, ColumnValues, NUMERIC_SAMPLE, STRING_SAMPLE, TOP_CATEGORIES, summarize_obs};
pub use sample::{Sample, sample, spread};

use dct_dataset::Dataset;
use dct_dataset::dct_obs::ObsOptions;
use serde_json::Value;

/// Why a report could not be made. Each names what and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    /// The dataset could not be read.
    #[error("{0}")]
    Dataset(String),
    /// A sampled tile is corrupt.
    #[error("{url}: {cause}; run `deltacells verify` on the dataset to see every problem")]
    Tile {
        /// The tile's URL.
        url: String,
        /// What is wrong.
        cause: String,
    },
    /// The obs could not be read.
    #[error("the obs of {url}: {cause}")]
    Obs {
        /// The dataset's URL.
        url: String,
        /// What went wrong.
        cause: String,
    },
    /// The benchmark JSON given is not the output of `deltacells bench --json`.
    #[error("the benchmark results {0}")]
    Bench(String),
}

/// What a report shows, and how much it reads.
#[derive(Debug, Clone)]
pub struct ReportOptions {
    /// Tiles decoded at most for the cells, chunks and genes sections (an even spread; default 24).
    pub sample_tiles: usize,
    /// How the obs columns are fetched (the cache they go into).
    pub obs: ObsOptions,
    /// The output of `deltacells bench --json` for this dataset, shown as a section of its own.
    pub bench: Option<Value>,
    /// The page's title (default: the dataset's URL).
    pub title: Option<String>,
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions { sample_tiles: 24, obs: ObsOptions::default(), bench: None, title: None }
    }
}

/// A report: the page, and the numbers it shows (the summary's facts, plus what the sample measured).
#[derive(Debug, Clone)]
pub struct Report {
    /// The whole HTML document.
    pub html: String,
    /// `facts`: [`dct_dataset::dataset_facts`] of the manifest; `sample`: tiles and cells decoded, and how they
    /// were chosen; `obs`: per column, its kind and missing cells.
    pub facts: Value,
}

/// Makes the report of `ds`.
pub fn report(ds: &Dataset, options: &ReportOptions) -> Result<Report, ReportError> {
    let tiles = spread(ds.n_tiles(), options.sample_tiles);
    let sampled = sample(ds, &tiles)?;
    let columns = summarize_obs(ds, options.obs.clone())?;
    let names = ds.var_names().map_err(|e| ReportError::Dataset(e.to_string()))?;
    if let Some(b) = &options.bench {
        bench::check(b)?;
    }
    Ok(sections::build(ds, options, &sampled, &columns, names.as_deref().map(Vec::as_slice)))
}
