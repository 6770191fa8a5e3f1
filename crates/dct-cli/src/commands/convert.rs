//! `deltacells convert`: one-shot, or as a plan, parts and a finalize step for batch schedulers.

use std::path::PathBuf;

use anyhow::Context;
use dct_codec::Preset;
use dct_convert::{ConvertOptions, GeneSort, Plan, Progress, RunOptions, Stage, resolve_inputs};
use dct_dataset::StoreOptions;
use dct_input::H5adMatrix;

use crate::output::{human_bytes, per_nonzero, progress};

/// Arguments of `convert`.
///
/// One machine: `deltacells convert IN... --output URL`. Many machines: `deltacells convert IN... --output URL
/// --plan P.json` once, then `deltacells convert --plan P.json --part I/N` for I = 0..N-1 (e.g. a Slurm array
/// with `--part $SLURM_ARRAY_TASK_ID/N`, a Kubernetes indexed Job with `$JOB_COMPLETION_INDEX`), then
/// `deltacells convert --plan P.json --finalize`. Re-running any of them is safe: complete tiles are kept.
///
/// The plan's first pass (cells, gene lists and gene totals of every input) can be split too: `deltacells convert
/// IN... --plan P.json --scan-part I/N` for I = 0..N-1 scans share I of the inputs and writes one scan file per
/// input into `P.json.d/`; the plain `deltacells convert IN... --output URL --plan P.json` then reuses every valid
/// scan file (same inputs, unchanged, same options) and scans only the rest, giving the same plan.
///
/// Obs (per-cell metadata: the cell names as `obs_names` and the obs columns of `.h5ad` inputs, with one global
/// vocabulary per categorical column) and `var.parquet` are written by the finalize step: obs is small next to X,
/// and finalize reads one input's obs at a time.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Input files or folders (`.h5ad`, 10x `.h5`, 10x Matrix Market folders) or glob patterns (`**` for any depth
    /// of folders); each is read once, in natural sort order (see `dct_convert::resolve_inputs`).
    inputs: Vec<String>,
    /// More inputs or patterns (the original package's spelling of the inputs).
    #[arg(long = "h5ad-glob", num_args = 1.., hide = true)]
    h5ad_glob: Vec<String>,
    /// Output dataset: a local path or an `s3://`, `gs://`, `az://`, `https://` URL.
    #[arg(long)]
    output: Option<String>,
    /// Cells per tile.
    #[arg(long, default_value_t = 10_000)]
    tile_size: u64,
    /// zstd level (default 19: smallest, and decodes fastest; 3 is fast to write).
    #[arg(long, allow_negative_numbers = true)]
    level: Option<i32>,
    /// How zstd's parameters follow from --level. `tuned` (the default): the level's parameters with the shortest
    /// match chosen for tile planes at levels 16-22; at level 19, 1.5% smaller than `plain` in about 0.8x its time.
    /// `plain`: the level's own parameters (`zstd -19`, what the original implementation writes). `fast`: 0.5%
    /// smaller than plain level 19 in 0.42-0.45x its time (ignores --level). All decode alike (README's table).
    #[arg(long, default_value = "tuned", value_parser = parse_preset)]
    preset: Preset,
    /// Chunks per tile (units of parallel decoding).
    #[arg(long, default_value_t = 8)]
    chunks: usize,
    /// Format version of the tiles and manifest: 2 (the default), or 1 for readers that know only version 1
    /// (at most 65,536 genes and counts of at most 65,535; larger ones are refused, naming the cell and gene).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=2))]
    format_version: u32,
    /// Compression threads (default: every core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Replace whatever the output holds.
    #[arg(long)]
    overwrite: bool,
    /// Read this layer of `.h5ad` inputs instead of X.
    #[arg(long, conflicts_with = "raw")]
    layer: Option<String>,
    /// Read `raw/X` of `.h5ad` inputs.
    #[arg(long)]
    raw: bool,
    /// Feature type kept from 10x inputs.
    #[arg(long, default_value = "Gene Expression", conflicts_with = "all_features")]
    feature_type: String,
    /// Keep every feature type of 10x inputs.
    #[arg(long)]
    all_features: bool,
    /// Order genes by total counts over an evenly spread sample of this many inputs (faster first pass).
    #[arg(long, conflicts_with = "no_sort_genes")]
    sort_genes_max_files: Option<usize>,
    /// Keep the source gene order (no first pass over the data).
    #[arg(long)]
    no_sort_genes: bool,
    /// Convert the inputs in the order given (each pattern's matches still in natural order) instead of sorting
    /// them all naturally (`part2` before `part10`).
    #[arg(long)]
    no_sort_files: bool,
    /// Write only these obs columns, in this order (comma separated; `obs_names` is the cell names). Default: the
    /// cell names and every obs column of `.h5ad` inputs.
    #[arg(long, value_delimiter = ',', conflicts_with = "no_obs")]
    obs_columns: Option<Vec<String>>,
    /// Leave these obs columns out (comma separated), e.g. datetime or nested columns the converter cannot store.
    #[arg(long, value_delimiter = ',', conflicts_with = "no_obs")]
    obs_exclude: Vec<String>,
    /// Write no obs (per-cell metadata) at all.
    #[arg(long)]
    no_obs: bool,
    /// Combine inputs that list different genes: `union`, `intersection`, or FILE, a vocabulary of one gene a
    /// line (the column order before sorting by totals, or kept with --no-sort-genes). A gene an input lacks is
    /// zero for its cells; genes outside a vocabulary are dropped. Without it, inputs must list the same genes.
    #[arg(long, value_name = "union|intersection|FILE")]
    genes: Option<String>,
    /// With --genes: match genes across inputs by this column of each `.h5ad` input's gene table (e.g.
    /// `gene_ids`) instead of their names; 10x inputs match by their feature IDs.
    #[arg(long, requires = "genes", value_name = "COLUMN")]
    gene_key: Option<String>,
    /// Write no gene table (`var.parquet`); the gene names (`var_names.txt`) are written either way.
    #[arg(long)]
    no_var: bool,
    /// Tiles (row groups) per obs shard.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    obs_tiles_per_file: u64,
    /// Categorical obs columns with more categories than this over all inputs are stored as strings.
    #[arg(long, default_value_t = 20_000)]
    max_categories: usize,
    /// The plan file: written when inputs are given, read with --part or --finalize.
    #[arg(long)]
    plan: Option<PathBuf>,
    /// Write only part I of N (0-based) of the plan's tiles.
    #[arg(long, requires = "plan", conflicts_with = "finalize")]
    part: Option<String>,
    /// Scan only part I of N (0-based) of the inputs (the plan's first pass: cells, gene lists, gene totals, obs
    /// summary) and write one scan file per input into PLAN.d/ (e.g. plan.json.d/scan-7.json); the plan is then
    /// made with the same inputs and options and `--plan PLAN`, reusing every valid scan file. Give the same
    /// gene-sort and obs options as for the plan.
    #[arg(long, requires = "plan", conflicts_with_all = ["part", "finalize"])]
    scan_part: Option<String>,
    /// Check every tile of the plan and write the manifest.
    #[arg(long, requires = "plan")]
    finalize: bool,
    /// One-machine conversion: where to keep the copy of the inputs the plan decodes, so that the tiles read it
    /// back instead of decoding the inputs again (default: the temporary directory; removed at the end). On a
    /// memory-backed /tmp, point this at a disk.
    #[arg(long, conflicts_with = "plan")]
    spill_dir: Option<PathBuf>,
    /// Most megabytes (10^6 bytes) that copy may take, at 8 bytes per nonzero; inputs beyond it are decoded twice.
    /// 0 turns it off. At most a quarter of the free space of the spill directory is used.
    #[arg(long, conflicts_with = "plan")]
    spill_max_mb: Option<u64>,
}

fn parse_part(s: &str) -> anyhow::Result<(usize, usize)> {
    parse_share(s, "--part")
}

fn parse_share(s: &str, flag: &str) -> anyhow::Result<(usize, usize)> {
    let Some((i, n)) = s.split_once('/') else { usage!("{flag} takes I/N, e.g. 3/100") };
    let (Ok(i), Ok(n)) = (i.trim().parse::<usize>(), n.trim().parse::<usize>()) else {
        usage!("{flag} {s}: I and N are whole numbers, e.g. 3/100")
    };
    if n == 0 || i >= n {
        usage!("{flag} {s}: parts are numbered 0..N-1");
    }
    Ok((i, n))
}

fn reporter(total_tiles: usize, what: &str) -> impl FnMut(&Progress) {
    let bar = progress(total_tiles as u64, what);
    move |p: &Progress| {
        bar.set_length(p.tiles_total as u64);
        bar.set_position(p.tiles_done as u64);
        let rate = if p.seconds > 0.0 { p.input_bytes as f64 / p.seconds } else { 0.0 };
        bar.set_message(format!(
            "{what}: input {}, {} cells, {}/s",
            p.input + 1,
            p.cells_written,
            human_bytes(rate as u64)
        ));
        if p.tiles_done == p.tiles_total {
            bar.finish_and_clear();
        }
    }
}

/// Runs `convert`.
pub fn run(mut args: Args, store: &StoreOptions) -> anyhow::Result<u8> {
    args.inputs.append(&mut args.h5ad_glob);
    let mut run = RunOptions { threads: args.threads, store: store.clone(), ..RunOptions::default() };
    run.spill.dir = args.spill_dir.clone();
    if let Some(mb) = args.spill_max_mb {
        run.spill.max_bytes = mb.saturating_mul(1_000_000);
    }
    if !args.inputs.is_empty() && (args.part.is_some() || args.finalize) {
        usage!(
            "--part and --finalize read the plan file and take no inputs (inputs with --plan make a new plan): give \
             `--plan PLAN --part I/N` or `--plan PLAN --finalize` alone"
        );
    }
    if let Some(plan_path) = &args.plan
        && args.inputs.is_empty()
    {
        if let Some(output) = &args.output {
            usage!("--output {output} with --plan and no inputs: the plan names its output; give no --output");
        }
        let plan = Plan::load(plan_path)?;
        if args.finalize {
            let m = dct_convert::finalize(&plan, &run)?;
            outln!("finalized {}: {} cells in {} tiles", plan.output, m.n_cells, m.n_tiles());
            return Ok(0);
        }
        let Some(part) = args.part.as_deref() else {
            usage!("with --plan and no inputs, give --part I/N or --finalize")
        };
        let (i, n) = parse_part(part)?;
        let tiles = plan.part_tiles(i, n);
        let report = dct_convert::run_part(&plan, i, n, &run, reporter(tiles.len(), &format!("part {i}/{n}")))?;
        outln!(
            "part {i}/{n} of {}: tiles {}..{}: {} written, {} already complete",
            plan.output,
            report.tiles.start,
            report.tiles.end,
            report.written,
            report.skipped
        );
        return Ok(0);
    }
    if args.inputs.is_empty() {
        usage!("give input files, or --plan with --part or --finalize");
    }
    // A scan part needs no output; the plan made later names it.
    let output = match (&args.output, &args.scan_part) {
        (Some(o), _) => o.clone(),
        (None, Some(_)) => String::new(),
        (None, None) => usage!("--output is required with inputs"),
    };
    if let (Preset::Fast, Some(level)) = (args.preset, args.level) {
        usage!("--preset fast sets its own parameters and ignores --level {level}: give one of them");
    }
    let inputs: Vec<PathBuf> =
        resolve_inputs(&args.inputs, !args.no_sort_files)?.into_iter().map(PathBuf::from).collect();
    let options = ConvertOptions {
        output,
        tile_size: args.tile_size,
        level: args.level.unwrap_or(19),
        preset: args.preset,
        n_chunks: args.chunks,
        matrix: matrix_of(args.layer.as_deref(), args.raw),
        feature_type: (!args.all_features).then(|| args.feature_type.clone()),
        gene_sort: match (args.no_sort_genes, args.sort_genes_max_files) {
            (true, _) => GeneSort::Keep,
            (false, Some(n)) => GeneSort::Sample(n),
            (false, None) => GeneSort::AllInputs,
        },
        write_obs: !args.no_obs,
        write_var: !args.no_var,
        obs_columns: args.obs_columns.clone(),
        obs_exclude: args.obs_exclude.clone(),
        obs_tiles_per_file: args.obs_tiles_per_file,
        max_categories: args.max_categories,
        format_version: dct_format::Version::from_number(args.format_version).context("--format-version is 1 or 2")?,
        genes: args.genes.as_deref().map(super::corpus::gene_space).transpose()?,
        gene_key: args.gene_key.clone(),
    };
    if let (Some(share), Some(plan_path)) = (&args.scan_part, &args.plan) {
        let (i, n) = parse_share(share, "--scan-part")?;
        let dir = dct_convert::scan_dir(plan_path);
        let report = dct_convert::scan_inputs_part(&inputs, &options, &dir, i, n)?;
        for note in &report.notes {
            errln!("note: {note}");
        }
        outln!(
            "scan part {i}/{n}: inputs {}..{} of {}: {} scanned, {} already scanned, in {}",
            report.inputs.start,
            report.inputs.end,
            inputs.len(),
            report.scanned,
            report.kept,
            dir.display()
        );
        return Ok(0);
    }
    errln!("planning: {} input(s)", inputs.len());
    if let Some(plan_path) = &args.plan {
        let dir = dct_convert::scan_dir(plan_path);
        let plan = dct_convert::make_plan_with_scans(&inputs, &options, &dir, |note| errln!("note: {note}"))?;
        if args.overwrite {
            // What the output held (another dataset, another plan's tiles) goes now, so the plan's parts can write.
            dct_convert::clear_output(&plan.output, store)?;
        }
        plan.save(plan_path)?;
        outln!(
            "plan {}: {} cells x {} genes from {} input(s) -> {} tiles of {} at {}; run `deltacells convert --plan {} \
             --part I/N` for I in 0..N, then `--finalize`",
            plan_path.display(),
            plan.n_cells,
            plan.n_genes,
            plan.inputs.len(),
            plan.n_tiles,
            plan.tile_size,
            plan.output,
            plan_path.display()
        );
        return Ok(0);
    }
    // Only a one-machine conversion keeps the decoded inputs for its tiles (the spill).
    let mut tiles_progress = None;
    let report = dct_convert::convert_with(&inputs, &options, &run, args.overwrite, |stage| match stage {
        Stage::Planned { plan, held, took } => {
            let secs = took.as_secs_f64();
            if held.inputs > 0 {
                errln!(
                    "planned in {secs:.1} s; holding {} of {} input(s) decoded for the tiles ({})",
                    held.inputs,
                    plan.inputs.len(),
                    human_bytes(held.bytes)
                );
            } else {
                errln!("planned in {secs:.1} s");
            }
            tiles_progress = Some(reporter(plan.n_tiles, "converting"));
        }
        Stage::Tiles(p) => {
            if let Some(report) = tiles_progress.as_mut() {
                report(p);
            }
        }
        Stage::Finalizing { plan } => {
            if plan.obs.is_some() {
                errln!("finalizing: checking tiles, writing var.parquet and the obs shards");
            }
        }
    })?;
    if report.spill_dropped > 0 {
        let dropped = report.spill_dropped;
        errln!("warning: {dropped} kept input(s) could not be read back and were decoded again (same tiles)");
    }
    let (m, plan, secs) = (&report.manifest, &report.plan, report.took.as_secs_f64());
    let bytes: u64 = m.tile_bytes.iter().sum();
    let input_bytes: u64 = plan.inputs.iter().map(|i| i.size_bytes).sum();
    outln!(
        "converted {} cells x {} genes into {} ({} tiles, {} written, {} kept): {} in tiles, {}; {:.1} s in all \
         (plan included), {:.0} cells/s, {}/s of input",
        m.n_cells,
        m.n_genes,
        plan.output,
        m.n_tiles(),
        report.tiles.written,
        report.tiles.skipped,
        human_bytes(bytes),
        per_nonzero(bytes, m.nnz()),
        secs,
        report.tiles.cells as f64 / secs,
        human_bytes((input_bytes as f64 / secs) as u64)
    );
    Ok(0)
}

/// `--preset NAME`.
/// The `.h5ad` matrix `--layer NAME` / `--raw` name (X without either).
pub(crate) fn matrix_of(layer: Option<&str>, raw: bool) -> H5adMatrix {
    match (layer, raw) {
        (Some(l), _) => H5adMatrix::Layer(l.to_string()),
        (None, true) => H5adMatrix::RawX,
        (None, false) => H5adMatrix::X,
    }
}

pub(crate) fn parse_preset(text: &str) -> Result<Preset, String> {
    text.parse()
}

#[cfg(test)]
mod tests {
    use super::parse_share;

    #[test]
    fn shares_are_i_of_n_and_errors_name_the_flag() {
        assert_eq!(parse_share("3/100", "--part").unwrap(), (3, 100));
        assert_eq!(parse_share(" 0 / 1 ", "--part").unwrap(), (0, 1));
        for (bad, says) in [("a/b", "whole numbers"), ("3", "takes I/N"), ("-1/6", "whole numbers"), ("6/6", "0..N-1")]
        {
            let err = format!("{:#}", parse_share(bad, "--part").unwrap_err());
            assert!(err.contains("--part") && err.contains(says), "{bad}: {err}");
        }
    }
}
