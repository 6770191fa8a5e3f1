//! Where the output stands for a plan: its tiles checked one by one, the plan marker that ties it to one
//! conversion, the dataset a plan finished, and clearing it for `--overwrite`.

use dct_dataset::manifest::{GENE_ORDER_NAME, MANIFEST_NAME, VAR_NAMES_NAME, VAR_TABLE_NAME, tile_path};
use dct_dataset::{Manifest, StoreOptions};
use dct_format::{TileLayout, verify_crc};

use bytes::Bytes;

use crate::error::ConvertError;
use crate::io::Output;
use crate::plan::{PLAN_MARKER, Plan, RECEIPTS_DIR};

/// A tile already in the output, checked.
pub(crate) enum TileState {
    Valid { nnz: u64, bytes: u64 },
    Missing,
    Invalid(String),
}

pub(crate) fn check_tile(out: &Output, plan: &Plan, t: usize) -> Result<TileState, ConvertError> {
    let Some(blob) = out.get(&tile_path(t))? else { return Ok(TileState::Missing) };
    let layout = match TileLayout::parse(&blob) {
        Ok(l) => l,
        Err(e) => return Ok(TileState::Invalid(e.to_string())),
    };
    let h = *layout.header();
    if let Err(e) = verify_crc(&blob, &h) {
        return Ok(TileState::Invalid(e.to_string()));
    }
    let (first, end) = plan.tile_cells(t);
    if out.get(&plan.receipt_path(t))?.as_deref() != Some(&receipt(&blob)[..]) {
        return Ok(TileState::Invalid(
            "it was not written by this conversion (no receipt of this plan for these bytes)".into(),
        ));
    }
    if h.version.number() != plan.format_version || h.n_cells != end - first || u64::from(h.n_genes) != plan.n_genes {
        return Ok(TileState::Invalid(format!(
            "holds {} cells x {} genes (version {}); the plan needs {} x {} (version {})",
            h.n_cells,
            h.n_genes,
            h.version.number(),
            end - first,
            plan.n_genes,
            plan.format_version
        )));
    }
    Ok(TileState::Valid { nnz: h.nnz, bytes: blob.len() as u64 })
}

/// What a part records for a tile it wrote: the tile's CRC-32 and length (see [`crate::plan::RECEIPTS_DIR`]).
pub(crate) fn receipt(blob: &[u8]) -> Bytes {
    let crc = dct_format::TileHeader::parse(blob).map_or(0, |h| h.crc32);
    Bytes::from(format!("crc32 {crc:08x} bytes {}\n", blob.len()))
}

/// Where an output stands for a plan (see [`claim_output`]).
pub(crate) enum Claim {
    /// The plan's conversion is under way there (its marker is there): tiles may be written.
    Open,
    /// The plan's dataset is finished there: its manifest (this one) names the plan and the marker is gone.
    Finished(Box<Manifest>),
}

/// Ties the output to `plan`: writes the plan marker, checks that the one there is this plan's, or finds the
/// dataset this plan finished (the marker is removed once the manifest is written; the manifest's
/// `metadata.convert_plan` names the plan).
pub(crate) fn claim_output(out: &Output, plan: &Plan) -> Result<Claim, ConvertError> {
    match out.get(PLAN_MARKER)? {
        Some(bytes) => {
            let theirs = Plan::from_json(&bytes, &out.store.url(PLAN_MARKER))?;
            if theirs.fingerprint != plan.fingerprint {
                return Err(ConvertError::Output(format!(
                    "{} belongs to another conversion (plan {} there, {} here): use another output, or convert with \
                     --overwrite to replace it",
                    out.store.root(),
                    theirs.fingerprint,
                    plan.fingerprint
                )));
            }
            Ok(Claim::Open)
        }
        None => {
            if let Some(manifest) = finished_dataset(out, plan)? {
                return Ok(Claim::Finished(Box::new(manifest)));
            }
            // Created only if still absent: of two conversions starting at once, one takes the output and the
            // other finds its marker.
            let created = out.block_on(out.store.put_if_absent(PLAN_MARKER, Bytes::from(plan.to_json())))??;
            if created { Ok(Claim::Open) } else { claim_output(out, plan) }
        }
    }
}

/// The manifest of the dataset `plan` finished at the output, `None` if there is no manifest; an error if the
/// manifest there is another dataset's.
pub(crate) fn finished_dataset(out: &Output, plan: &Plan) -> Result<Option<Manifest>, ConvertError> {
    let Some(bytes) = out.get(MANIFEST_NAME)? else { return Ok(None) };
    match Manifest::from_json(&bytes) {
        Ok(m) if m.metadata.get("convert_plan").and_then(|v| v.as_str()) == Some(plan.fingerprint.as_str()) => {
            Ok(Some(m))
        }
        _ => Err(ConvertError::Output(format!(
            "{} already holds a dataset: use another output, or convert with --overwrite to replace it",
            out.store.root()
        ))),
    }
}

/// Removes a previous dataset or conversion from the output: the manifest first (so it never looks complete),
/// then the plan marker, tiles, side files and obs (`obs/`).
pub fn clear_output(url: &str, store: &StoreOptions) -> Result<(), ConvertError> {
    let out = Output::open(url, store)?;
    out.delete(MANIFEST_NAME)?;
    out.delete(PLAN_MARKER)?;
    out.delete_prefix(RECEIPTS_DIR)?;
    out.delete_prefix("tiles")?;
    for rel in [GENE_ORDER_NAME, VAR_NAMES_NAME, VAR_TABLE_NAME] {
        out.delete(rel)?;
    }
    out.delete_prefix("obs")?;
    Ok(())
}
