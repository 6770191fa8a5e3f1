//! The integration tests of `dct-cli`, one module per subject, in one test binary (one link of the
//! dependencies instead of one per file).

mod backends;
mod cli;
mod convert_scan;
mod corpus;
mod crash;
mod obs;
