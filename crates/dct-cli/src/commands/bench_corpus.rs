//! `deltacells bench --corpus MEMBER...`: what reading many datasets as one corpus costs over reading the same
//! cells from each member alone: a training epoch's batches (the loader's windows), read through the corpus's gene
//! vocabulary, then the same batches read member by member without re-indexing, side by side.

use std::time::Instant;

use dct_corpus::{Corpus, GeneKey};
use dct_dataset::{Batch, EpochOptions, EpochPlan, ReadOptions, SparseRows, StoreOptions};
use serde_json::json;

use crate::output::print_json;

/// What `bench --corpus` needs of the command line.
pub struct CorpusBench<'a> {
    /// Member datasets, in cell order.
    pub members: &'a [String],
    /// `union`, `intersection`, or a file of identifiers, one a line.
    pub genes: &'a str,
    /// A gene-table column naming the members' genes (`None`: the gene names).
    pub gene_key: Option<&'a str>,
    /// Cells per batch.
    pub batch_size: usize,
    /// Tiles per shuffling window.
    pub window: usize,
    /// Tiles prefetched beyond the window.
    pub prefetch: usize,
    /// Stop after this many cells.
    pub max_cells: u64,
    /// Decode threads.
    pub threads: usize,
    /// Check each tile's CRC.
    pub verify: bool,
    /// Seed of the epoch.
    pub seed: u64,
    /// Print JSON.
    pub json: bool,
}

/// One timed pass: cells, nonzeros, seconds.
struct Pass {
    cells: u64,
    nnz: u64,
    seconds: f64,
}

impl Pass {
    fn cells_per_second(&self) -> f64 {
        self.cells as f64 / self.seconds
    }
}

/// Runs `bench --corpus`.
pub fn run(b: &CorpusBench<'_>, store: &StoreOptions) -> anyhow::Result<u8> {
    let space = super::corpus::gene_space(b.genes)?;
    let key = b.gene_key.map_or(GeneKey::VarNames, |c| GeneKey::Column(c.to_string()));
    let options = ReadOptions {
        decode_threads: b.threads,
        max_prefetch_tiles: b.prefetch.max(1),
        max_cached_tiles: b.window + 1,
        verify_crc: b.verify,
        store: store.clone(),
        ..ReadOptions::default()
    };
    let opened = Instant::now();
    let members = super::corpus::open_members(b.members, &options)?;
    let corpus = Corpus::open(members, &key, &space)?;
    let open_seconds = opened.elapsed().as_secs_f64();
    let opts = EpochOptions { shuffle_tiles: b.window, seed: b.seed, ..EpochOptions::new(b.batch_size.max(1)) };

    // Through the corpus: rows in the vocabulary's columns.
    let through = corpus.reopened(&options)?;
    let mut batch = Batch::<f32>::default();
    let mut indptr = Vec::new();
    let through_corpus = epoch(&through, &opts, b, |cells| {
        let need = through.batch_nnz(cells)? as usize;
        if batch.indices.len() < need {
            batch.indices.resize(need, 0);
            batch.values.resize(need, 0.0);
        }
        let (nnz, _) = through.get_batch_to(cells, &mut indptr, &mut batch.indices, &mut batch.values)?;
        Ok(nnz as u64)
    })?;
    // The same batches member by member, each member's rows in its own gene order.
    let alone = corpus.reopened(&options)?;
    let mut member_batch = Batch::<f32>::default();
    let members_alone = epoch(&alone, &opts, b, |cells| {
        let located = alone.locate(cells)?;
        let mut per_member: Vec<Vec<u64>> = vec![Vec::new(); alone.members().len()];
        for (m, local) in located {
            per_member[m as usize].push(local);
        }
        let mut nnz = 0;
        for (m, locals) in per_member.iter().enumerate().filter(|(_, l)| !l.is_empty()) {
            alone.members()[m].dataset.get_batch_into(locals, &mut member_batch)?;
            nnz += member_batch.nnz() as u64;
        }
        Ok(nnz)
    })?;
    let ratio = through_corpus.cells_per_second() / members_alone.cells_per_second();
    if b.json {
        print_json(&json!({
            "members": b.members.len(), "cells": corpus.n_cells(), "genes": corpus.n_genes(),
            "open_seconds": open_seconds, "batch_size": b.batch_size, "window": b.window,
            "corpus_cells": through_corpus.cells, "corpus_seconds": through_corpus.seconds,
            "corpus_cells_per_second": through_corpus.cells_per_second(),
            "corpus_nnz_per_second": through_corpus.nnz as f64 / through_corpus.seconds,
            "corpus_nnz": through_corpus.nnz, "members_nnz": members_alone.nnz,
            "members_cells_per_second": members_alone.cells_per_second(),
            "members_nnz_per_second": members_alone.nnz as f64 / members_alone.seconds,
            "ratio": ratio,
        }))?;
    } else {
        outln!(
            "corpus of {} members: {} cells, {} genes in the vocabulary (opened in {open_seconds:.2} s)",
            b.members.len(),
            corpus.n_cells(),
            corpus.n_genes()
        );
        outln!(
            "an epoch's batches of {} (windows of {} tiles), {} cells:",
            b.batch_size,
            b.window,
            through_corpus.cells
        );
        for (what, pass) in [("through the corpus", &through_corpus), ("members alone", &members_alone)] {
            outln!(
                "  {what:<20} {:>10.0} cells/s   {:>8.1} M nonzeros/s   {:.2} s",
                pass.cells_per_second(),
                pass.nnz as f64 / pass.seconds / 1e6,
                pass.seconds
            );
        }
        outln!("  corpus / members alone: {ratio:.3}");
    }
    Ok(0)
}

/// Reads the batches of epoch 0 of `corpus` with `read` (returning the nonzeros read), prefetching and releasing
/// tiles as the training loader does, until `max_cells`.
fn epoch(
    corpus: &Corpus,
    opts: &EpochOptions,
    b: &CorpusBench<'_>,
    mut read: impl FnMut(&[u64]) -> anyhow::Result<u64>,
) -> anyhow::Result<Pass> {
    let mut plan = EpochPlan::new(&corpus.tile_cells(), opts, 0)?;
    let mut cells = Vec::new();
    let (mut n, mut nnz) = (0u64, 0u64);
    let start = Instant::now();
    for j in 0..plan.n_batches() {
        if n >= b.max_cells {
            break;
        }
        let ahead = plan.tiles_ahead(j, b.window + b.prefetch);
        corpus.prefetch(&ahead)?;
        plan.batch_into(j, &mut cells)?;
        cells.truncate((b.max_cells - n) as usize);
        nnz += read(&cells)?;
        n += cells.len() as u64;
        corpus.release_tiles_except(&ahead);
    }
    Ok(Pass { cells: n, nnz, seconds: start.elapsed().as_secs_f64() })
}
