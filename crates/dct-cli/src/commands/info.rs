//! `deltacells info DATASET [--json]`.

use dct_dataset::{Dataset, ReadOptions, StoreOptions, dataset_facts};
use serde_json::json;

use crate::output::{human_bytes, per_nonzero, print_json};

/// Arguments of `info`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Dataset location: a path or a `file://`, `s3://`, `gs://`, `az://` or `https://` URL.
    dataset: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `info`.
pub fn run(args: Args, store: &StoreOptions) -> anyhow::Result<u8> {
    let ds = Dataset::open(&args.dataset, ReadOptions { store: store.clone(), ..ReadOptions::default() })?;
    let m = ds.manifest();
    let bytes: u64 = m.tile_bytes.iter().sum();
    let nnz = m.nnz();
    let kb_per_cell = bytes as f64 / 1000.0 / m.n_cells.max(1) as f64;
    let obs_bytes: u64 = m.obs.shard_bytes.iter().sum();
    // The manifest alone says nothing of an append that stopped before writing it.
    let journal = ds.append_journal()?;
    if args.json {
        let mut facts = dataset_facts(m);
        facts["dataset"] = json!(args.dataset);
        if let Some(url) = &journal {
            facts["append_journal"] = json!(url);
        }
        print_json(&facts)?;
        return Ok(0);
    }
    let opt = |x: Option<i64>| x.map_or("-".to_string(), |v| v.to_string());
    outln!("dataset   {}", args.dataset);
    outln!("format    deltacells-dataset version {}", m.version);
    outln!("shape     {} cells x {} genes", m.n_cells, m.n_genes);
    outln!("tiles     {} of {} cells (last {})", m.n_tiles(), m.tile_size, m.tile_cells.last().copied().unwrap_or(0));
    outln!("nonzeros  {nnz} ({:.1} per cell)", nnz as f64 / m.n_cells.max(1) as f64);
    outln!("size      {} in tiles: {}, {kb_per_cell:.2} kB per cell", human_bytes(bytes), per_nonzero(bytes, nnz));
    let chunks = m.n_chunks.map_or("-".to_string(), |c| c.to_string());
    outln!("encoder   {chunks} chunks per tile, zstd level {}", opt(m.zstd_level));
    let yes = |b: bool| if b { "yes" } else { "no" };
    outln!(
        "side      gene_order.npy {}, var_names.txt {}, var.parquet {}",
        yes(m.has_gene_order),
        yes(m.has_var_names),
        yes(m.has_var_table)
    );
    if m.has_obs {
        outln!(
            "obs       {} shards of {} tiles, {}, fingerprint {}",
            m.obs.shard_bytes.len(),
            m.obs.tiles_per_file,
            human_bytes(obs_bytes),
            m.obs.fingerprint
        );
    } else {
        outln!("obs       none");
    }
    if let Some(url) = journal {
        outln!(
            "append    under way, or stopped before its manifest ({url}): the figures above are from before it; if \
             no append is running, run the same append again to complete it"
        );
    }
    Ok(0)
}
