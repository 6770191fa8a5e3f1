//! The plan's first pass, one input at a time: what [`make_plan`](crate::make_plan) needs of each input (cells,
//! genes, gene totals, obs summary), and the per-input scan files that let that pass be split over machines.
//!
//! `scan_inputs_part` scans a contiguous share of the inputs and writes one file per input,
//! `SCAN_DIR/scan-<input index>.json` (temporary file, then rename). `make_plan_with_scans` then reuses every
//! valid file and scans the rest itself, giving the plan a one-shot `make_plan` gives, byte for byte: totals are
//! integers and merge by addition in input order, whoever computed them.
//!
//! A scan file is valid for input `i` of a list when: it parses; its checksum matches its content; its format and
//! version are this one's; it names input `i` with the same path; the input's files have the recorded sizes and
//! modification times (a folder: every file in it); it was made with the same options (matrix, feature type,
//! obs selection, category limit); and it holds gene totals if the gene sort needs that input's totals. Anything
//! else is scanned again, with a note saying why.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use dct_input::{CountSource, H5adSource, InputKind, detect_kind, open_input_with, scan, scan_observed};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::ConvertError;
use crate::obs::{InputSummary, summarize};
use crate::options::ConvertOptions;
use crate::spill::Spill;

/// Identifies scan files.
const SCAN_FORMAT: &str = "deltacells-convert-scan";
/// Largest scan file read (a gene list of a few million names with totals fits easily).
const MAX_SCAN_BYTES: u64 = 1 << 30;
/// Rows read per window while scanning (bounded memory per input).
const SCAN_WINDOW: u64 = 256;

/// Size and modification time of one file of an input, to notice a changed input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileStamp {
    /// File name (empty for an input that is a single file).
    pub name: String,
    /// Bytes.
    pub size: u64,
    /// Modification time, nanoseconds since the Unix epoch (0 if the platform has none).
    pub mtime_ns: u64,
}

/// What the plan needs of one input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct InputScan {
    /// Always [`SCAN_FORMAT`].
    format: String,
    /// Scan file version (1).
    version: u32,
    /// Index of the input in the (naturally sorted) input list.
    pub(crate) index: usize,
    /// Path as given.
    pub(crate) path: String,
    /// The input's files when scanned.
    pub(crate) stamp: Vec<FileStamp>,
    /// Fingerprint of the options that decide what a scan holds.
    options: String,
    /// Kind detected (`h5ad`, `10x h5`, `Matrix Market`).
    pub(crate) kind: String,
    /// Cells.
    pub(crate) n_cells: u64,
    /// Size of the file (or matrix file) in bytes, as the plan records it.
    pub(crate) size_bytes: u64,
    /// Genes.
    pub(crate) n_genes: u64,
    /// SHA-256 of the gene keys (ids when the input has them, else names), to compare inputs.
    pub(crate) keys_sha256: String,
    /// The gene keys: kept for input 0 only (the others are compared by `keys_sha256`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) keys: Option<Vec<String>>,
    /// The gene names: kept for input 0 only (they become the plan's `var_names`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) names: Option<Vec<String>>,
    /// Gene totals in source order, when the gene sort reads this input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) totals: Option<Vec<u64>>,
    /// The obs summary of an `.h5ad` input (when obs is written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) obs: Option<InputSummary>,
    /// 24 hex digits of the SHA-256 of everything above.
    checksum: String,
}

impl InputScan {
    /// The checksum of the scan's JSON with an empty `checksum` field (streamed into the hash: a scan holds every
    /// gene name of its input, so neither the scan nor its JSON is copied).
    fn compute_checksum(&mut self) -> String {
        struct HashWriter(Sha256);
        impl std::io::Write for HashWriter {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.update(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let kept = std::mem::take(&mut self.checksum);
        let mut w = std::io::BufWriter::with_capacity(1 << 16, HashWriter(Sha256::new()));
        serde_json::to_writer(&mut w, &*self).expect("scans serialize");
        std::io::Write::flush(&mut w).expect("hashing cannot fail");
        self.checksum = kept;
        w.get_ref().0.clone().finalize().iter().take(12).map(|b| format!("{b:02x}")).collect()
    }

    fn to_json(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec(self).expect("scans serialize");
        v.push(b'\n');
        v
    }
}

/// The folder of per-input scan files of the plan file `plan` (`PLAN.json.d`).
pub fn scan_dir(plan: &Path) -> PathBuf {
    let mut name = plan.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".d");
    plan.with_file_name(name)
}

/// The scan file of input `index` in `dir`.
fn scan_file(dir: &Path, index: usize) -> PathBuf {
    dir.join(format!("scan-{index}.json"))
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> ConvertError + '_ {
    move |source| ConvertError::Io { path: path.display().to_string(), cause: source }
}

fn mtime_ns(meta: &std::fs::Metadata) -> u64 {
    meta.modified().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map_or(0, |d| d.as_nanos() as u64)
}

/// Sizes and modification times of an input's files (a folder: every regular file in it, by name).
pub(crate) fn input_stamp(path: &Path) -> Result<Vec<FileStamp>, ConvertError> {
    let meta = std::fs::metadata(path).map_err(io_err(path))?;
    if !meta.is_dir() {
        return Ok(vec![FileStamp { name: String::new(), size: meta.len(), mtime_ns: mtime_ns(&meta) }]);
    }
    let mut out = Vec::new();
    for entry in std::fs::read_dir(path).map_err(io_err(path))? {
        let entry = entry.map_err(io_err(path))?;
        let meta = entry.metadata().map_err(io_err(&entry.path()))?;
        if meta.is_file() {
            let name = entry.file_name().to_string_lossy().into_owned();
            out.push(FileStamp { name, size: meta.len(), mtime_ns: mtime_ns(&meta) });
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// Fingerprint of the options that decide what a scan holds (not the output, tiles or level).
fn options_fingerprint(opts: &ConvertOptions) -> String {
    let matrix = opts.matrix.to_string();
    let mut key = serde_json::json!({
        "matrix": matrix,
        "feature_type": opts.feature_type,
        "write_obs": opts.write_obs,
        "obs_columns": opts.obs_columns,
        "obs_exclude": opts.obs_exclude,
        "max_categories": opts.max_categories,
        // Scans record whether categoricals are ordered: one made by a build that did not is made again.
        "ordered_categories": true,
    });
    // Only in a gene space, so scan files made without one stay valid.
    if opts.genes.is_some() {
        key["gene_space"] = serde_json::json!({ "key": opts.gene_key });
    }
    let digest = Sha256::digest(key.to_string().as_bytes());
    digest.iter().take(12).map(|b| format!("{b:02x}")).collect()
}

/// SHA-256 (hex) of a gene key list, each key length-prefixed.
pub(crate) fn keys_digest(keys: &[String]) -> String {
    let mut h = Sha256::new();
    h.update((keys.len() as u64).to_le_bytes());
    for k in keys {
        h.update((k.len() as u64).to_le_bytes());
        h.update(k.as_bytes());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Genes of an input as compared across inputs: ids when every input has them, otherwise names.
pub(crate) fn gene_keys(source: &dyn CountSource) -> Vec<String> {
    let g = source.genes();
    if g.ids.len() == g.names.len() && !g.ids.is_empty() { g.ids.clone() } else { g.names.clone() }
}

/// The keys an input's genes are matched by across inputs of a gene space ([`ConvertOptions::genes`]): their
/// names, or the `key` column of an `.h5ad` input's gene table (10x inputs answer any column with their feature
/// IDs). `path` names the input in errors.
pub(crate) fn matching_keys<'a>(
    source: &'a dyn CountSource,
    key: Option<&str>,
    path: &str,
) -> Result<Cow<'a, [String]>, ConvertError> {
    let g = source.genes();
    let Some(column) = key else { return Ok(Cow::Borrowed(&g.names)) };
    if source.kind() != InputKind::H5ad || column == g.index_name {
        return Ok(Cow::Borrowed(if source.kind() == InputKind::H5ad { &g.names } else { &g.ids }));
    }
    match g.columns.iter().find(|c| c.name == column) {
        Some(c) => c.data.as_strings().map(Cow::Owned).ok_or_else(|| {
            ConvertError::Inputs(format!(
                "{path}: gene table column {column:?} does not hold strings without missing values, so it cannot \
                 identify genes; choose another --gene-key"
            ))
        }),
        None => {
            let have: Vec<&str> = g.columns.iter().map(|c| c.name.as_str()).collect();
            Err(ConvertError::Inputs(format!(
                "{path}: the gene table has no column {column:?} to match genes by (it has the index {:?} and \
                 columns {have:?}); choose another --gene-key",
                g.index_name
            )))
        }
    }
}

/// Opens input `path` with its gene table (for `.h5ad` inputs, without reading the cell names).
pub(crate) fn open_gene_table(
    path: &str,
    opts: &dct_input::InputOptions,
) -> Result<Box<dyn CountSource>, ConvertError> {
    let p = Path::new(path);
    Ok(if detect_kind(p)? == InputKind::H5ad {
        Box::new(H5adSource::open_gene_table(p, &opts.matrix)?)
    } else {
        open_input_with(p, opts)?
    })
}

/// The matching keys ([`matching_keys`]) of input `path`, opened again: what a part needs to place an input's
/// genes in the plan's gene space.
pub(crate) fn reopen_matching_keys(
    path: &str,
    opts: &dct_input::InputOptions,
    key: Option<&str>,
) -> Result<Vec<String>, ConvertError> {
    Ok(matching_keys(open_gene_table(path, opts)?.as_ref(), key, path)?.into_owned())
}

/// The gene keys of the input at `path`, opened again (to explain a gene-list mismatch).
pub(crate) fn reopen_keys(path: &str, opts: &ConvertOptions) -> Result<Vec<String>, ConvertError> {
    Ok(gene_keys(open_input_with(Path::new(path), &opts.input_options())?.as_ref()))
}

fn size_of_input(path: &Path) -> u64 {
    let p: PathBuf = if path.is_dir() {
        ["matrix.mtx.gz", "matrix.mtx"].iter().map(|n| path.join(n)).find(|p| p.exists()).unwrap_or(path.to_path_buf())
    } else {
        path.to_path_buf()
    };
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

/// Scans input `index` at `path`: opens it, reads its genes (and its obs summary for `.h5ad` inputs when obs is
/// written) and, with `totals`, sums its counts per gene (keeping its cells in `spill`, if given and within budget).
pub(crate) fn scan_input(
    index: usize,
    path: &Path,
    totals: bool,
    opts: &ConvertOptions,
    spill: Option<&Spill>,
) -> Result<InputScan, ConvertError> {
    let stamp = input_stamp(path)?;
    let input_opts = opts.input_options();
    // h5ad inputs are opened as such so that their obs can be read; the others have cell names only.
    // Beyond the first input, only the gene keys are needed (to check that the gene lists agree), or, in a gene
    // space, the gene table (to match genes by any of its columns and name them).
    let gene_space = opts.genes.is_some();
    let keys_only = index != 0 && !gene_space;
    let (mut source, obs): (Box<dyn CountSource>, _) = if detect_kind(path)? == InputKind::H5ad {
        let source = if keys_only {
            H5adSource::open_gene_keys_only(path, &input_opts.matrix)?
        } else if index != 0 {
            H5adSource::open_gene_names(path, &input_opts.matrix, opts.gene_key.as_deref())?
        } else {
            H5adSource::open(path, &input_opts.matrix)?
        };
        let obs = if opts.write_obs {
            Some(summarize(&source.read_obs()?, opts.obs_selection(), opts.max_categories))
        } else {
            None
        };
        (Box::new(source), obs)
    } else {
        (open_input_with(path, &input_opts)?, None)
    };
    let totals = if totals {
        let mut kept = spill.and_then(|s| s.writer(index, source.n_genes()));
        let mut keep = |b: &dct_input::RowBlock| kept.iter_mut().for_each(|w| w.observe(b));
        match scan_observed(source.as_mut(), SCAN_WINDOW, &mut keep) {
            Ok(stats) => {
                if let Some(w) = kept {
                    w.finish(stats.n_cells);
                }
                Some(stats.gene_totals)
            }
            // A keys-only source names no cell or gene in its errors: scan with names to say which.
            Err(e) if keys_only && source.kind() == InputKind::H5ad => {
                scan(&mut H5adSource::open(path, &input_opts.matrix)?, SCAN_WINDOW)?;
                return Err(e.into());
            }
            Err(e) => return Err(e.into()),
        }
    } else {
        None
    };
    let keys = if gene_space {
        matching_keys(source.as_ref(), opts.gene_key.as_deref(), &path.display().to_string())?.into_owned()
    } else {
        gene_keys(source.as_ref())
    };
    let kept = index == 0 || gene_space;
    let mut s = InputScan {
        format: SCAN_FORMAT.into(),
        version: 1,
        index,
        path: path.display().to_string(),
        stamp,
        options: options_fingerprint(opts),
        kind: source.kind().to_string(),
        n_cells: source.n_cells(),
        size_bytes: size_of_input(path),
        n_genes: keys.len() as u64,
        keys_sha256: keys_digest(&keys),
        keys: kept.then_some(keys),
        names: kept.then(|| source.genes().names.clone()),
        totals,
        obs,
        checksum: String::new(),
    };
    s.checksum = s.compute_checksum();
    Ok(s)
}

/// Why a scan file was not used.
enum Unusable {
    /// There is none (scan the input without comment).
    Absent,
    /// It is stale, corrupt or made differently: scan again, and say why.
    Rejected(String),
}

/// Loads and checks the scan file of input `index` (`path`) in `dir`.
fn load_scan(
    dir: &Path,
    index: usize,
    path: &Path,
    totals: bool,
    opts: &ConvertOptions,
) -> Result<InputScan, Unusable> {
    let file = scan_file(dir, index);
    let shown = file.display();
    let reject = |why: String| Unusable::Rejected(format!("{shown}: {why}; scanning {} again", path.display()));
    let meta = match std::fs::metadata(&file) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Unusable::Absent),
        Err(e) => return Err(reject(format!("cannot be read ({e})"))),
    };
    if meta.len() > MAX_SCAN_BYTES {
        return Err(reject(format!("{} bytes is too large for a scan file", meta.len())));
    }
    let bytes = std::fs::read(&file).map_err(|e| reject(format!("cannot be read ({e})")))?;
    let mut s: InputScan =
        serde_json::from_slice(&bytes).map_err(|e| reject(format!("is not a valid scan file ({e})")))?;
    if s.format != SCAN_FORMAT || s.version != 1 {
        return Err(reject(format!("format {:?} version {} is not a version-1 scan file", s.format, s.version)));
    }
    if s.compute_checksum() != s.checksum {
        return Err(reject("its checksum does not match its contents (corrupt or edited)".into()));
    }
    // The same file however its path was spelled (relative or absolute).
    let same_path = std::path::absolute(&s.path).ok().is_some_and(|a| std::path::absolute(path).ok() == Some(a));
    if s.index != index || !same_path {
        return Err(reject(format!("it is the scan of input {} {:?}, not of this input", s.index, s.path)));
    }
    let now = input_stamp(path).map_err(|e| reject(format!("the input cannot be examined ({e})")))?;
    if now != s.stamp {
        return Err(reject("the input changed since it was scanned (size or modification time)".into()));
    }
    if s.options != options_fingerprint(opts) {
        return Err(reject(
            "it was made with other options (matrix, feature type, obs columns or category limit)".into(),
        ));
    }
    let n = s.n_genes as usize;
    if totals && s.totals.is_none() {
        return Err(reject("it has no gene totals, which this gene sort needs".into()));
    }
    let lengths_ok = s.totals.as_ref().is_none_or(|t| t.len() == n)
        && s.keys.as_ref().is_none_or(|k| k.len() == n && keys_digest(k) == s.keys_sha256)
        && s.names.as_ref().is_none_or(|g| g.len() == n)
        && ((index != 0 && opts.genes.is_none()) || (s.keys.is_some() && s.names.is_some()));
    if !lengths_ok {
        return Err(reject("its gene lists or totals are inconsistent".into()));
    }
    Ok(s)
}

/// Returns the scan of input `index`: from its scan file in `dir` if that is valid, else scanned now (with the
/// reason on `note` when a file was there but unusable).
pub(crate) fn load_or_scan(
    dir: Option<&Path>,
    index: usize,
    path: &Path,
    totals: bool,
    opts: &ConvertOptions,
    spill: Option<&Spill>,
) -> Result<(InputScan, Option<String>), ConvertError> {
    let note = match dir.map(|d| load_scan(d, index, path, totals, opts)) {
        Some(Ok(s)) => return Ok((s, None)),
        Some(Err(Unusable::Rejected(why))) => Some(why),
        Some(Err(Unusable::Absent)) | None => None,
    };
    Ok((scan_input(index, path, totals, opts, spill)?, note))
}

/// What [`scan_inputs_part`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScanReport {
    /// Indices of the inputs of the part.
    pub inputs: std::ops::Range<usize>,
    /// Inputs scanned now.
    pub scanned: usize,
    /// Inputs whose scan file was already there and valid.
    pub kept: usize,
    /// Why existing scan files were not used (stale, corrupt, other options).
    pub notes: Vec<String>,
}

/// The first pass of [`make_plan`](crate::make_plan) for part `part` of `parts` (0-based) of the inputs: scans
/// the contiguous share `part * n / parts .. (part + 1) * n / parts` of the `n` inputs (in parallel) and writes
/// one file per input, `dir/scan-<input index>.json` (atomically: temporary file, then rename). Inputs whose
/// file is already there and valid are skipped, so a part can be re-run. `inputs` and `opts` must be those the
/// plan will be made with ([`make_plan_with_scans`](crate::make_plan_with_scans) scans again whatever does not
/// match).
pub fn scan_inputs_part(
    inputs: &[PathBuf],
    opts: &ConvertOptions,
    dir: &Path,
    part: usize,
    parts: usize,
) -> Result<ScanReport, ConvertError> {
    use rayon::prelude::*;
    if parts == 0 || part >= parts {
        return Err(ConvertError::Inputs(format!("scan part {part}/{parts}: parts are numbered 0..N-1 of N >= 1")));
    }
    crate::options::check_options(inputs, opts)?;
    let n = inputs.len();
    let range = (part * n / parts)..((part + 1) * n / parts);
    let sample = crate::options::sample_flags(opts.gene_sort, n);
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    let results: Vec<(bool, Option<String>)> = range
        .clone()
        .into_par_iter()
        .map(|i| -> Result<(bool, Option<String>), ConvertError> {
            let note = match load_scan(dir, i, &inputs[i], sample[i], opts) {
                Ok(_) => return Ok((false, None)),
                Err(Unusable::Absent) => None,
                Err(Unusable::Rejected(why)) => Some(why),
            };
            let s = scan_input(i, &inputs[i], sample[i], opts, None)?;
            let file = scan_file(dir, i);
            let tmp = dir.join(format!(".scan-{i}.json.tmp-{}", std::process::id()));
            std::fs::write(&tmp, s.to_json()).map_err(io_err(&tmp))?;
            std::fs::rename(&tmp, &file).map_err(io_err(&file))?;
            Ok((true, note))
        })
        .collect::<Result<_, _>>()?;
    let mut report = ScanReport { inputs: range, ..Default::default() };
    for (scanned, note) in results {
        if scanned {
            report.scanned += 1;
        } else {
            report.kept += 1;
        }
        report.notes.extend(note);
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_dir_appends_d() {
        assert_eq!(scan_dir(Path::new("/a/b/plan.json")), PathBuf::from("/a/b/plan.json.d"));
        assert_eq!(scan_dir(Path::new("plan.json")), PathBuf::from("plan.json.d"));
    }

    #[test]
    fn key_digests_are_length_prefixed() {
        let a = keys_digest(&["ab".into(), "c".into()]);
        let b = keys_digest(&["a".into(), "bc".into()]);
        assert_ne!(a, b);
    }
}
