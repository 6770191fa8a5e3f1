//! The integration tests of `dct-codec`, one module per subject, in one test binary (one link of the
//! dependencies instead of one per file).

mod conformance;
mod corruption;
mod largest_alloc;
mod roundtrip;
mod streaming;
