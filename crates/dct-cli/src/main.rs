//! `deltacells`: the command line (see the library, [`dct_cli::run`]).

#![forbid(unsafe_code)]

use std::process::ExitCode;

fn main() -> ExitCode {
    ExitCode::from(dct_cli::run(std::env::args_os()))
}
