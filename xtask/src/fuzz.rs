//! `cargo xtask fuzz`: runs the cargo-fuzz targets in `fuzz/` (a package outside the workspace, with its own
//! target directory `fuzz/target`).
//!
//! * `--smoke [--seconds S]`: every target for `S` seconds (default 25); fails on any finding. What CI runs.
//! * `--minutes M [--target T]`: a longer campaign, `M` minutes per target (or only target `T`).
//! * `--sanitizer S`: `none` (default, about 3.5x faster) or `address`.
//!
//! Before running, cargo-fuzz is installed if missing (`cargo install cargo-fuzz --locked`) and the corpora are
//! seeded: the tile targets with the conformance tiles (good and bad) and the regression tiles, the parser
//! targets with the conformance datasets' `manifest.json`, `gene_order.npy` and `obs/schema.json`, the `mtx`
//! target with every Matrix Market file under `testdata/` (`*.mtx`, and `*.mtx.gz` decompressed with `gzip -dc`),
//! each cut to its first 200 entries with the size line rewritten to match, so the seeds stay small and are still
//! accepted; every target also gets the inputs kept in `fuzz/regressions/<target>/` (inputs that once failed it).
//! Targets whose `[[bin]]` in `fuzz/Cargo.toml` has `required-features` (`["parsers"]` for the dataset parsers,
//! `["inputs"]` for dct-input's Matrix Market parser) are built and run with those features, one build per feature
//! set, so the tile targets still run if a dataset or input crate does not build, and a failed feature build fails
//! only its own targets. Targets run one at a time with `RUSTC_BOOTSTRAP=1` (cargo-fuzz passes `-Z` flags, which
//! stable rustc otherwise refuses). Each run's libFuzzer output goes to `fuzz/logs/<target>.log`; the summary gives
//! the executions (`stat::number_of_executed_units` from `-print_final_stats=1`) and findings (new files under
//! `fuzz/artifacts/<target>/`) per target.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use super::{cargo, root};

const USAGE: &str =
    "usage: cargo xtask fuzz (--smoke [--seconds S] | --minutes M) [--target T] [--sanitizer none|address]";

/// Entry lines kept from each Matrix Market seed of the `mtx` target.
const MTX_SEED_ENTRIES: usize = 200;

/// Seed files of a target: `(directory, how to pick files in it, prefix of the copies)`, relative to the
/// workspace root. Targets not listed build their input with `arbitrary` and start from an empty corpus.
fn seeds(target: &str) -> &'static [(&'static str, Pick, &'static str)] {
    const TILES: &[(&str, Pick, &str)] = &[
        ("testdata/conformance/tiles/good", Pick::Extension("dct"), "good_"),
        ("testdata/conformance/tiles/bad", Pick::Extension("dct"), "bad_"),
        ("testdata/regressions", Pick::Extension("dct"), "regression_"),
    ];
    const DATASETS: &str = "testdata/conformance/datasets";
    match target {
        "tile_parse" | "tile_decode" => TILES,
        "manifest" => &[(DATASETS, Pick::InEachSubdir("manifest.json"), "")],
        "npy" => &[(DATASETS, Pick::InEachSubdir("gene_order.npy"), "")],
        "obs_schema" => &[(DATASETS, Pick::InEachSubdir("obs/schema.json"), "")],
        "mtx" => &[("testdata", Pick::MatrixMarket, "")],
        _ => &[],
    }
}

/// Which files of a seed directory to copy.
#[derive(Clone, Copy)]
enum Pick {
    /// Every file with this extension.
    Extension(&'static str),
    /// This path inside every subdirectory (the copy is named after the subdirectory).
    InEachSubdir(&'static str),
    /// Every file.
    Any,
    /// Every `*.mtx` or `*.mtx.gz` file in the directory or below it, decompressed and cut to its first
    /// [`MTX_SEED_ENTRIES`] entries (the copy is named after its path, `/` replaced by `_`).
    MatrixMarket,
}

/// A fuzz target and the features of the fuzz package it requires (`required-features`).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Target {
    name: String,
    features: Vec<String>,
}

struct Plan {
    seconds: u64,
    target: Option<String>,
    sanitizer: String,
}

/// What one target's run produced.
struct Outcome {
    target: String,
    seconds: f64,
    executions: Option<u64>,
    exec_per_sec: Option<u64>,
    new_units: Option<u64>,
    peak_rss_mb: Option<u64>,
    findings: Vec<PathBuf>,
    success: bool,
    log: PathBuf,
    note: Option<String>,
}

/// Entry point: `args` are the arguments after `fuzz`.
pub fn run(args: &[String]) -> Result<(), String> {
    let plan = parse_args(args)?;
    let fuzz_dir = root().join("fuzz");
    let mut targets = list_targets(&fuzz_dir)?;
    if let Some(t) = &plan.target {
        let names: Vec<&str> = targets.iter().map(|t| t.name.as_str()).collect();
        if !names.contains(&t.as_str()) {
            return Err(format!("unknown fuzz target `{t}`; targets: {}", names.join(", ")));
        }
        targets.retain(|x| &x.name == t);
    }
    super::ensure_cargo_tool("fuzz")?;
    for t in &targets {
        let n = seed_corpus(&fuzz_dir, &t.name)?;
        eprintln!("== seeded fuzz/corpus/{} with {n} files", t.name);
    }
    // One build per feature set, the featureless (tile) build first; a failed feature build fails only the
    // targets that need those features.
    let feature_sets: BTreeSet<&[String]> = targets.iter().map(|t| t.features.as_slice()).collect();
    let mut build_error: BTreeMap<&[String], String> = BTreeMap::new();
    for features in feature_sets {
        let mut build = fuzz_command();
        build.args(["build", "--fuzz-dir", "fuzz", "-s", &plan.sanitizer]);
        let step = if features.is_empty() {
            "fuzz build".to_string()
        } else {
            build.args(["--features", &features.join(",")]);
            format!("fuzz build (features {})", features.join(","))
        };
        if let Err(e) = super::run(&step, &mut build) {
            if features.is_empty() {
                return Err(e);
            }
            build_error.insert(features, e);
        }
    }

    let mut outcomes = Vec::new();
    for t in &targets {
        outcomes.push(match build_error.get(t.features.as_slice()) {
            Some(e) => Outcome::not_built(&fuzz_dir, &t.name, e),
            None => run_target(&fuzz_dir, t, &plan)?,
        });
    }
    print_summary(&outcomes, &plan);
    let failed: Vec<&str> = outcomes.iter().filter(|o| !o.success).map(|o| o.target.as_str()).collect();
    if failed.is_empty() { Ok(()) } else { Err(format!("fuzzing found problems in: {}", failed.join(", "))) }
}

impl Outcome {
    fn not_built(fuzz_dir: &Path, target: &str, error: &str) -> Self {
        Outcome {
            target: target.to_string(),
            seconds: 0.0,
            executions: None,
            exec_per_sec: None,
            new_units: None,
            peak_rss_mb: None,
            findings: Vec::new(),
            success: false,
            log: fuzz_dir.join("logs").join(format!("{target}.log")),
            note: Some(format!("not built: {error}")),
        }
    }
}

fn parse_args(args: &[String]) -> Result<Plan, String> {
    let mut smoke = false;
    let mut seconds = None;
    let mut minutes = None;
    let mut target = None;
    let mut sanitizer = "none".to_string();
    let mut it = args.iter();
    let number = |flag: &str, v: Option<&String>| -> Result<u64, String> {
        v.and_then(|s| s.parse::<u64>().ok())
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("{flag} needs a positive number\n{USAGE}"))
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "--smoke" => smoke = true,
            "--seconds" => seconds = Some(number("--seconds", it.next())?),
            "--minutes" => minutes = Some(number("--minutes", it.next())?),
            "--target" => target = Some(it.next().ok_or_else(|| format!("--target needs a name\n{USAGE}"))?.clone()),
            "--sanitizer" => {
                sanitizer = it.next().ok_or_else(|| format!("--sanitizer needs a value\n{USAGE}"))?.clone();
                if !["none", "address"].contains(&sanitizer.as_str()) {
                    return Err(format!("unsupported sanitizer `{sanitizer}`\n{USAGE}"));
                }
            }
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument `{other}`\n{USAGE}")),
        }
    }
    let seconds = match (smoke, minutes) {
        (true, None) => seconds.unwrap_or(25),
        (false, Some(m)) if seconds.is_none() => m * 60,
        _ => return Err(USAGE.into()),
    };
    Ok(Plan { seconds, target, sanitizer })
}

/// The targets: the `[[bin]]` sections of `fuzz/Cargo.toml`, with the features they require.
/// (A line-based reading of the manifest, to keep xtask free of dependencies; the file is ours.)
fn list_targets(fuzz_dir: &Path) -> Result<Vec<Target>, String> {
    let manifest = fuzz_dir.join("Cargo.toml");
    let text = fs::read_to_string(&manifest).map_err(|e| format!("{}: {e}", manifest.display()))?;
    let mut targets = BTreeSet::new();
    let mut current: Option<Target> = None;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            targets.extend(current.take());
            if line == "[[bin]]" {
                current = Some(Target { name: String::new(), features: Vec::new() });
            }
        } else if let Some(t) = current.as_mut() {
            let Some((key, value)) = line.split_once('=') else { continue };
            match key.trim() {
                "name" => t.name = value.trim().trim_matches('"').to_string(),
                // `["a", "b"]`: the quoted strings.
                "required-features" => {
                    t.features = value.split('"').skip(1).step_by(2).map(str::to_string).collect();
                    t.features.sort();
                }
                _ => {}
            }
        }
    }
    targets.extend(current);
    targets.retain(|t| !t.name.is_empty());
    if targets.is_empty() {
        return Err(format!("no [[bin]] fuzz targets in {}", manifest.display()));
    }
    Ok(targets.into_iter().collect())
}

/// `cargo` for fuzzing: on stable, `RUSTC_BOOTSTRAP=1` lets cargo-fuzz pass its `-Z` flags, and the fuzz
/// package's own target directory is used even when the caller exported `CARGO_TARGET_DIR` for the workspace.
fn fuzz_command() -> Command {
    let mut cmd = cargo();
    cmd.arg("fuzz").env("RUSTC_BOOTSTRAP", "1").env_remove("CARGO_TARGET_DIR").current_dir(root());
    cmd
}

/// Copies the target's seed files into `fuzz/corpus/<target>`; returns how many were copied.
fn seed_corpus(fuzz_dir: &Path, target: &str) -> Result<usize, String> {
    let corpus = fuzz_dir.join("corpus").join(target);
    fs::create_dir_all(&corpus).map_err(|e| format!("{}: {e}", corpus.display()))?;
    let mut n = 0;
    // Inputs that once failed the target (kept in fuzz/regressions/<target>/) run first in every campaign.
    let regressions = format!("fuzz/regressions/{target}");
    let own: [(&str, Pick, &str); 1] = [(regressions.as_str(), Pick::Any, "regression_")];
    for &(dir, pick, prefix) in seeds(target).iter().chain(&own) {
        let dir = root().join(dir);
        if let Pick::MatrixMarket = pick {
            n += seed_matrix_market(&dir, &corpus, prefix)?;
            continue;
        }
        let Ok(entries) = fs::read_dir(&dir) else { continue };
        let mut files = Vec::new();
        for entry in entries {
            let path = entry.map_err(|e| e.to_string())?.path();
            let name = path.file_name().expect("file name").to_string_lossy().into_owned();
            match pick {
                Pick::Extension(ext) if path.is_file() && path.extension().is_some_and(|e| e == ext) => {
                    files.push((path, format!("{prefix}{name}")));
                }
                Pick::InEachSubdir(rel) if path.join(rel).is_file() => files.push((path.join(rel), name)),
                Pick::Any if path.is_file() => files.push((path, format!("{prefix}{name}"))),
                _ => {}
            }
        }
        for (src, name) in files {
            // Seeds are read-only in testdata; write the copy afresh so it is writable like the rest.
            let bytes = fs::read(&src).map_err(|e| format!("{}: {e}", src.display()))?;
            let dest = corpus.join(name);
            fs::write(&dest, bytes).map_err(|e| format!("{}: {e}", dest.display()))?;
            n += 1;
        }
    }
    Ok(n)
}

/// Copies every `*.mtx` and `*.mtx.gz` file in `dir` or below it into `corpus`, decompressed and cut to its first
/// [`MTX_SEED_ENTRIES`] entries; returns how many were copied. A gzip file that `gzip -dc` cannot read is skipped
/// with a warning.
fn seed_matrix_market(dir: &Path, corpus: &Path, prefix: &str) -> Result<usize, String> {
    let mut stack = vec![dir.to_path_buf()];
    let mut found = BTreeSet::new();
    while let Some(d) = stack.pop() {
        let entries = fs::read_dir(&d).map_err(|e| format!("{}: {e}", d.display()))?;
        for entry in entries {
            let path = entry.map_err(|e| e.to_string())?.path();
            let name = path.file_name().expect("file name").to_string_lossy().into_owned();
            if path.is_dir() {
                stack.push(path);
            } else if name.ends_with(".mtx") || name.ends_with(".mtx.gz") {
                found.insert(path);
            }
        }
    }
    let mut n = 0;
    for src in found {
        let text = if src.extension().is_some_and(|e| e == "gz") {
            match Command::new("gzip").arg("-dc").arg(&src).stderr(Stdio::null()).output() {
                Ok(out) if out.status.success() => out.stdout,
                _ => {
                    eprintln!("== warning: cannot decompress {} with `gzip -dc`; not seeded", src.display());
                    continue;
                }
            }
        } else {
            fs::read(&src).map_err(|e| format!("{}: {e}", src.display()))?
        };
        let rel = src.strip_prefix(root()).unwrap_or(&src).to_string_lossy().replace(['/', '\\'], "_");
        let dest = corpus.join(format!("{prefix}{}", rel.trim_end_matches(".gz")));
        let cut = cut_matrix_market(&text, MTX_SEED_ENTRIES);
        fs::write(&dest, cut).map_err(|e| format!("{}: {e}", dest.display()))?;
        n += 1;
    }
    Ok(n)
}

/// The Matrix Market text `text` with at most `keep` entry lines: the banner, comments and size line are kept, and
/// if entries are dropped the size line's entry count becomes the number kept. Text that does not look like a
/// Matrix Market file (no `rows columns entries` line after the banner) is returned unchanged.
fn cut_matrix_market(text: &[u8], keep: usize) -> Vec<u8> {
    let is_skipped = |line: &[u8]| {
        let t = String::from_utf8_lossy(line);
        let t = t.trim_start();
        t.is_empty() || t.starts_with('%')
    };
    let mut lines = text.split_inclusive(|&b| b == b'\n');
    let mut head = Vec::new();
    head.extend_from_slice(lines.next().unwrap_or_default());
    // Comments up to the size line.
    let (size_line, size) = loop {
        let Some(line) = lines.next() else { return text.to_vec() };
        if is_skipped(line) {
            head.extend_from_slice(line);
            continue;
        }
        let t = String::from_utf8_lossy(line);
        let size: Vec<u64> = t.split_ascii_whitespace().map_while(|x| x.parse().ok()).collect();
        if size.len() != 3 || t.split_ascii_whitespace().count() != 3 {
            return text.to_vec();
        }
        break (line, size);
    };
    let mut body = Vec::new();
    let mut kept = 0;
    let mut dropped = false;
    for line in lines {
        if !is_skipped(line) {
            if kept == keep {
                dropped = true;
                break;
            }
            kept += 1;
        }
        body.extend_from_slice(line);
    }
    if dropped {
        head.extend_from_slice(format!("{} {} {kept}\n", size[0], size[1]).as_bytes());
    } else {
        head.extend_from_slice(size_line);
    }
    head.extend_from_slice(&body);
    head
}

fn list_files(dir: &Path) -> BTreeSet<PathBuf> {
    fs::read_dir(dir).map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default()
}

fn run_target(fuzz_dir: &Path, t: &Target, plan: &Plan) -> Result<Outcome, String> {
    let target = t.name.as_str();
    let artifacts = fuzz_dir.join("artifacts").join(target);
    let before = list_files(&artifacts);
    let logs = fuzz_dir.join("logs");
    fs::create_dir_all(&logs).map_err(|e| format!("{}: {e}", logs.display()))?;
    let log = logs.join(format!("{target}.log"));
    let file = fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let err_file = file.try_clone().map_err(|e| e.to_string())?;
    let corpus = format!("fuzz/corpus/{target}");
    let features = t.features.join(",");
    let mut cmd = fuzz_command();
    cmd.args(["run", "--fuzz-dir", "fuzz", "-s", &plan.sanitizer]);
    if !features.is_empty() {
        cmd.args(["--features", &features]);
    }
    cmd.args([target, &corpus, "--"])
        .arg(format!("-max_total_time={}", plan.seconds))
        .args(["-rss_limit_mb=2048", "-timeout=30", "-print_final_stats=1"])
        .stdout(file)
        .stderr(err_file);
    eprintln!("== fuzz {target} for {} s (output: {})", plan.seconds, log.display());
    let start = Instant::now();
    let status = cmd.status().map_err(|e| format!("fuzz {target}: cannot start: {e}"))?;
    let seconds = start.elapsed().as_secs_f64();
    let text = fs::read_to_string(&log).unwrap_or_default();
    let stat = |name: &str| -> Option<u64> {
        text.lines().rev().find_map(|l| l.strip_prefix(name)?.trim().strip_prefix(':')?.trim().parse().ok())
    };
    let mut findings: Vec<PathBuf> = list_files(&artifacts).difference(&before).cloned().collect();
    // libFuzzer names the input it saved; keep it even if it replaced an older artifact of the same name.
    for line in text.lines() {
        if let Some(rest) = line.split("Test unit written to ").nth(1) {
            let p = root().join(rest.trim().trim_start_matches("./"));
            let p = fs::canonicalize(&p).unwrap_or(p);
            if !findings.iter().any(|f| fs::canonicalize(f).is_ok_and(|f| f == p)) {
                findings.push(p);
            }
        }
    }
    let outcome = Outcome {
        target: target.to_string(),
        seconds,
        executions: stat("stat::number_of_executed_units"),
        exec_per_sec: stat("stat::average_exec_per_sec"),
        new_units: stat("stat::new_units_added"),
        peak_rss_mb: stat("stat::peak_rss_mb"),
        success: status.success() && findings.is_empty(),
        findings,
        log,
        note: None,
    };
    if !outcome.success {
        eprintln!("== fuzz {target} FAILED ({status}); last lines of {}:", outcome.log.display());
        let lines: Vec<&str> = text.lines().collect();
        for l in &lines[lines.len().saturating_sub(40)..] {
            eprintln!("   {l}");
        }
        for f in &outcome.findings {
            eprintln!("== artifact: {}", f.display());
            eprintln!(
                "   reproduce: RUSTC_BOOTSTRAP=1 cargo fuzz run -s {}{} {target} {}",
                plan.sanitizer,
                if features.is_empty() { String::new() } else { format!(" --features {features}") },
                f.strip_prefix(root()).unwrap_or(f).display()
            );
        }
    }
    Ok(outcome)
}

fn print_summary(outcomes: &[Outcome], plan: &Plan) {
    let show = |x: Option<u64>| x.map_or_else(|| "?".to_string(), |v| v.to_string());
    println!("fuzz summary (sanitizer {}, {} s per target):", plan.sanitizer, plan.seconds);
    println!(
        "{:<14} {:>8} {:>14} {:>10} {:>10} {:>8} {:>9}",
        "target", "seconds", "executions", "exec/s", "new units", "rss MB", "findings"
    );
    let mut total = 0u64;
    for o in outcomes {
        total += o.executions.unwrap_or(0);
        println!(
            "{:<14} {:>8.0} {:>14} {:>10} {:>10} {:>8} {:>9}",
            o.target,
            o.seconds,
            show(o.executions),
            show(o.exec_per_sec),
            show(o.new_units),
            show(o.peak_rss_mb),
            if o.success { o.findings.len().to_string() } else { format!("{} FAIL", o.findings.len()) }
        );
    }
    println!("total executions: {total}");
    for o in outcomes {
        if let Some(note) = &o.note {
            println!("{}: {note}", o.target);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::cut_matrix_market;

    #[test]
    fn cut_keeps_the_head_and_rewrites_the_entry_count() {
        let text = b"%%MatrixMarket matrix coordinate integer general\n% c\n\n3 4 5\n1 1 1\n% mid\n2 2 2\n3 3 3\n\
                     1 4 4\n2 4 5\n";
        let cut = cut_matrix_market(text, 2);
        assert_eq!(
            String::from_utf8(cut).unwrap(),
            "%%MatrixMarket matrix coordinate integer general\n% c\n\n3 4 2\n1 1 1\n% mid\n2 2 2\n"
        );
        // Nothing to drop: unchanged, size line included.
        assert_eq!(cut_matrix_market(text, 5), text);
        assert_eq!(cut_matrix_market(text, 9), text);
        // Not a Matrix Market text: unchanged.
        assert_eq!(cut_matrix_market(b"hello\nworld\n", 1), b"hello\nworld\n");
        assert_eq!(cut_matrix_market(b"", 1), b"");
    }

    /// The fuzz smoke run CI makes (`.ci/run`) is the one `docs/ROBUSTNESS.md` gives as CI's, with the same
    /// seconds per target.
    #[test]
    fn the_documented_ci_smoke_run_is_the_one_ci_runs() {
        let root = crate::root();
        let ci = std::fs::read_to_string(root.join(".ci/run")).unwrap();
        let doc = std::fs::read_to_string(root.join("docs/ROBUSTNESS.md")).unwrap();
        let command = ci
            .lines()
            .map(str::trim)
            .find(|l| l.starts_with("cargo xtask fuzz --smoke"))
            .expect(".ci/run runs a fuzz smoke run");
        let documented = doc.lines().find(|l| l.contains(command) && l.contains("CI")).unwrap_or_else(|| {
            panic!("docs/ROBUSTNESS.md has no line giving `{command}` (what .ci/run runs) as CI's smoke run")
        });
        let seconds = command.split("--seconds").nth(1).map(|s| s.trim().split(' ').next().unwrap_or(""));
        if let Some(seconds) = seconds {
            assert!(documented.contains(&format!("{seconds} s each")), "{documented:?} should say {seconds} s each");
        }
    }
}
