//! The integration tests of `dct-convert`, one module per subject, in one test binary (one link of the
//! dependencies instead of one per file).

mod align;
mod append;
mod convert;
mod merge;
mod obs;
mod obs_bench;
mod spill;
mod split_scan;
mod subset;
mod support;
mod writer_agrees;
