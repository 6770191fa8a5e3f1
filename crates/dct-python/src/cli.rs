//! The `deltacells` command line, run in this process (`python -m deltacells`, `deltacells.cli.main`, and the
//! `deltacells` command that `pip install` puts on the PATH).

use pyo3::prelude::*;

/// Runs the command line `argv` (without the program name) and returns its exit status. The GIL is released:
/// the command writes to the process's stdout and stderr (`deltacells.cli.main` points them at its Python streams
/// when those are something else).
#[pyfunction]
pub(crate) fn run_cli(py: Python<'_>, argv: Vec<String>) -> u8 {
    use std::io::Write;
    let args: Vec<String> = std::iter::once("deltacells".to_string()).chain(argv).collect();
    py.detach(|| {
        let status = dct_cli::run(args);
        // All of it out before the call returns (the caller may have pointed the descriptors at pipes for it).
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
        status
    })
}

/// The version the command line reports: the package version and the commit it was built from.
#[pyfunction]
pub(crate) fn version() -> &'static str {
    dct_cli::VERSION
}
