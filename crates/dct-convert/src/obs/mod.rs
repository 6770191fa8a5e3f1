//! Obs (per-cell metadata) and the gene table of a conversion.
//!
//! * At plan time every `.h5ad` input's obs is read once ([`summarize`]) and [`build_schema`] makes ONE global
//!   schema: the cell names as `obs_names` (string), then the selected columns; one vocabulary per categorical column
//!   (the union over inputs, in order of first appearance), vocabularies above `max_categories` stored as strings,
//!   numeric types widened across inputs. The exact `obs/schema.json` text goes into the plan, so parts and finalize
//!   agree and the plan's fingerprint covers it.
//! * At finalize each input's obs is read again and converted to the schema ([`InputObs::read`]: categorical codes
//!   remapped to the global vocabulary, NaN floats as nulls, types widened), then cut into tiles across input
//!   boundaries ([`TileCutter`], exactly one row group per tile) and handed to the `dct-obs` shard writer.
//! * [`var_table`]: the gene table of the first input in output column order, for `var.parquet`.

mod convert;
mod cutter;
mod schema;
mod var;

pub(crate) use convert::{InputObs, SchemaPlan};
pub(crate) use cutter::TileCutter;
pub use schema::OBS_NAMES;
pub(crate) use schema::{InputSummary, Selection, build_schema, summarize};
pub(crate) use var::{InputVar, combined_var_table, var_table};

#[cfg(test)]
mod tests;
