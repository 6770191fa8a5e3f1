//! A whole conversion on one machine: plan, every tile, finalize.

use std::path::PathBuf;

use dct_dataset::Manifest;

use crate::error::ConvertError;
use crate::finalize::finalize;
use crate::output::clear_output;
use crate::plan::{ConvertOptions, make_plan_with_spill};
use crate::run::{Progress, RunOptions, run_part_with_spill};
use crate::spill::Spill;

/// Plan, write every tile, finalize: a whole conversion on one machine. Re-running an interrupted conversion
/// with the same inputs and options resumes it (complete tiles are kept); `overwrite` replaces whatever the
/// output holds. The inputs the plan reads in full are kept for the tiles within the budget of `run.spill`
/// (see [`Spill`]).
pub fn convert(
    inputs: &[PathBuf],
    options: &ConvertOptions,
    run: &RunOptions,
    overwrite: bool,
    progress: impl FnMut(&Progress),
) -> Result<Manifest, ConvertError> {
    let spill = Spill::new(&run.spill)?;
    let plan = make_plan_with_spill(inputs, options, &spill)?;
    if overwrite {
        clear_output(&plan.output, &run.store)?;
    }
    run_part_with_spill(&plan, 0, 1, run, &spill, progress)?;
    drop(spill);
    finalize(&plan, run)
}
