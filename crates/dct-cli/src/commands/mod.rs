//! One module per subcommand.

pub mod append;
pub mod bench;
pub mod bench_corpus;
pub mod convert;
pub mod corpus;
pub mod demo;
pub mod export;
pub mod info;
pub mod inspect;
pub mod merge;
pub mod obs;
pub mod report;
pub mod subset;
pub mod verify;
