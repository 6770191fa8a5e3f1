//! The integration tests of `dct-corpus`, one module per subject, in one test binary.

mod obs;
mod read;
mod strata;
