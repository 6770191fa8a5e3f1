//! `deltacells`: inspect, verify, export and benchmark deltacells datasets and tiles.
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
    /// Show the header, chunk table, per-chunk sizes and exception counts of one tile file.
    InspectTile(commands::inspect::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::InspectTile(args) => commands::inspect::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
