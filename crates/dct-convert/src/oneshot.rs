//! A whole conversion on one machine: plan, every tile, finalize.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use dct_dataset::Manifest;

use crate::error::ConvertError;
use crate::finalize::finalize;
use crate::output::clear_output;
use crate::plan::{ConvertOptions, Plan, make_plan_with_spill};
use crate::run::{PartReport, Progress, RunOptions, run_part_with_spill};
use crate::spill::{Spill, SpillStats};

/// Where a one-machine conversion is, for a caller that reports it (see [`convert_with`]).
#[derive(Debug)]
pub enum Stage<'a> {
    /// The plan is made (and the output cleared, if asked).
    Planned {
        /// The plan.
        plan: &'a Plan,
        /// What the spill keeps of the inputs for the tiles.
        held: SpillStats,
        /// Time spent planning.
        took: Duration,
    },
    /// Tiles are being written.
    Tiles(&'a Progress),
    /// Every tile is written; the tiles are checked and the side files, the obs and the manifest written.
    Finalizing {
        /// The plan.
        plan: &'a Plan,
    },
}

/// What a one-machine conversion did.
#[derive(Debug)]
pub struct ConvertReport {
    /// The manifest written last.
    pub manifest: Manifest,
    /// The plan it followed.
    pub plan: Plan,
    /// The tiles written now and found complete.
    pub tiles: PartReport,
    /// Inputs kept by the spill that could not be read back and were decoded again (same tiles).
    pub spill_dropped: usize,
    /// The whole conversion, plan included.
    pub took: Duration,
}

/// Plan, write every tile, finalize: a whole conversion on one machine. Re-running an interrupted conversion
/// with the same inputs and options resumes it (complete tiles are kept); `overwrite` replaces whatever the
/// output holds. The inputs the plan reads in full are kept for the tiles within the budget of `run.spill`
/// (see [`Spill`]).
pub fn convert(
    inputs: &[PathBuf],
    options: &ConvertOptions,
    run: &RunOptions,
    overwrite: bool,
    mut progress: impl FnMut(&Progress),
) -> Result<Manifest, ConvertError> {
    let report = convert_with(inputs, options, run, overwrite, |stage| {
        if let Stage::Tiles(p) = stage {
            progress(p)
        }
    })?;
    Ok(report.manifest)
}

/// [`convert`], telling `on` each [`Stage`] and returning the whole [`ConvertReport`].
pub fn convert_with(
    inputs: &[PathBuf],
    options: &ConvertOptions,
    run: &RunOptions,
    overwrite: bool,
    mut on: impl FnMut(Stage<'_>),
) -> Result<ConvertReport, ConvertError> {
    let start = Instant::now();
    let spill = Spill::new(&run.spill)?;
    let plan = make_plan_with_spill(inputs, options, &spill)?;
    if overwrite {
        clear_output(&plan.output, &run.store)?;
    }
    on(Stage::Planned { plan: &plan, held: spill.stats(), took: start.elapsed() });
    let tiles = run_part_with_spill(&plan, 0, 1, run, &spill, |p| on(Stage::Tiles(p)))?;
    let spill_dropped = spill.stats().dropped;
    drop(spill);
    on(Stage::Finalizing { plan: &plan });
    let manifest = finalize(&plan, run)?;
    Ok(ConvertReport { manifest, plan, tiles, spill_dropped, took: start.elapsed() })
}
