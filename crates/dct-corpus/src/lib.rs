//! Corpora: many deltacells datasets, each with its own genes, read as one matrix in one gene vocabulary.
//!
//! A training corpus is hundreds of datasets whose gene lists differ (subsets, orders, symbols or Ensembl IDs),
//! read through a model's fixed vocabulary. A [`Corpus`] opens its members' readers side by side, identifies each
//! member's genes by its `var_names` or a column of its gene table ([`GeneKey`]), builds the vocabulary
//! ([`GeneSpace`]: union, intersection or a given list) and reads rows of any members in the vocabulary's column
//! order, column indices sorted within each row, counts exactly the members' counts. Cells can be chosen
//! ([`Corpus::select`]); a selection is kept as ranges of cells, so its memory grows with the runs of selected
//! cells, never with the corpus.
//!
//! The Python package's `deltacells.open_corpus` wraps this crate (see the corpus specification).
//!
//! # Modules
//!
//! * `genes.rs`: [`GeneSpace`], [`GeneKey`], [`GeneMap`] (the vocabulary and each member's columns in it, with the
//!   re-indexing of one row).
//! * `interner.rs`: [`GeneInterner`], gene identifiers held once for many gene lists.
//! * `selection.rs`: [`Selection`], the chosen cells of the members laid end to end: runs or a bitmap per block of
//!   65,536 cells (`selection/tests.rs`: every query against a plain list of cells).
//! * `corpus.rs`: [`Corpus`] (opening, reading, choosing cells, the tiles an epoch plans over) and [`member_genes`].
//! * `recent.rs`: the tiles random reads used last, which a corpus with a tile cap ([`Corpus::with_tile_cap`])
//!   keeps across its members.
//! * `concurrent.rs`: work on every member at once (gene tables, obs schemas, obs columns), on up to
//!   [`OPEN_CONCURRENCY`] threads.
//! * `obs.rs`: [`CorpusObs`], the members' obs as one set of columns with one vocabulary per category column.
//! * `choose.rs`: [`Corpus::filter`] (conditions on obs columns) and [`Corpus::split`] (seeded parts, whole
//!   groups to one part), reading the columns a block of cells at a time.
//! * `weights.rs`: [`Corpus::weighted_units`], what a weighted epoch draws of each member.
//! * `strata.rs`: [`Strata`] ([`Corpus::strata`]) and [`Corpus::stratified_units`], what a stratified epoch draws
//!   of each category of an obs column.
//! * `error.rs`: [`CorpusError`].

#![forbid(unsafe_code)]

mod choose;
mod concurrent;
mod corpus;
mod error;
mod genes;
mod in_place;
mod interner;
mod obs;
mod recent;
mod selection;
mod spare;
mod split;
mod strata;
mod weights;

pub use choose::{Condition, ObsValue};
pub use concurrent::OPEN_CONCURRENCY;
pub use corpus::{Corpus, CorpusBatch, Member, member_genes};
pub use error::CorpusError;
pub use genes::{GeneKey, GeneMap, GeneSpace, MemberColumns};
pub use interner::GeneInterner;
pub use obs::{CorpusObs, CorpusObsColumn};
pub use selection::{Selection, SelectionBuilder};
pub use strata::Strata;
pub use weights::MAX_EPOCH_UNITS;
