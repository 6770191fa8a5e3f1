//! `deltacells corpus info MEMBER...`: datasets read as one corpus: cells, the gene vocabulary and each member's
//! coverage of it, obs columns and the members that have them, and conflicts. `deltacells corpus align MEMBER...
//! --output DIR`: the members written again with their genes in the vocabulary's order.

use anyhow::Context;
use dct_convert::{AlignOptions, align_members};
use dct_corpus::{Corpus, CorpusError, GeneKey, GeneSpace, Member};
use dct_dataset::dct_obs::ObsOptions;
use dct_dataset::{ReadOptions, StoreOptions};
use serde_json::{Value, json};

use crate::output::print_json;

/// Arguments of `corpus`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Cells, genes shared, each member's coverage of the vocabulary, obs columns and their conflicts.
    Info(InfoArgs),
    /// Writes each member again into a folder with its genes in the vocabulary's order (genes outside it left
    /// out), so that a corpus over the copies, with the same vocabulary, reads rows without re-ordering them.
    Align(AlignArgs),
}

#[derive(Debug, clap::Args)]
struct AlignArgs {
    /// Member datasets (paths or store URLs); each is written under its last path component.
    #[arg(required = true, num_args = 1..)]
    members: Vec<String>,
    /// The folder (or store URL) the aligned members are written into.
    #[arg(long)]
    output: String,
    /// The vocabulary: `union`, `intersection`, or a file of gene identifiers, one a line (its order is the order
    /// the copies store their genes in).
    #[arg(long, default_value = "union")]
    genes: String,
    /// A column of each member's gene table naming its genes (e.g. `gene_ids`); default: the gene names.
    #[arg(long = "gene-key", value_name = "COLUMN")]
    gene_key: Option<String>,
    /// zstd level of the new tiles.
    #[arg(long, allow_negative_numbers = true, default_value_t = 19)]
    level: i32,
    /// Replace datasets already at the outputs.
    #[arg(long)]
    overwrite: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct InfoArgs {
    /// Member datasets, in cell order (paths or store URLs).
    #[arg(required = true, num_args = 1..)]
    members: Vec<String>,
    /// The vocabulary: `union`, `intersection`, or a file of gene identifiers, one a line.
    #[arg(long, default_value = "union")]
    genes: String,
    /// A column of each member's gene table naming its genes (e.g. `gene_ids`); default: the gene names.
    #[arg(long = "gene-key", value_name = "COLUMN")]
    gene_key: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// The vocabulary a command line names: `union`, `intersection`, or a file of identifiers, one a line.
pub(super) fn gene_space(genes: &str) -> anyhow::Result<GeneSpace> {
    Ok(match genes {
        "union" => GeneSpace::Union,
        "intersection" => GeneSpace::Intersection,
        path => GeneSpace::Given(read_gene_list(path)?),
    })
}

/// The gene identifiers of a file, one a line (blank lines skipped, spaces around each trimmed).
pub(super) fn read_gene_list(path: &str) -> anyhow::Result<Vec<String>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading the gene list {path}"))?;
    Ok(text.lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_string).collect())
}

/// The member datasets at `urls`, each named by its URL, opened at once on one set of threads.
pub(super) fn open_members(urls: &[String], options: &ReadOptions) -> anyhow::Result<Vec<Member>> {
    Ok(Member::open_all(urls, options)?)
}

/// Runs `corpus`.
pub fn run(args: Args, store: &StoreOptions) -> anyhow::Result<u8> {
    match args.command {
        Command::Info(a) => info(a, store),
        Command::Align(a) => align(a, store),
    }
}

fn align(a: AlignArgs, store: &StoreOptions) -> anyhow::Result<u8> {
    let options = AlignOptions {
        genes: gene_space(&a.genes)?,
        gene_key: a.gene_key.clone().map_or(GeneKey::VarNames, GeneKey::Column),
        level: a.level,
        overwrite: a.overwrite,
        store: store.clone(),
        ..AlignOptions::default()
    };
    let written = align_members(&a.members, &a.output, &options)?;
    if a.json {
        let members: Vec<Value> = written
            .iter()
            .map(|w| {
                json!({"member": w.source, "output": w.output, "cells": w.report.n_cells, "genes": w.report.n_genes,
                       "tiles": w.report.n_tiles, "already_done": w.report.already_done})
            })
            .collect();
        print_json(&json!({ "output": a.output, "members": members }))?;
        return Ok(0);
    }
    for w in &written {
        let what = if w.report.already_done { "already aligned" } else { "aligned" };
        outln!("{what}: {} -> {} ({} cells x {} genes)", w.source, w.output, w.report.n_cells, w.report.n_genes);
    }
    Ok(0)
}

fn info(a: InfoArgs, store: &StoreOptions) -> anyhow::Result<u8> {
    let space = gene_space(&a.genes)?;
    let key = a.gene_key.clone().map_or(GeneKey::VarNames, GeneKey::Column);
    let options = ReadOptions { store: store.clone(), ..ReadOptions::default() };
    let members = open_members(&a.members, &options)?;
    let corpus = Corpus::open(members.clone(), &key, &space)?;
    let shared = match Corpus::open(members, &key, &GeneSpace::Intersection) {
        Ok(c) => c.n_genes(),
        Err(CorpusError::InvalidArgument(_)) => 0,
        Err(e) => return Err(e.into()),
    };
    let vocabulary = corpus.n_genes();
    let per_member: Vec<Value> = corpus
        .members()
        .iter()
        .enumerate()
        .map(|(m, member)| {
            let columns = corpus.gene_map().member(m);
            let kept = columns.kept();
            json!({
                "member": member.name,
                "cells": member.dataset.n_cells(),
                "genes": member.dataset.n_genes(),
                "genes_in_vocabulary": kept,
                "vocabulary_covered": kept as f64 / vocabulary as f64,
                "in_vocabulary_order": columns.in_vocabulary_order(),
            })
        })
        .collect();
    // A column whose kind differs between members is left out of the obs and listed as a conflict.
    let obs = corpus.obs(&ObsOptions::default())?;
    // Each member's obs columns, read once.
    let mut member_columns: Vec<Vec<String>> = Vec::new();
    for m in corpus.members().iter().filter(|m| m.dataset.manifest().has_obs) {
        let o = m.dataset.obs(ObsOptions::default()).with_context(|| format!("the obs of {}", m.name))?;
        member_columns.push(o.schema().columns.iter().map(|c| c.name.clone()).collect());
    }
    let columns: Vec<Value> = obs
        .columns()
        .iter()
        .map(|c| {
            json!({
                "column": c.name,
                "kind": c.kind.as_str(),
                "categories": c.categories.as_ref().map(Vec::len),
                "members": member_columns.iter().filter(|cols| cols.contains(&c.name)).count(),
            })
        })
        .collect();
    let conflicts: Vec<String> = obs.conflicts().iter().map(ToString::to_string).collect();
    let report = json!({
        "members": corpus.members().len(),
        "cells": corpus.n_cells(),
        "vocabulary": vocabulary,
        "genes_shared_by_all": shared,
        "per_member": per_member,
        "obs_columns": columns,
        "obs_conflicts": conflicts,
    });
    if a.json {
        print_json(&report)?;
        return Ok(0);
    }
    outln!(
        "{} members, {} cells; vocabulary {} genes ({}); the members' own gene lists share {}",
        corpus.members().len(),
        corpus.n_cells(),
        vocabulary,
        a.genes,
        shared
    );
    for m in &per_member {
        outln!(
            "  {}: {} cells, {} genes, {} in the vocabulary ({:.1}% of it){}",
            m["member"].as_str().unwrap_or_default(),
            m["cells"],
            m["genes"],
            m["genes_in_vocabulary"],
            100.0 * m["vocabulary_covered"].as_f64().unwrap_or(0.0),
            if m["in_vocabulary_order"] == true { "" } else { "; rows re-ordered as read" }
        );
    }
    if per_member.iter().any(|m| m["in_vocabulary_order"] != true) {
        outln!(
            "  members whose genes are in orders of their own have each row re-ordered as it is read; for many \
             epochs, `deltacells corpus align` writes them once in the vocabulary's order"
        );
    }
    for c in &columns {
        outln!(
            "  obs {}: {}{}, in {} of {} members",
            c["column"].as_str().unwrap_or_default(),
            c["kind"].as_str().unwrap_or_default(),
            c["categories"].as_u64().map(|n| format!(" ({n} categories)")).unwrap_or_default(),
            c["members"],
            corpus.members().len()
        );
    }
    for c in &conflicts {
        outln!("  obs conflict: {c}");
    }
    Ok(0)
}
