//! `deltacells obs info|localize|show DATASET`: a dataset's per-cell metadata.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use dct_dataset::dct_obs::arrow::array::cast::AsArray;
use dct_dataset::dct_obs::arrow::array::types::{
    Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use dct_dataset::dct_obs::arrow::array::{Array, RecordBatch};
use dct_dataset::dct_obs::arrow::schema::DataType;
use dct_dataset::dct_obs::{Obs, ObsOptions, category_labels, column_file_name};
use dct_dataset::{Dataset, ReadOptions, StoreOptions};
use serde_json::{Value, json};

use crate::cells::CellSelection;
use crate::output::{human_bytes, print_json};

/// Arguments of `obs`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Per column: kind, Arrow type, categories, bytes stored in the shards and per 100M cells.
    Info(InfoArgs),
    /// Fetch columns into the node-local cache (ranged reads of their column chunks only), once per node.
    Localize(LocalizeArgs),
    /// Print the values of some cells (categories as labels, missing values empty or null). Localizes the columns.
    Show(ShowArgs),
}

/// Where a dataset is and where its obs cache lives.
#[derive(Debug, clap::Args)]
struct Source {
    /// Dataset location: a path or a `file://`, `s3://`, `gs://`, `az://` or `https://` URL.
    dataset: String,
    /// Obs cache directory (default: $DELTACELLS_CACHE, $XDG_CACHE_HOME/deltacells or ~/.cache/deltacells).
    #[arg(long)]
    cache_dir: Option<PathBuf>,
}

impl Source {
    fn open(&self, store: &StoreOptions) -> anyhow::Result<(Dataset, Obs)> {
        let ds = Dataset::open(&self.dataset, ReadOptions { store: store.clone(), ..ReadOptions::default() })?;
        let obs = ds.obs(ObsOptions { cache_dir: self.cache_dir.clone(), ..ObsOptions::default() })?;
        Ok((ds, obs))
    }
}

#[derive(Debug, clap::Args)]
struct InfoArgs {
    #[command(flatten)]
    source: Source,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct LocalizeArgs {
    #[command(flatten)]
    source: Source,
    /// Columns to localize, comma separated.
    #[arg(long, value_delimiter = ',', required_unless_present = "all", conflicts_with = "all")]
    columns: Vec<String>,
    /// Localize every column.
    #[arg(long)]
    all: bool,
}

#[derive(Debug, clap::Args)]
struct ShowArgs {
    #[command(flatten)]
    source: Source,
    /// Cells: half-open ranges and single cells, e.g. `0:20,500` (default: the first 20).
    #[arg(long)]
    cells: Option<String>,
    /// Columns, comma separated (default: every column).
    #[arg(long, value_delimiter = ',')]
    columns: Vec<String>,
    /// Print CSV (header `cell,<columns>`; missing values empty).
    #[arg(long, conflicts_with = "json")]
    csv: bool,
    /// Print one JSON object mapping each column name to the list of its values (categories as labels, missing
    /// values as null).
    #[arg(long)]
    json: bool,
}

/// Runs `obs`.
pub fn run(args: Args, store: &StoreOptions) -> anyhow::Result<u8> {
    match args.command {
        Command::Info(a) => info(a, store),
        Command::Localize(a) => localize(a, store),
        Command::Show(a) => show(a, store),
    }
}

fn info(args: InfoArgs, store: &StoreOptions) -> anyhow::Result<u8> {
    let (ds, obs) = args.source.open(store)?;
    let sizes = obs.column_sizes_blocking()?;
    let n_cells = ds.n_cells();
    let per_100m = |bytes: u64| (bytes as f64 * 1e8 / n_cells.max(1) as f64).round() as u64;
    let m = ds.manifest();
    let shard_bytes: u64 = m.obs.shard_bytes.iter().sum();
    let stored: u64 = sizes.iter().map(|s| s.compressed_bytes).sum();
    let rows: Vec<Value> = obs
        .schema()
        .columns
        .iter()
        .zip(&sizes)
        .map(|(c, s)| {
            json!({
                "name": c.name, "kind": c.kind.as_str(), "arrow_type": c.arrow_type.as_str(),
                "categories": c.categories.as_ref().map(Vec::len),
                "stored_bytes": s.compressed_bytes, "uncompressed_bytes": s.uncompressed_bytes,
                "bytes_per_cell": s.compressed_bytes as f64 / n_cells.max(1) as f64,
                "bytes_per_100m_cells": per_100m(s.compressed_bytes),
            })
        })
        .collect();
    if args.json {
        print_json(&json!({
            "dataset": args.source.dataset, "n_cells": n_cells, "n_tiles": m.n_tiles(),
            "tiles_per_file": m.obs.tiles_per_file, "shards": m.obs.shard_bytes.len(), "shard_bytes": shard_bytes,
            "fingerprint": m.obs.fingerprint, "stored_bytes": stored, "bytes_per_100m_cells": per_100m(stored),
            "columns": rows,
        }))?;
        return Ok(0);
    }
    outln!("dataset      {}", args.source.dataset);
    outln!(
        "obs          {} columns, {} cells, {} shard(s) of up to {} tiles, {} ({} per 100M cells), fingerprint {}",
        rows.len(),
        n_cells,
        m.obs.shard_bytes.len(),
        m.obs.tiles_per_file,
        human_bytes(shard_bytes),
        human_bytes(per_100m(shard_bytes)),
        m.obs.fingerprint
    );
    let width = obs.schema().columns.iter().map(|c| c.name.len()).max().unwrap_or(0).max(6);
    outln!(
        "{:width$}  {:8}  {:6}  {:>10}  {:>10}  {:>14}",
        "column",
        "kind",
        "type",
        "categories",
        "stored",
        "per 100M cells"
    );
    for r in &rows {
        let cats = r["categories"].as_u64().map_or("-".to_string(), |n| n.to_string());
        outln!(
            "{:width$}  {:8}  {:6}  {:>10}  {:>10}  {:>14}",
            r["name"].as_str().unwrap_or_default(),
            r["kind"].as_str().unwrap_or_default(),
            r["arrow_type"].as_str().unwrap_or_default(),
            cats,
            human_bytes(r["stored_bytes"].as_u64().unwrap_or(0)),
            human_bytes(r["bytes_per_100m_cells"].as_u64().unwrap_or(0)),
        );
    }
    Ok(0)
}

fn localize(args: LocalizeArgs, store: &StoreOptions) -> anyhow::Result<u8> {
    let (_, obs) = args.source.open(store)?;
    let columns: Vec<String> = if args.all {
        obs.columns().iter().map(|(n, _)| n.to_string()).collect()
    } else {
        args.columns.iter().map(|c| c.trim().to_string()).filter(|c| !c.is_empty()).collect()
    };
    if columns.is_empty() {
        bail!("--columns names no column");
    }
    let refs: Vec<&str> = columns.iter().map(String::as_str).collect();
    let start = Instant::now();
    let report = obs.localize_blocking(&refs)?;
    let secs = start.elapsed().as_secs_f64();
    let cached: u64 = columns
        .iter()
        .filter_map(|c| std::fs::metadata(obs.cache_dir().join(column_file_name(c))).ok())
        .map(|m| m.len())
        .sum();
    outln!(
        "localized {} column(s) into {} in {secs:.2} s: {} fetched, {} already cached, {} rebuilt; {} on disk",
        columns.len(),
        obs.cache_dir().display(),
        report.fetched.len(),
        report.cached.len(),
        report.rebuilt.len(),
        human_bytes(cached)
    );
    Ok(0)
}

fn show(args: ShowArgs, store: &StoreOptions) -> anyhow::Result<u8> {
    let (ds, obs) = args.source.open(store)?;
    let n = ds.n_cells();
    let spec = args.cells.clone().unwrap_or_else(|| format!("0:{}", n.min(20)));
    let cells = CellSelection::parse(&spec, n)?.to_vec();
    let columns: Vec<String> = if args.columns.is_empty() {
        obs.columns().iter().map(|(c, _)| c.to_string()).collect()
    } else {
        args.columns.iter().map(|c| c.trim().to_string()).filter(|c| !c.is_empty()).collect()
    };
    let refs: Vec<&str> = columns.iter().map(String::as_str).collect();
    obs.localize_blocking(&refs)?;
    let batch = obs.take(&cells, &refs)?;
    let values = column_values(&obs, &batch, &refs)?;
    if args.json {
        // Column order kept (a JSON object with the columns as they were asked for).
        let mut out = String::from("{");
        for (i, (name, vals)) in refs.iter().zip(&values).enumerate() {
            out.push_str(if i == 0 { "\n  " } else { ",\n  " });
            out.push_str(&serde_json::to_string(name)?);
            out.push_str(": ");
            out.push_str(&serde_json::to_string(vals)?);
        }
        out.push_str(if refs.is_empty() { "}" } else { "\n}" });
        outln!("{out}");
        return Ok(0);
    }
    let text = |v: &Value| match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        v => v.to_string(),
    };
    if args.csv {
        let quote = |s: String| {
            if s.contains([',', '"', '\n', '\r']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s }
        };
        let header: Vec<String> = std::iter::once("cell".to_string()).chain(columns.iter().cloned()).collect();
        outln!("{}", header.into_iter().map(quote).collect::<Vec<_>>().join(","));
        for (r, cell) in cells.iter().enumerate() {
            let row = std::iter::once(cell.to_string()).chain(values.iter().map(|col| text(&col[r])));
            outln!("{}", row.map(quote).collect::<Vec<_>>().join(","));
        }
        return Ok(0);
    }
    let mut table: Vec<Vec<String>> =
        vec![std::iter::once("cell".to_string()).chain(columns.iter().cloned()).collect()];
    for (r, cell) in cells.iter().enumerate() {
        table.push(std::iter::once(cell.to_string()).chain(values.iter().map(|col| text(&col[r]))).collect());
    }
    let widths: Vec<usize> =
        (0..table[0].len()).map(|j| table.iter().map(|row| row[j].chars().count()).max().unwrap_or(0)).collect();
    for row in table {
        let line: Vec<String> = row.iter().zip(&widths).map(|(v, &w)| format!("{v:w$}")).collect();
        outln!("{}", line.join("  ").trim_end());
    }
    Ok(0)
}

/// Each column of `batch` as JSON values: category codes as their labels, missing values as null, float32 widened
/// exactly to double (as pyarrow's `to_pylist` does).
fn column_values(obs: &Obs, batch: &RecordBatch, names: &[&str]) -> anyhow::Result<Vec<Vec<Value>>> {
    let mut out = Vec::with_capacity(names.len());
    for (&name, array) in names.iter().zip(batch.columns()) {
        let a = array.as_ref();
        let vals: Vec<Value> = match obs.categories(name)? {
            Some(cats) => category_labels(a, cats)?.iter().map(|v| v.map_or(Value::Null, |s| json!(s))).collect(),
            None => plain_values(a).with_context(|| format!("obs column {name:?}"))?,
        };
        out.push(vals);
    }
    Ok(out)
}

fn plain_values(a: &dyn Array) -> anyhow::Result<Vec<Value>> {
    fn prim<T, F>(a: &dyn Array, f: F) -> Vec<Value>
    where
        T: dct_dataset::dct_obs::arrow::array::ArrowPrimitiveType,
        F: Fn(T::Native) -> Value,
    {
        a.as_primitive::<T>().iter().map(|v| v.map_or(Value::Null, &f)).collect()
    }
    let float = |x: f64| serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number);
    Ok(match a.data_type() {
        DataType::Utf8 => a.as_string::<i32>().iter().map(|v| v.map_or(Value::Null, |s| json!(s))).collect(),
        DataType::Boolean => a.as_boolean().iter().map(|v| v.map_or(Value::Null, |b| json!(b))).collect(),
        DataType::Int8 => prim::<Int8Type, _>(a, |x| json!(x)),
        DataType::Int16 => prim::<Int16Type, _>(a, |x| json!(x)),
        DataType::Int32 => prim::<Int32Type, _>(a, |x| json!(x)),
        DataType::Int64 => prim::<Int64Type, _>(a, |x| json!(x)),
        DataType::UInt8 => prim::<UInt8Type, _>(a, |x| json!(x)),
        DataType::UInt16 => prim::<UInt16Type, _>(a, |x| json!(x)),
        DataType::UInt32 => prim::<UInt32Type, _>(a, |x| json!(x)),
        DataType::UInt64 => prim::<UInt64Type, _>(a, |x| json!(x)),
        DataType::Float32 => prim::<Float32Type, _>(a, |x| float(f64::from(x))),
        DataType::Float64 => prim::<Float64Type, _>(a, float),
        t => bail!("type {t} is not an obs type"),
    })
}
