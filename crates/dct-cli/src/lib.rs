//! The `deltacells` command line: convert, inspect, verify, export and benchmark deltacells datasets and tiles,
//! and read their obs.
//!
//! The binary (`src/main.rs`) and the Python package (`python -m deltacells`, `deltacells.cli.main`) both run
//! [`run`], so every subcommand behaves the same from either.
//!
//! Exit status: 0 when all is well, 1 when problems were found (bad input, failed verification), 2 for usage
//! errors. Bad input never panics; the message says what is wrong and where.
//!
//! # Modules
//!
//! * This library: `dct_cli::run(args) -> exit status`, and `VERSION`, which carries the commit it was built from
//!   (set by `build.rs`).
//! * The binary over it, with the subcommands `demo`, `convert`, `info`, `verify`, `export`, `inspect-tile`,
//!   `bench` and `obs info/localize/show`.
//! * The demo sample is in `crates/dct-cli/demo/`, inside the crate that embeds it.
//! * Exit status: 0, 1 (problems) or 2 (usage).

#![forbid(unsafe_code)]

/// `println!` that hands a failed write back with `?` (as [`output::StdoutClosed`] when the reader has gone, as
/// `deltacells info DATASET | head -1` does) instead of panicking.
macro_rules! outln {
    () => {
        $crate::output::write_stdout(format_args!("\n"))?
    };
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!("{}\n", format_args!($($arg)*)))?
    };
}

/// `eprintln!` that leaves out what cannot be written (a closed stderr) instead of panicking.
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::output::write_stderr(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// Returns an [`output::Usage`] error (exit status 2) from the enclosing function: `usage!("--part {s}: ...")`.
macro_rules! usage {
    ($($arg:tt)*) => {
        return Err($crate::output::Usage(format!($($arg)*)).into())
    };
}

mod cells;
mod commands;
mod output;

use std::ffi::OsString;

use clap::{Parser, Subcommand};
use dct_dataset::StoreOptions;

/// The version `--version` prints: the package version and the commit it was built from.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("DCT_BUILD_COMMIT"), ")");

/// Compact, cloud-friendly tiles for single-cell count matrices.
#[derive(Debug, Parser)]
#[command(name = "deltacells", version = VERSION, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// A setting of the object store that datasets are read from or written to, `KEY=VALUE` (repeatable), e.g.
    /// `aws_endpoint=http://127.0.0.1:5000`, `allow_http=true`, `google_service_account=/path/key.json`,
    /// `azure_storage_use_emulator=true`; keys as the `object_store` builders name them, applied after the
    /// environment (AWS_*, GOOGLE_*, AZURE_*). `max_requests=N` caps the requests in flight (default 64);
    /// `part_bytes=N` reads tiles larger than N bytes from object storage as concurrent ranged GETs of N-byte parts
    /// (default 8 MiB; 0: one GET a tile); `simulate_latency_ms`, `simulate_jitter_ms`, `simulate_mb_per_s` and `simulate_seed` delay every request as
    /// a distant object store would, for any location.
    #[arg(long = "store-option", value_name = "KEY=VALUE", global = true, value_parser = parse_store_option)]
    store_options: Vec<(String, String)>,
}

/// `KEY=VALUE` of `--store-option`.
fn parse_store_option(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(format!("expected KEY=VALUE, e.g. allow_http=true, not {text:?}")),
    }
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
    /// Many datasets as one corpus: cells, the gene vocabulary and each member's coverage, obs columns.
    Corpus(commands::corpus::Args),
    /// Add the cells of h5ad, 10x HDF5 or Matrix Market inputs at the end of a dataset, re-encoding only its last
    /// tile.
    Append(commands::append::Args),
    /// One dataset of the cells of several with the same genes, their tiles copied where they fall whole.
    Merge(commands::merge::Args),
    /// A new dataset of some cells (by index or obs conditions) and genes of a dataset, with their obs and genes.
    Subset(commands::subset::Args),
    /// Write decoded rows as Matrix Market or CSV.
    Export(commands::export::Args),
    /// Show the header, chunk table, per-chunk sizes and exception counts of one tile file.
    InspectTile(commands::inspect::Args),
    /// Measure tile fetch and decode times and shuffled batch throughput on your data and storage.
    Bench(commands::bench::Args),
    /// One self-contained HTML page of a dataset: its facts, cells, tiles, chunks, genes and obs as plots.
    Report(commands::report::Args),
}

/// Runs the command line `args` (the program name first, as in `std::env::args_os()`) and returns the exit
/// status. Usage errors print clap's message and give 2; `--help` and `--version` print and give 0.
pub fn run<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout with status 0, errors to stderr with status 2.
            let _ = e.print();
            return u8::try_from(e.exit_code()).unwrap_or(2);
        }
    };
    let store = StoreOptions { config: cli.store_options, ..StoreOptions::default() };
    let result = match cli.command {
        Command::Demo(args) => commands::demo::run(args),
        Command::Convert(args) => commands::convert::run(*args, &store),
        Command::Info(args) => commands::info::run(args, &store),
        Command::Verify(args) => commands::verify::run(args, &store),
        Command::Obs(args) => commands::obs::run(args, &store),
        Command::Corpus(args) => commands::corpus::run(args, &store),
        Command::Append(args) => commands::append::run(args, &store),
        Command::Merge(args) => commands::merge::run(args, &store),
        Command::Subset(args) => commands::subset::run(args, &store),
        Command::Export(args) => commands::export::run(args, &store),
        Command::InspectTile(args) => commands::inspect::run(args),
        Command::Bench(args) => commands::bench::run(args, &store),
        Command::Report(args) => commands::report::run(args, &store),
    };
    match result {
        Ok(code) => code,
        // What reads the output stopped reading (`| head`): the command is done, as a pipeline expects.
        Err(e) if e.downcast_ref::<output::StdoutClosed>().is_some() => 0,
        Err(e) if e.downcast_ref::<output::Usage>().is_some() => {
            errln!("error: {e}");
            2
        }
        Err(e) => {
            // `{:#}` joins the error and its causes with ": ". The library errors say their cause in their own message
            // and return none from `source()`, so nothing is said twice (see the xtask test
            // `error_types_say_their_cause_once`).
            errln!("error: {e:#}");
            1
        }
    }
}
