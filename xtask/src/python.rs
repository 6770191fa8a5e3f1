//! `cargo xtask python [--release] [--install-only] [PYTEST ARGS...]`: builds the Python package
//! (`crates/dct-python`) as a wheel, installs it into a venv kept outside the clone, and runs its pytest suite
//! against the installed package (not with `--install-only`, e.g. before a benchmark).
//!
//! * The venv is `$DELTACELLS_VENV`, default `$HOME/.cache/deltacells-venv` (made with `python3 -m venv` on first
//!   use; the test requirements of `crates/dct-python/requirements-test.txt` are installed or updated each run).
//! * The wheel is built by maturin with the cargo profile `dev` (the dependencies optimized, as for every test
//!   build) or, with `--release`, `release` (for benchmarks), into `$CARGO_TARGET_DIR/wheels`, then installed with
//!   `pip install --force-reinstall --no-deps`.
//! * `cargo xtask ci` first lints and type-checks the package and checks `_core.pyi` against the installed
//!   extension ([`check`]).
//! * Tests run from a scratch directory with `python -m pytest crates/dct-python/tests`, so they import the
//!   installed package, not the source tree. With `CI=true` a missing test dependency fails instead of skipping.

use std::path::PathBuf;
use std::process::Command;

use super::{root, target_dir};

/// `cargo xtask python ARGS`.
pub fn run(args: &[String]) -> Result<(), String> {
    let release = args.iter().any(|a| a == "--release");
    let install_only = args.iter().any(|a| a == "--install-only");
    let pytest: Vec<String> = args.iter().filter(|a| *a != "--release" && *a != "--install-only").cloned().collect();
    let venv = install(release)?;
    if install_only {
        eprintln!("== installed in {}", venv.display());
        return Ok(());
    }
    pytest_run(&venv, &pytest)
}

/// What `cargo xtask ci` runs: build and install the package (dev profile), check it (see [`check`]), then the
/// whole pytest suite.
pub fn test() -> Result<(), String> {
    let venv = install(false)?;
    check(&venv)?;
    pytest_run(&venv, &[])
}

/// The package's static checks, configured in `crates/dct-python/pyproject.toml`: the linter (ruff) over the
/// package, its tests and benchmarks; the type checker (mypy) over the package, with the stub `_core.pyi`; and the
/// stub against the installed extension (mypy's stubtest: every name, argument and default it declares exists,
/// and the extension has nothing it does not declare).
pub fn check(venv: &std::path::Path) -> Result<(), String> {
    let package = root().join("crates/dct-python");
    let bin = |tool: &str| venv.join("bin").join(tool);
    // Paths from the workspace root (where `run` starts commands); the configuration is the package's, the
    // caches beside the venv (outside the clone).
    let config = package.join("pyproject.toml");
    super::run(
        "lint the Python package (ruff)",
        Command::new(bin("ruff"))
            .args(["check", "--config"])
            .arg(&config)
            .arg("--cache-dir")
            .arg(venv.join("ruff-cache"))
            .arg(package.join("python"))
            .arg(package.join("tests"))
            .arg(package.join("benches")),
    )?;
    super::run(
        "type-check the Python package (mypy)",
        Command::new(bin("mypy"))
            .arg("--config-file")
            .arg(&config)
            .arg("--cache-dir")
            .arg(venv.join("mypy-cache"))
            .arg(package.join("python/deltacells")),
    )?;
    // From a scratch directory, against the installed wheel.
    let scratch = std::env::temp_dir().join(format!("deltacells-stubtest-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).map_err(|e| format!("{}: {e}", scratch.display()))?;
    let result = super::run(
        "check the extension's stub (stubtest)",
        Command::new(bin("python"))
            .args(["-m", "mypy.stubtest", "deltacells._core", "--mypy-config-file"])
            .arg(package.join("pyproject.toml"))
            .current_dir(&scratch),
    );
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

/// The venv directory.
pub fn venv_dir() -> PathBuf {
    if let Some(v) = std::env::var_os("DELTACELLS_VENV") {
        return PathBuf::from(v);
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    home.join(".cache/deltacells-venv")
}

/// Makes the venv (if needed), installs the test requirements, builds the wheel and installs it; returns the venv.
pub fn install(release: bool) -> Result<PathBuf, String> {
    let venv = venv_dir();
    let python = venv.join("bin/python");
    if !python.exists() {
        super::run("make the venv", Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
        super::run("update pip", Command::new(&python).args(["-m", "pip", "install", "-q", "--upgrade", "pip"]))?;
    }
    let requirements = root().join("crates/dct-python/requirements-test.txt");
    super::run(
        "install the test requirements",
        Command::new(&python).args(["-m", "pip", "install", "-q", "-r"]).arg(&requirements),
    )?;
    let wheels = target_dir().join("wheels");
    let _ = std::fs::remove_dir_all(&wheels);
    let profile = if release { "release" } else { "dev" };
    super::run(
        &format!("build the wheel ({profile})"),
        Command::new(venv.join("bin/maturin"))
            .args(["build", "--profile", profile, "--manifest-path", "crates/dct-python/Cargo.toml", "--out"])
            .arg(&wheels)
            .env("CARGO_TARGET_DIR", target_dir()),
    )?;
    let wheel = std::fs::read_dir(&wheels)
        .map_err(|e| format!("{}: {e}", wheels.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or_else(|| format!("maturin left no wheel in {}", wheels.display()))?;
    super::run(
        "install the wheel",
        Command::new(&python).args(["-m", "pip", "install", "-q", "--force-reinstall", "--no-deps"]).arg(&wheel),
    )?;
    Ok(venv)
}

fn pytest_run(venv: &std::path::Path, args: &[String]) -> Result<(), String> {
    let scratch = std::env::temp_dir().join(format!("deltacells-pytest-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).map_err(|e| format!("{}: {e}", scratch.display()))?;
    let tests = root().join("crates/dct-python/tests");
    let mut cmd = Command::new(venv.join("bin/python"));
    cmd.args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir"])
        .arg(&tests)
        .arg(&tests)
        .args(args)
        .env("CARGO_TARGET_DIR", target_dir());
    // From a scratch directory, so `import deltacells` finds the installed wheel, not crates/dct-python/python.
    eprintln!("== python tests: {cmd:?}");
    let status = cmd.current_dir(&scratch).status().map_err(|e| format!("pytest: cannot start: {e}"))?;
    let _ = std::fs::remove_dir_all(&scratch);
    if status.success() { Ok(()) } else { Err(format!("python tests failed ({status})")) }
}
