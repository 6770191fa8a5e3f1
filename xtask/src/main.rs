//! Developer tasks for the deltacells workspace: `cargo xtask <task>`.
//!
//! * `ci` — what CI runs: format check, clippy with warnings denied, every Rust test, rustdoc with warnings denied,
//!   then the Python package built into a venv outside the clone, linted, type-checked and its pytest suite run
//!   against the installed wheel (see `python.rs`), and last the crates meant for crates.io packaged and built from
//!   their packages.
//! * `package` — the crates meant for crates.io packaged and built from their packages (the last step of `ci`).
//! * `conformance [DIR]` — the public conformance set through the release CLI (needs python3 and the shared
//!   tools; skipped with a message when they are absent).
//! * `fuzz --smoke | --minutes M` — cargo-fuzz targets (see `fuzz.rs`).
//! * `deny [--advisories]` — cargo-deny license, ban and source checks (see `deny.rs`).

#![forbid(unsafe_code)]

mod deny;
mod errors_shape;
mod fuzz;
mod python;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("conformance") => conformance(args.get(1).map(PathBuf::from)),
        Some("package") => package(),
        Some("fuzz") => fuzz::run(&args[1..]),
        Some("deny") => deny::run(&args[1..]),
        Some("python") => python::run(&args[1..]),
        _ => {
            eprintln!(
                "usage: cargo xtask <ci | conformance [DIR] | package | fuzz (--smoke | --minutes M) | deny [--advisories] | \
                 python [--release] [PYTEST ARGS...]>"
            );
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Where cargo builds: `$CARGO_TARGET_DIR`, else `target/` in the workspace.
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root().join("target"))
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_path_buf()
}

/// Installs the cargo subcommand `cargo-{name}` (with `--locked`) unless `cargo {name} --version` runs.
fn ensure_cargo_tool(name: &str) -> Result<(), String> {
    let present = cargo()
        .args([name, "--version"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if present {
        return Ok(());
    }
    let package = format!("cargo-{name}");
    eprintln!("== {package} not found; installing it");
    run(&format!("install {package}"), cargo().args(["install", package.as_str(), "--locked"]))
}

/// Runs a step (from the workspace root unless the command names its own directory).
fn run(step: &str, cmd: &mut Command) -> Result<(), String> {
    eprintln!("== {step}: {cmd:?}");
    if cmd.get_current_dir().is_none() {
        cmd.current_dir(root());
    }
    let status = cmd.status().map_err(|e| format!("{step}: cannot start: {e}"))?;
    if status.success() { Ok(()) } else { Err(format!("{step} failed ({status})")) }
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

/// The crates meant for crates.io, in dependency order (the README says so too); every other crate of the
/// workspace has `publish = false`.
const PUBLISHED: [&str; 10] = [
    "dct-format",
    "dct-codec",
    "dct-store",
    "dct-obs",
    "dct-dataset",
    "dct-corpus",
    "dct-input",
    "dct-convert",
    "dct-report",
    "dct-cli",
];

fn ci() -> Result<(), String> {
    run("format", cargo().args(["fmt", "--all", "--", "--check"]))?;
    run("clippy", cargo().args(["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"]))?;
    run("tests", cargo().args(["test", "--workspace", "--all-targets"]))?;
    run("doc tests", cargo().args(["test", "--workspace", "--doc"]))?;
    // Rustdoc's own checks (broken intra-doc links, bare URLs) as errors, so the API docs stay whole.
    run("docs", cargo().env("RUSTDOCFLAGS", "-D warnings").args(["doc", "--workspace", "--no-deps"]))?;
    python::test()?;
    package()
}

/// Removes the copies of this workspace's packages that an earlier `cargo package` unpacked into cargo's registry
/// sources (the local registry it verifies against): cargo does not unpack a name and version again, so the
/// verification would build today's packages against yesterday's sources of their dependencies.
fn forget_unpacked_packages() -> Result<(), String> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .ok_or("neither CARGO_HOME nor HOME is set")?;
    let Ok(registries) = std::fs::read_dir(home.join("registry/src")) else { return Ok(()) };
    for registry in registries.flatten() {
        // crates.io's own sources are left alone; only the local registries `cargo package` makes.
        if registry.file_name().to_string_lossy().starts_with("index.crates.io") {
            continue;
        }
        for name in PUBLISHED {
            let unpacked = registry.path().join(format!("{name}-{}", env!("CARGO_PKG_VERSION")));
            if unpacked.exists() {
                std::fs::remove_dir_all(&unpacked).map_err(|e| format!("{}: {e}", unpacked.display()))?;
            }
        }
    }
    Ok(())
}

/// Packages the published crates as crates.io would receive them and builds each from its package (against the
/// others' packages), so a file a crate needs but does not hold (e.g. an `include_bytes!` outside it) fails here.
fn package() -> Result<(), String> {
    forget_unpacked_packages()?;
    // A target directory of its own, emptied first: cargo reuses a registry crate's build by name and version, so
    // a build left from an earlier packaging would stand in for today's sources.
    let verify = target_dir().join("package-verify");
    let _ = std::fs::remove_dir_all(&verify);
    let mut cmd = cargo();
    cmd.env("CARGO_TARGET_DIR", &verify).args(["package", "--allow-dirty"]);
    for name in PUBLISHED {
        cmd.args(["-p", name]);
    }
    run("package the published crates", &mut cmd)
}

fn conformance(dir: Option<PathBuf>) -> Result<(), String> {
    let shared = root().join("../shared");
    let dir = dir.unwrap_or_else(|| shared.join("conformance"));
    let script = shared.join("tools/conformance_cli.py");
    if !script.exists() || !dir.exists() {
        eprintln!("conformance: {} or {} not found; skipped", script.display(), dir.display());
        return Ok(());
    }
    run("build CLI", cargo().args(["build", "--release", "-p", "dct-cli"]))?;
    let bin = target_dir().join("release/deltacells");
    run("conformance", Command::new("python3").arg(&script).arg(&bin).arg(&dir))
}
