//! `deltacells inspect-tile FILE [--decode] [--no-crc] [--json]`.

use std::path::PathBuf;

use anyhow::Context;
use dct_codec::{DecodeOptions, Decoder, inspect};
use serde_json::json;

use crate::output::{human_bytes, print_json};

/// Arguments of `inspect-tile`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The tile file (`tiles/tile_NNNNNN.dct`).
    file: PathBuf,
    /// Also decode every chunk; exit 1 with the first error found.
    #[arg(long)]
    decode: bool,
    /// Skip the CRC-32 check (structure and data rules are still checked).
    #[arg(long)]
    no_crc: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Runs `inspect-tile`.
pub fn run(args: Args) -> anyhow::Result<u8> {
    let blob = std::fs::read(&args.file).with_context(|| format!("cannot read {}", args.file.display()))?;
    let name = args.file.display();
    let summary = inspect(&blob).with_context(|| format!("{name}: invalid tile"))?;
    let h = summary.header;
    let crc_ok = dct_format::verify_crc(&blob, &h).is_ok();
    let decoded = if args.decode {
        let mut decoder = Decoder::new(DecodeOptions { verify_crc: !args.no_crc, threads: 1 });
        Some(decoder.decode::<u32>(&blob).map(|_| ()).map_err(|e| e.to_string()))
    } else {
        None
    };
    if args.json {
        let chunks: Vec<_> = summary
            .chunks
            .iter()
            .map(|c| {
                let e = c.entry;
                json!({
                    "cell_lo": e.cell_lo, "cell_hi": e.cell_hi, "nnz_lo": e.nnz_lo, "nnz_hi": e.nnz_hi,
                    "gaps_bytes": e.gaps.len, "vals_bytes": e.vals.len, "vexc_bytes": e.vexc.len, "gexc_bytes": e.gexc.len,
                    "value_exceptions": c.value_exceptions, "gap_exceptions": c.gap_exceptions,
                })
            })
            .collect();
        print_json(&json!({
            "file": name.to_string(), "version": h.version.number(), "n_cells": h.n_cells, "nnz": h.nnz,
            "n_genes": h.n_genes, "n_chunks": h.n_chunks, "indptr_off": h.indptr_off, "total_size": h.total_size,
            "crc32": format!("{:08x}", h.crc32), "crc_ok": crc_ok, "chunks": chunks,
            "decode": decoded.as_ref().map(|r| match r { Ok(()) => json!("ok"), Err(e) => json!(e) }),
        }))?;
    } else {
        outln!("tile {name}");
        outln!("  version {}   cells {}   genes {}   nonzeros {}", h.version.number(), h.n_cells, h.n_genes, h.nnz);
        outln!(
            "  size {} ({:.3} bytes per nonzero)   chunks {}   indptr at {}",
            human_bytes(h.total_size),
            h.total_size as f64 / h.nnz.max(1) as f64,
            h.n_chunks,
            h.indptr_off
        );
        outln!("  crc32 {:08x} ({})", h.crc32, if crc_ok { "ok" } else { "MISMATCH" });
        outln!(
            "  {:>5} {:>21} {:>23} {:>10} {:>10} {:>6} {:>6}",
            "chunk",
            "cells",
            "nonzeros",
            "gaps B",
            "vals B",
            "vexc",
            "gexc"
        );
        for (i, c) in summary.chunks.iter().enumerate() {
            let e = c.entry;
            outln!(
                "  {i:>5} {:>21} {:>23} {:>10} {:>10} {:>6} {:>6}",
                format!("{}..{}", e.cell_lo, e.cell_hi),
                format!("{}..{}", e.nnz_lo, e.nnz_hi),
                e.gaps.len,
                e.vals.len,
                c.value_exceptions,
                c.gap_exceptions
            );
        }
        if let Some(Ok(())) = &decoded {
            outln!("  decode: ok{}", if args.no_crc { " (CRC not checked)" } else { "" });
        }
    }
    match decoded {
        Some(Err(e)) => {
            errln!("error: {name}: {e}");
            Ok(1)
        }
        _ => Ok(0),
    }
}
