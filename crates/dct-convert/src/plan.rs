//! The conversion plan: inputs, options, gene order and tile assignment, fixed once so that any number of parts
//! on any number of machines write the same tiles.

use std::path::{Path, PathBuf};

use dct_codec::Preset;
use dct_format::Version;
use dct_input::{H5adMatrix, InputOptions};
use dct_obs::ObsSchema;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::ConvertError;
use crate::obs::{InputSummary, build_schema};
pub use crate::options::{ConvertOptions, GeneSort, GeneSpace};
use crate::options::{check_options, sample_flags};
pub use crate::scan::FileStamp;
use crate::scan::{InputScan, load_or_scan, reopen_keys};
use crate::spill::Spill;
use dct_corpus::{GeneInterner, GeneMap};

use crate::remap::NO_COLUMN;

/// Identifies plan files.
pub const PLAN_FORMAT: &str = "deltacells-convert-plan";
/// Name of the copy of the plan kept in the output, which ties its tiles to one conversion.
pub const PLAN_MARKER: &str = "convert-plan.json";
/// Folder of the receipts a conversion's parts leave in the output, one per tile written (removed at finalize):
/// a tile counts as done only with its plan's receipt for exactly its bytes, so tiles another plan wrote there
/// (a part of an abandoned conversion still running, two plans started on one output) are written again.
pub const RECEIPTS_DIR: &str = "convert-receipts";
/// Largest plan file read.
const MAX_PLAN_BYTES: u64 = 1 << 30;

/// The obs of a plan: written at finalize, from the inputs, with this schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanObs {
    /// Tiles (row groups) per shard.
    pub tiles_per_file: u64,
    /// The exact text of `obs/schema.json` (columns, kinds, Arrow types and global vocabularies).
    pub schema: String,
}

/// The gene space of a plan made from inputs with different gene lists ([`ConvertOptions::genes`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanGenes {
    /// `union`, `intersection` or `given`.
    pub space: String,
    /// The gene-table column genes are matched by (`None`: their names).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The matching key of each output column, in output order (the dataset's genes).
    pub keys: Vec<String>,
}

/// One input file of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanInput {
    /// Path (made absolute when the plan is made).
    pub path: String,
    /// Kind detected (`h5ad`, `10x h5`, `Matrix Market`).
    pub kind: String,
    /// Cells.
    pub n_cells: u64,
    /// Size of the file (or matrix file) in bytes, to notice a changed input.
    pub size_bytes: u64,
    /// In a gene space: the SHA-256 of the input's matching keys, to notice a changed gene list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys_sha256: Option<String>,
    /// Size and modification time of each of the input's files when the plan was made: a part or finalize reads
    /// the input only while they are the same, so tiles of one plan never mix an input's old and new contents.
    /// (Empty in plans made before they were recorded, which keep their fingerprints and are not checked.)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<FileStamp>,
}

/// Input paths for a message: all of a few, else the first three and how many more.
pub(crate) fn list_paths(paths: &[&str]) -> String {
    match paths {
        [one] => one.to_string(),
        _ if paths.len() <= 4 => format!("the inputs {}", paths.join(", ")),
        _ => format!("the inputs {}, ... ({} in all)", paths[..3].join(", "), paths.len()),
    }
}

/// A location as a plan records it: a local path made absolute (parts and finalize may run in other directories,
/// or on other machines that mount the same files); a URL as it is.
fn absolute_location(location: &str) -> String {
    if location.contains("://") {
        return location.to_string();
    }
    std::path::absolute(location).map_or_else(|_| location.to_string(), |p| p.display().to_string())
}

/// A fixed conversion: every part and the finalize step read it, so they agree on every tile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// Always [`PLAN_FORMAT`].
    pub format: String,
    /// Plan format version (1).
    pub version: u32,
    /// Output dataset URL (a local path made absolute when the plan is made).
    pub output: String,
    /// Cells per tile.
    pub tile_size: u64,
    /// zstd level.
    pub zstd_level: i32,
    /// Chunks per tile.
    pub n_chunks: usize,
    /// Matrix read from `.h5ad` inputs: `X`, `raw` or `layer:NAME`.
    pub matrix: String,
    /// Feature type kept from 10x inputs.
    pub feature_type: Option<String>,
    /// `all`, `sample:N` or `keep`.
    pub gene_sort: String,
    /// Inputs in conversion order.
    pub inputs: Vec<PlanInput>,
    /// Genes.
    pub n_genes: u64,
    /// Cells over all inputs.
    pub n_cells: u64,
    /// Tiles of the output.
    pub n_tiles: usize,
    /// Gene names in output order (written to `var_names.txt`).
    pub var_names: Vec<String>,
    /// `gene_order[j]` is the source gene stored in output column `j`.
    pub gene_order: Vec<u32>,
    /// The obs written at finalize (`None`: no obs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub obs: Option<PlanObs>,
    /// Format version of the tiles and manifest (absent in the file for version 2, so plans of version-2
    /// datasets are what they always were).
    #[serde(default = "version_2", skip_serializing_if = "is_version_2")]
    pub format_version: u32,
    /// The zstd preset ([`Preset`] name). Plans written before presets existed have none and mean `plain`, what
    /// their tiles were made with; `plain` is left out of the file, so those plans keep their fingerprints.
    #[serde(default = "preset_plain", skip_serializing_if = "is_preset_plain")]
    pub zstd_preset: String,
    /// Whether finalize writes `var.parquet` (left out of the file when it does, so earlier plans keep their
    /// fingerprints).
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub write_var: bool,
    /// The gene space, for inputs with different gene lists (`None`: every input lists the plan's genes in
    /// source order; `gene_order` then permutes them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub genes: Option<PlanGenes>,
    /// Cells that precede the plan's first cell in its first tile (an append: the cells of the dataset's partial
    /// last tile, which the append joins to the first new ones). Tile 0 then holds `tile_size - lead_cells` of the
    /// plan's cells and every later tile starts `lead_cells` earlier. Left out of the file when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lead_cells: u64,
    /// 24 hex digits of the SHA-256 of everything above: ties tiles and parts to this plan.
    pub fingerprint: String,
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

fn version_2() -> u32 {
    2
}

fn preset_plain() -> String {
    Preset::Plain.as_str().into()
}

fn is_preset_plain(p: &str) -> bool {
    p == Preset::Plain.as_str()
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_version_2(v: &u32) -> bool {
    *v == 2
}

impl Plan {
    /// The zstd preset of the tiles.
    pub fn encode_preset(&self) -> Result<Preset, ConvertError> {
        self.zstd_preset.parse().map_err(|e: String| self.err(format!("zstd_preset: {e}")))
    }

    /// How this plan's tiles are encoded: its chunks, level, preset and format version.
    pub fn encode_options(&self) -> Result<dct_codec::EncodeOptions, ConvertError> {
        Ok(dct_codec::EncodeOptions {
            n_chunks: self.n_chunks,
            level: self.zstd_level,
            preset: self.encode_preset()?,
            version: self.tile_version()?,
            ..dct_codec::EncodeOptions::default()
        })
    }

    /// The format version of the tiles and manifest.
    pub fn tile_version(&self) -> Result<Version, ConvertError> {
        Version::from_number(self.format_version)
            .ok_or_else(|| self.err(format!("format_version {} is neither 1 nor 2", self.format_version)))
    }

    /// Cells `[first, end)` of tile `t`.
    pub fn tile_cells(&self, t: usize) -> (u64, u64) {
        let first = (t as u64 * self.tile_size).saturating_sub(self.lead_cells);
        (first, ((t as u64 + 1) * self.tile_size - self.lead_cells).min(self.n_cells))
    }

    /// The tiles that `n_cells` cells make after `lead_cells` cells of the first tile.
    fn tiles_for(n_cells: u64, tile_size: u64, lead_cells: u64) -> usize {
        (n_cells + lead_cells).div_ceil(tile_size) as usize
    }

    /// This plan with its first tile started by `lead_cells` cells from elsewhere (fewer than `tile_size`; see
    /// [`Plan::lead_cells`]), its tiles and fingerprint computed again.
    pub fn with_lead_cells(mut self, lead_cells: u64) -> Result<Plan, ConvertError> {
        if lead_cells >= self.tile_size {
            return Err(self.err(format!("{lead_cells} lead cells fill a tile of {}", self.tile_size)));
        }
        self.lead_cells = lead_cells;
        self.n_tiles = Plan::tiles_for(self.n_cells, self.tile_size, lead_cells);
        self.fingerprint = self.compute_fingerprint();
        Ok(self)
    }

    /// Tiles written by part `part` of `parts` (contiguous, so each part reads its inputs in order).
    pub fn part_tiles(&self, part: usize, parts: usize) -> std::ops::Range<usize> {
        // In 128 bits: `part * n` passes 64 bits for a huge `parts`.
        let (n, part, parts) = (self.n_tiles as u128, part as u128, parts.max(1) as u128);
        ((part * n / parts) as usize)..(((part + 1) * n / parts) as usize)
    }

    /// Where this plan's receipt for tile `t` goes (see [`RECEIPTS_DIR`]).
    pub(crate) fn receipt_path(&self, t: usize) -> String {
        format!("{RECEIPTS_DIR}/{}/tile_{t:06}", self.fingerprint)
    }

    /// The options this plan was made with (for re-opening its inputs).
    pub fn input_options(&self) -> Result<InputOptions, ConvertError> {
        let matrix: H5adMatrix = self.matrix.parse().map_err(|e: String| self.err(e))?;
        Ok(InputOptions { matrix, feature_type: self.feature_type.clone() })
    }

    /// The obs schema written at finalize, parsed (`None` without obs).
    pub fn obs_schema(&self) -> Result<Option<ObsSchema>, ConvertError> {
        let Some(obs) = &self.obs else { return Ok(None) };
        ObsSchema::parse(obs.schema.as_bytes(), "the plan's obs schema")
            .map(Some)
            .map_err(|e| self.err(format!("its obs schema is invalid: {e}; make a new plan")))
    }

    fn compute_fingerprint(&self) -> String {
        let mut copy = self.clone();
        copy.fingerprint = String::new();
        let json = serde_json::to_vec(&copy).expect("plans serialize");
        let digest = Sha256::digest(&json);
        digest.iter().take(12).map(|b| format!("{b:02x}")).collect()
    }

    fn err(&self, message: String) -> ConvertError {
        ConvertError::Plan { path: self.output.clone(), message }
    }

    /// Parses and checks a plan (format, version, fingerprint, internal consistency).
    pub fn from_json(bytes: &[u8], path: &str) -> Result<Plan, ConvertError> {
        let err = |message: String| ConvertError::Plan { path: path.to_string(), message };
        let plan: Plan = serde_json::from_slice(bytes).map_err(|e| err(format!("not a conversion plan: {e}")))?;
        if plan.format != PLAN_FORMAT || plan.version != 1 {
            return Err(err(format!(
                "format {:?} version {} is not a version-1 conversion plan",
                plan.format, plan.version
            )));
        }
        if plan.compute_fingerprint() != plan.fingerprint {
            return Err(err("its fingerprint does not match its contents: it was edited; make a new plan".into()));
        }
        let cells: u64 = plan.inputs.iter().map(|i| i.n_cells).sum();
        let ok = plan.tile_size > 0
            && cells == plan.n_cells
            && plan.lead_cells < plan.tile_size
            && plan.n_tiles == Plan::tiles_for(plan.n_cells, plan.tile_size, plan.lead_cells)
            && plan.gene_order.len() as u64 == plan.n_genes
            && plan.var_names.len() as u64 == plan.n_genes
            && is_permutation(&plan.gene_order)
            && plan.genes.as_ref().is_none_or(|g| {
                g.keys.len() as u64 == plan.n_genes && plan.inputs.iter().all(|i| i.keys_sha256.is_some())
            });
        if !ok {
            return Err(err("its counts are inconsistent (cells, tiles, genes or gene order)".into()));
        }
        if let Some(obs) = &plan.obs {
            if obs.tiles_per_file == 0 {
                return Err(err("its obs tiles_per_file is 0".into()));
            }
            ObsSchema::parse(obs.schema.as_bytes(), path)
                .map_err(|e| err(format!("its obs schema is invalid: {e}")))?;
        }
        Ok(plan)
    }

    /// Reads a plan file.
    pub fn load(path: &Path) -> Result<Plan, ConvertError> {
        let shown = path.display().to_string();
        let io = |source| ConvertError::Io { path: shown.clone(), cause: source };
        let len = std::fs::metadata(path).map_err(io)?.len();
        if len > MAX_PLAN_BYTES {
            return Err(ConvertError::Plan { path: shown, message: format!("{len} bytes is too large for a plan") });
        }
        Plan::from_json(&std::fs::read(path).map_err(io)?, &shown)
    }

    /// Writes the plan atomically (temporary file, then rename).
    pub fn save(&self, path: &Path) -> Result<(), ConvertError> {
        let io = |source| ConvertError::Io { path: path.display().to_string(), cause: source };
        let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
        std::fs::write(&tmp, self.to_json()).map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    }

    /// The plan as pretty JSON.
    pub fn to_json(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec_pretty(self).expect("plans serialize");
        v.push(b'\n');
        v
    }
}

/// The plan's genes before they are sorted: a name and a total per gene, and in a gene space its name and each
/// gene's matching key.
struct GeneLayout {
    names: Vec<String>,
    totals: Vec<u64>,
    genes: Option<(String, Vec<String>)>,
    /// In a gene space, each input's column of the space per gene ([`NO_COLUMN`]: left out).
    input_columns: Vec<Vec<u32>>,
}

/// The genes of inputs that must list the same genes in the same order (no gene space): refuses any that do not,
/// naming the first difference and the option that combines different lists.
fn same_genes(scanned: &[InputScan], sample: &[bool], opts: &ConvertOptions) -> Result<GeneLayout, ConvertError> {
    const ALTERNATIVE: &str = "inputs of one dataset must list the same genes in the same order, or be combined \
                               with --genes union|intersection|FILE (genes.union etc. in Python)";
    let first = &scanned[0];
    for s in &scanned[1..] {
        if s.n_genes == first.n_genes && s.keys_sha256 == first.keys_sha256 {
            continue;
        }
        let first_keys = match &first.keys {
            Some(k) => k.clone(),
            None => reopen_keys(&first.path, opts)?,
        };
        let keys = reopen_keys(&s.path, opts)?;
        if keys.len() != first_keys.len() {
            return Err(ConvertError::Inputs(format!(
                "{} has {} genes but {} has {}: {ALTERNATIVE}",
                s.path,
                keys.len(),
                first.path,
                first_keys.len()
            )));
        }
        let i = (0..keys.len()).find(|&i| keys[i] != first_keys[i]).ok_or_else(|| {
            ConvertError::Inputs(format!(
                "{} changed while the plan was made (its gene list differs from its scan): make the plan again",
                s.path
            ))
        })?;
        return Err(ConvertError::Inputs(format!(
            "{} lists gene {i} as {:?} but {} lists {:?}: {ALTERNATIVE}",
            s.path, keys[i], first.path, first_keys[i]
        )));
    }
    let n = first.n_genes as usize;
    let mut totals = vec![0u64; n];
    for t in scanned.iter().zip(sample).filter(|(_, s)| **s).filter_map(|(s, _)| s.totals.as_ref()) {
        for (a, b) in totals.iter_mut().zip(t) {
            *a += b;
        }
    }
    let names = first.names.clone().unwrap_or_default();
    let names = (0..n).map(|g| names.get(g).cloned().unwrap_or_default()).collect();
    Ok(GeneLayout { names, totals, genes: None, input_columns: Vec::new() })
}

/// The genes of inputs combined into `space`: each input's genes matched by their keys, totals summed per gene of
/// the space, each gene named as the first input that has it names it (genes of a given vocabulary that no input
/// has, by their key).
fn gene_space(
    scanned: &[InputScan],
    keys: &[Vec<u32>],
    input_names: &[Vec<u32>],
    interner: &mut GeneInterner,
    sample: &[bool],
    space: &GeneSpace,
    opts: &ConvertOptions,
) -> Result<GeneLayout, ConvertError> {
    let paths: Vec<String> = scanned.iter().map(|s| s.path.clone()).collect();
    let map = GeneMap::build_interned(&paths, keys, interner, space).map_err(|e| match e {
        dct_corpus::CorpusError::DuplicateGene { member, gene } => ConvertError::Inputs(format!(
            "{member} lists gene {gene:?} more than once ({}): each gene must appear once in an input to be matched \
             across inputs; choose another --gene-key",
            match &opts.gene_key {
                Some(k) => format!("gene-table column {k:?}"),
                None => "its gene names".to_string(),
            }
        )),
        other => ConvertError::Inputs(other.to_string()),
    })?;
    let n = map.genes().len();
    let mut totals = vec![0u64; n];
    let mut names: Vec<Option<u32>> = vec![None; n];
    for (m, s) in scanned.iter().enumerate() {
        let columns = map.member(m);
        let input_names = &input_names[m];
        let input_totals = s.totals.as_deref().filter(|_| sample[m]);
        for j in 0..columns.n_genes() {
            if let Some(c) = columns.corpus_column(j) {
                let c = c as usize;
                if let Some(t) = input_totals {
                    totals[c] += t[j];
                }
                if names[c].is_none() {
                    names[c] = input_names.get(j).copied();
                }
            }
        }
    }
    let names = names
        .into_iter()
        .zip(map.genes())
        .map(|(name, key)| name.map_or_else(|| key.clone(), |id| interner.name(id).to_string()))
        .collect();
    let kind = match space {
        GeneSpace::Union => "union",
        GeneSpace::Intersection => "intersection",
        GeneSpace::Given(_) => "given",
    };
    let input_columns = (0..scanned.len())
        .map(|m| {
            let columns = map.member(m);
            (0..columns.n_genes()).map(|j| columns.corpus_column(j).unwrap_or(NO_COLUMN)).collect()
        })
        .collect();
    Ok(GeneLayout { names, totals, genes: Some((kind.to_string(), map.genes().to_vec())), input_columns })
}

fn is_permutation(order: &[u32]) -> bool {
    let mut seen = vec![false; order.len()];
    order.iter().all(|&g| (g as usize) < seen.len() && !std::mem::replace(&mut seen[g as usize], true))
}

/// Makes a plan: opens every input, checks that their gene lists agree, sums gene totals (over all inputs, a
/// sample, or none, as `opts.gene_sort` says; inputs are scanned in parallel) and fixes the gene order and the
/// tiles. `inputs` are converted in the order given (the CLI sorts them naturally).
///
/// Unless `opts.write_obs` is off it also fixes the obs schema: the obs of every `.h5ad` input is read (the
/// selected columns; categories kept up to `max_categories` per column and input) and merged into one schema with
/// global vocabularies (see [`crate`] docs, "Obs"). A selected column the reader cannot convert (datetimes, nested
/// data, ...) is an error naming the column and the file, unless excluded.
///
/// To split this pass over machines, see [`scan_inputs_part`](crate::scan_inputs_part) and
/// [`make_plan_with_scans`].
pub fn make_plan(inputs: &[PathBuf], opts: &ConvertOptions) -> Result<Plan, ConvertError> {
    plan_from(inputs, opts, None, &mut |_| {}, None)
}

/// [`make_plan`], keeping in `spill` (within its budget) the cells of every input it reads in full, so that
/// [`run_part_with_spill`](crate::run_part_with_spill) on this machine reads them back instead of decoding those
/// inputs again. The plan is the one [`make_plan`] gives, byte for byte.
pub fn make_plan_with_spill(inputs: &[PathBuf], opts: &ConvertOptions, spill: &Spill) -> Result<Plan, ConvertError> {
    plan_from(inputs, opts, None, &mut |_| {}, Some(spill))
}

/// [`make_plan`], reusing the per-input scan files that [`scan_inputs_part`](crate::scan_inputs_part) wrote in
/// `scan_dir`: each input with a valid file there is not read again; the others (no file, or a stale, corrupt or
/// differently made one, each with a note on `note` saying why) are scanned here. The plan is the one
/// [`make_plan`] gives, byte for byte.
pub fn make_plan_with_scans(
    inputs: &[PathBuf],
    opts: &ConvertOptions,
    scan_dir: &Path,
    mut note: impl FnMut(&str),
) -> Result<Plan, ConvertError> {
    plan_from(inputs, opts, Some(scan_dir), &mut note, None)
}

fn plan_from(
    inputs: &[PathBuf],
    opts: &ConvertOptions,
    scan_dir: Option<&Path>,
    note: &mut dyn FnMut(&str),
    spill: Option<&Spill>,
) -> Result<Plan, ConvertError> {
    check_options(inputs, opts)?;
    let selection = opts.obs_selection();
    let sample = sample_flags(opts.gene_sort, inputs.len());
    // In a gene space each input's gene keys and names are interned as it is scanned: every identifier is held
    // once however many inputs name it.
    let interner = std::sync::Mutex::new(GeneInterner::new());
    // Per input: its scan, why its scan file was not used, and in a gene space its gene keys and names as ids of
    // the interner (names the same ids when they are the keys).
    type Loaded = (InputScan, Option<String>, Vec<u32>, Vec<u32>);
    let loaded: Vec<Loaded> = inputs
        .par_iter()
        .enumerate()
        .map(|(i, path)| {
            let (mut scan, why) = load_or_scan(scan_dir, i, path, sample[i], opts, spill)?;
            let (mut key_ids, mut name_ids) = (Vec::new(), Vec::new());
            if opts.genes.is_some() {
                let (keys, names) = (scan.keys.take().unwrap_or_default(), scan.names.take().unwrap_or_default());
                let mut table = interner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                key_ids = table.intern_all(&keys);
                name_ids = if names == keys { key_ids.clone() } else { table.intern_all(&names) };
            }
            Ok::<_, ConvertError>((scan, why, key_ids, name_ids))
        })
        .collect::<Result<_, _>>()?;
    let mut scanned = Vec::with_capacity(loaded.len());
    let (mut input_keys, mut input_names) = (Vec::with_capacity(loaded.len()), Vec::with_capacity(loaded.len()));
    for (s, why, keys, names) in loaded {
        if let Some(why) = why {
            note(&why);
        }
        scanned.push(s);
        input_keys.push(keys);
        input_names.push(names);
    }
    let mut interner = interner.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    let layout = match &opts.genes {
        None => same_genes(&scanned, &sample, opts)?,
        Some(space) => gene_space(&scanned, &input_keys, &input_names, &mut interner, &sample, space, opts)?,
    };
    let n_genes = layout.names.len() as u64;
    if n_genes == 0 {
        return Err(ConvertError::Inputs(format!("{} has no genes", scanned[0].path)));
    }
    let version = opts.format_version;
    if n_genes > version.max_genes() {
        return Err(ConvertError::Inputs(format!(
            "the inputs have {n_genes} genes (gene {} is the first beyond the limit); format version {} holds at most \
             {}: convert with format version 2",
            version.max_genes(),
            version.number(),
            version.max_genes()
        )));
    }
    let totals = layout.totals;
    let mut gene_order: Vec<u32> = (0..n_genes as u32).collect();
    if opts.gene_sort != GeneSort::Keep {
        // Stable: ties keep source order.
        gene_order.sort_by_key(|&g| std::cmp::Reverse(totals[g as usize]));
    }
    let var_names: Vec<String> = gene_order.iter().map(|&g| layout.names[g as usize].clone()).collect();
    if let Some(spill) = spill.filter(|_| layout.genes.is_some()) {
        // The tiles of this process place each input's genes as the plan did, without reading them again.
        let mut rank = vec![0u32; gene_order.len()];
        for (j, &g) in gene_order.iter().enumerate() {
            rank[g as usize] = j as u32;
        }
        for (i, columns) in layout.input_columns.iter().enumerate() {
            let placed = columns.iter().map(|&c| if c == NO_COLUMN { NO_COLUMN } else { rank[c as usize] }).collect();
            spill.keep_gene_columns(i, placed);
        }
    }
    let genes = layout.genes.map(|(space, keys)| PlanGenes {
        space,
        key: opts.gene_key.clone(),
        keys: gene_order.iter().map(|&g| keys[g as usize].clone()).collect(),
    });
    let n_cells: u64 = scanned.iter().map(|s| s.n_cells).sum();
    if n_cells == 0 {
        let paths: Vec<&str> = scanned.iter().map(|s| s.path.as_str()).collect();
        return Err(ConvertError::Inputs(format!("no cells in {}: nothing to convert", list_paths(&paths))));
    }
    let obs = if opts.write_obs {
        let inputs: Vec<(&str, Option<&InputSummary>)> =
            scanned.iter().map(|s| (s.path.as_str(), s.obs.as_ref())).collect();
        build_schema(&inputs, selection, opts.max_categories)?.map(|schema| {
            let schema = if opts.format_version == Version::V1 { schema.without_order() } else { schema };
            PlanObs { tiles_per_file: opts.obs_tiles_per_file, schema: schema.to_json() }
        })
    } else {
        None
    };
    let mut plan = Plan {
        format: PLAN_FORMAT.into(),
        version: 1,
        output: absolute_location(&opts.output),
        tile_size: opts.tile_size,
        zstd_level: opts.preset.base_level().unwrap_or(opts.level),
        zstd_preset: opts.preset.as_str().into(),
        n_chunks: opts.n_chunks,
        matrix: opts.matrix.to_string(),
        feature_type: opts.feature_type.clone(),
        gene_sort: match opts.gene_sort {
            GeneSort::AllInputs => "all".into(),
            GeneSort::Sample(n) => format!("sample:{n}"),
            GeneSort::Keep => "keep".into(),
        },
        inputs: scanned
            .into_iter()
            .map(|s| PlanInput {
                keys_sha256: genes.is_some().then(|| s.keys_sha256.clone()),
                path: absolute_location(&s.path),
                kind: s.kind,
                n_cells: s.n_cells,
                size_bytes: s.size_bytes,
                files: s.stamp,
            })
            .collect(),
        n_genes,
        n_cells,
        n_tiles: n_cells.div_ceil(opts.tile_size) as usize,
        var_names,
        gene_order,
        obs,
        format_version: opts.format_version.number(),
        write_var: opts.write_var,
        genes,
        lead_cells: 0,
        fingerprint: String::new(),
    };
    plan.fingerprint = plan.compute_fingerprint();
    Ok(plan)
}
