//! `deltacells`: convert, inspect, verify, export and benchmark deltacells datasets and tiles, and read their obs.
//!
//! Exit status: 0 when all is well, 1 when problems were found (bad input, failed verification), 2 for usage
//! errors. Bad input never panics; the message says what is wrong and where.

mod commands;
mod output;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Compact, cloud-friendly tiles for single-cell count matrices.
#[derive(Debug, Parser)]
#[command(name = "deltacells", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Convert the bundled 1,000-cell sample, verify it, read shuffled batches: the main job in one command.
    Demo(commands::demo::Args),
    /// Convert h5ad, 10x HDF5 or 10x Matrix Market inputs into a dataset (one-shot, or plan/parts/finalize).
    Convert(Box<commands::convert::Args>),
    /// Shape, tiles, sizes, encoder settings and side files of a dataset.
    Info(commands::info::Args),
    /// Check every tile (CRC, full decode, agreement with the manifest), side file and obs shard.
    Verify(commands::verify::Args),
    /// Per-cell metadata: columns and their sizes, localize columns into the node cache, show cells' values.
    Obs(commands::obs::Args),
    /// Write decoded rows as Matrix Market or CSV.
    Export(commands::export::Args),
    /// Show the header, chunk table, per-chunk sizes and exception counts of one tile file.
    InspectTile(commands::inspect::Args),
    /// Measure tile fetch and decode times and shuffled batch throughput on your data and storage.
    Bench(commands::bench::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(args) => commands::demo::run(args),
        Command::Convert(args) => commands::convert::run(*args),
        Command::Info(args) => commands::info::run(args),
        Command::Verify(args) => commands::verify::run(args),
        Command::Obs(args) => commands::obs::run(args),
        Command::Export(args) => commands::export::run(args),
        Command::InspectTile(args) => commands::inspect::run(args),
        Command::Bench(args) => commands::bench::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
