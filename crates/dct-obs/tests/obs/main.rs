//! The integration tests of `dct-obs`, one module per subject, in one test binary (one link of the
//! dependencies instead of one per file).

mod common;
mod conformance;
mod faults;
mod kill;
mod localize;
mod schema_inference;
mod verify;
