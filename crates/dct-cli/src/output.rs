//! Shared output helpers: human-readable sizes, JSON, progress bars and cell selections.

use std::io::{IsTerminal, Write};

use indicatif::{ProgressBar, ProgressStyle};

/// Stdout was closed by what reads it (a broken pipe): the command stops writing and ends with status 0.
#[derive(Debug)]
pub struct StdoutClosed;

impl std::fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stdout was closed by what reads it")
    }
}

impl std::error::Error for StdoutClosed {}

/// A command line a subcommand cannot run as given, found after clap's own checks (options that exclude each
/// other, a value of the wrong form): exit status 2, as clap's own usage errors.
#[derive(Debug)]
pub struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// Writes `text` to stdout ([`outln!`]): a closed pipe is [`StdoutClosed`], any other failure an error naming
/// stdout.
pub fn write_stdout(text: std::fmt::Arguments<'_>) -> anyhow::Result<()> {
    let text = std::fmt::format(text);
    match write_unbuffered(text.as_bytes()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(StdoutClosed.into()),
        Err(e) => Err(anyhow::anyhow!("cannot write to stdout: {e}")),
    }
}

/// `bytes` written to file descriptor 1 as it is now, unbuffered, through a duplicate of it. std's stdout buffers:
/// a write into a pipe whose reader has gone leaves what it could not write in that buffer, and it would come out
/// first in the next command run in this process (`deltacells.cli.main` in Python, which points descriptor 1 at a
/// pipe of its own for each call). A descriptor 1 that is closed takes the output silently, as std's stdout does.
#[cfg(unix)]
fn write_unbuffered(bytes: &[u8]) -> std::io::Result<()> {
    use std::os::fd::AsFd;
    const EBADF: i32 = 9; // on Linux and macOS alike
    let fd = match std::io::stdout().as_fd().try_clone_to_owned() {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(EBADF) => return Ok(()),
        Err(e) => return Err(e),
    };
    std::fs::File::from(fd).write_all(bytes)
}

#[cfg(not(unix))]
fn write_unbuffered(bytes: &[u8]) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)?;
    out.flush()
}

/// Writes `text` to stderr ([`errln!`]), leaving it out if stderr cannot be written.
pub fn write_stderr(text: std::fmt::Arguments<'_>) {
    let _ = std::io::stderr().lock().write_fmt(text);
}

/// Prints `value` as pretty JSON on stdout.
pub fn print_json(value: &serde_json::Value) -> anyhow::Result<()> {
    outln!("{}", serde_json::to_string_pretty(value).expect("JSON values always serialize"));
    Ok(())
}

/// Formats a byte count for people (B, kB, MB, GB; decimal units).
pub fn human_bytes(n: u64) -> String {
    let units = ["B", "kB", "MB", "GB", "TB"];
    let mut x = n as f64;
    let mut u = 0;
    while x >= 1000.0 && u + 1 < units.len() {
        x /= 1000.0;
        u += 1;
    }
    if u == 0 { format!("{n} B") } else { format!("{x:.2} {}", units[u]) }
}

/// `bytes` per nonzero for people: "1.234 bytes per nonzero", or "no nonzeros" (a ratio over none means nothing).
pub fn per_nonzero(bytes: u64, nnz: u64) -> String {
    if nnz == 0 { "no nonzeros".into() } else { format!("{:.3} bytes per nonzero", bytes as f64 / nnz as f64) }
}

/// A progress bar on stderr, hidden when stderr is not a terminal (logs and pipes stay clean).
pub fn progress(total: u64, what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} ({per_sec}, eta {eta})")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar.set_message(what.to_string());
    bar
}
