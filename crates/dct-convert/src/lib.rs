//! Convert count matrices (AnnData `.h5ad`, 10x Genomics HDF5, 10x Matrix Market) into deltacells datasets.
//!
//! A conversion is three steps, so it can run on one machine or be split over many by the batch scheduler at
//! hand (a Slurm array, a Kubernetes indexed Job, a cloud batch array):
//!
//! 1. [`make_plan`]: open every input, check that their gene lists agree, sum gene totals (inputs scanned in
//!    parallel) and fix the gene order (by decreasing total) and the tiles. The [`Plan`] is a JSON file.
//! 2. [`run_part`]: write one contiguous share of the tiles to the output URL. Tiles are written atomically and
//!    a part skips tiles that are already complete and valid, so parts are idempotent and an interrupted part
//!    resumes where it stopped. Memory is bounded by the tile being built, the tile being compressed and one input
//!    window, not by the inputs' size.
//! 3. [`finalize`]: check every tile and write the side files, then `manifest.json` last.
//!
//! [`convert`] does all three on one machine. Tiles hold `tile_size` consecutive cells across input
//! boundaries, so the same cells split into files differently give byte-identical tiles, and a plan's parts
//! give the same bytes as a one-shot conversion.

mod error;
mod io;
mod plan;
mod remap;
mod run;

pub use error::ConvertError;
pub use plan::{ConvertOptions, GeneSort, PLAN_FORMAT, PLAN_MARKER, Plan, PlanInput, make_plan, natural_cmp};
pub use remap::GeneRemap;
pub use run::{PartReport, Progress, RunOptions, clear_output, convert, finalize, run_part};
