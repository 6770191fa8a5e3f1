//! `cargo xtask deny [--advisories]`: checks the dependency tree with cargo-deny against `deny.toml`.
//!
//! * Without flags: `cargo deny check licenses bans sources`. It needs no network beyond crates.io (cargo
//!   downloads the crates of every feature and platform once, for `cargo metadata`; after that it works
//!   offline).
//! * `--advisories`: also `advisories`, which fetches the RustSec advisory database from GitHub first, so it needs
//!   network access to github.com.
//!
//! cargo-deny is installed first if missing (`cargo install cargo-deny --locked`, a few minutes on a small
//! machine).

use super::cargo;

/// Runs the task with the arguments after `deny`.
pub fn run(args: &[String]) -> Result<(), String> {
    let mut advisories = false;
    for a in args {
        match a.as_str() {
            "--advisories" => advisories = true,
            other => return Err(format!("deny: unknown argument {other:?} (usage: cargo xtask deny [--advisories])")),
        }
    }
    super::ensure_cargo_tool("deny")?;
    super::run("cargo deny (licenses, bans, sources)", cargo().args(["deny", "check", "licenses", "bans", "sources"]))?;
    if advisories {
        super::run(
            "cargo deny (advisories; fetches the RustSec database)",
            cargo().args(["deny", "check", "advisories"]),
        )?;
    } else {
        eprintln!("== advisories not checked (needs network access to the RustSec database): pass --advisories");
    }
    Ok(())
}
