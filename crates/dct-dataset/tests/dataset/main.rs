//! The integration tests of `dct-dataset`, one module per subject, in one test binary (one link of the
//! dependencies instead of one per file).

mod cloud;
mod common;
#[cfg(feature = "obs")]
mod conformance;
mod faults;
mod manifest_roundtrip;
mod roundtrip;
mod store_behaviour;
