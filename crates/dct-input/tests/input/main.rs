//! The integration tests of `dct-input`, one module per subject, in one test binary (one link of the
//! dependencies instead of one per file).

mod bad_inputs;
mod common;
mod conformance_mtx;
mod h5ad_layouts;
mod h5ad_nullable;
mod pbmc_formats;
mod tenx;
