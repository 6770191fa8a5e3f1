//! The `deltacells` command line, run in this process (`python -m deltacells`, `deltacells.cli.main`, and the
//! `deltacells` command that `pip install` puts on the PATH).

use pyo3::prelude::*;

/// Runs the command line `argv` (without the program name) and returns its exit status. The GIL is released:
/// the command's own output goes straight to the process's stdout and stderr.
#[pyfunction]
pub(crate) fn run_cli(py: Python<'_>, argv: Vec<String>) -> u8 {
    let args: Vec<String> = std::iter::once("deltacells".to_string()).chain(argv).collect();
    py.detach(|| dct_cli::run(args))
}

/// The version the command line reports: the package version and the commit it was built from.
#[pyfunction]
pub(crate) fn version() -> &'static str {
    dct_cli::VERSION
}
