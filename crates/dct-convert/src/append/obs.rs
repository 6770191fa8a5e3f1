//! The obs of an append: the dataset's schema grown by the inputs' (new categories at the end of each vocabulary,
//! so existing codes keep their meaning; new columns at the end, missing for the old cells; numbers widened), and
//! the shards the new tiles join written again. Only the shard holding the dataset's last tile and the ones after
//! it are rewritten, unless the schema changed the stored form of every shard (a column added, codes or numbers
//! widened): then every shard is, and the report says why.

use std::sync::Arc;

use arrow_array::{Array, ArrayRef, new_null_array};
use bytes::Bytes;
use dct_dataset::Manifest;
use dct_format::objects::{ObsFields, n_obs_shards, obs_shard_path, obs_shard_tiles};
use dct_obs::{
    ColumnData, ColumnKind, ObsColumn, ObsSchema, ObsShardEncoder, ObsWriteOptions, TileObs, keeps_order,
    obs_fingerprint, promote, shard_tile_obs,
};

use crate::error::ConvertError;
use crate::finalize::read_input_obs;
use crate::io::Output;
use crate::obs::{SchemaPlan, TileCutter};
use crate::plan::Plan;

/// The dataset's obs schema grown by the inputs'.
#[derive(Debug, Clone)]
pub(crate) struct MergedObs {
    /// The schema of the dataset after the append.
    pub(crate) schema: ObsSchema,
    /// Why every shard is written again (empty: only those the new tiles join).
    pub(crate) rewrite_all: Vec<String>,
    /// Columns the inputs add.
    pub(crate) columns_added: Vec<String>,
    /// Categories added to each category column's vocabulary.
    pub(crate) categories_added: Vec<(String, usize)>,
}

fn kind_name(kind: ColumnKind) -> &'static str {
    match kind {
        ColumnKind::Category => "category",
        ColumnKind::Numeric => "numeric",
        ColumnKind::Bool => "bool",
        ColumnKind::String => "string",
    }
}

/// Grows `base` (the dataset's schema, `None` without obs) by `new` (the inputs' schema, made by the plan).
/// Conflicting kinds are refused naming the column; `based_on` names where `base` comes from ("the dataset") and
/// `inputs` the inputs, in that message.
pub(crate) fn merge_schemas(
    base: Option<&ObsSchema>,
    new: Option<&ObsSchema>,
    based_on: &str,
    inputs: &str,
) -> Result<Option<MergedObs>, ConvertError> {
    let (base, new) = match (base, new) {
        (None, None) => return Ok(None),
        (Some(b), None) => {
            let merged = MergedObs {
                schema: b.clone(),
                rewrite_all: Vec::new(),
                columns_added: Vec::new(),
                categories_added: Vec::new(),
            };
            return Ok(Some(merged));
        }
        (None, Some(n)) => {
            let merged = MergedObs {
                schema: n.clone(),
                rewrite_all: vec!["the dataset had no obs: its cells get missing values".into()],
                columns_added: n.columns.iter().map(|c| c.name.clone()).collect(),
                categories_added: Vec::new(),
            };
            return Ok(Some(merged));
        }
        (Some(b), Some(n)) => (b, n),
    };
    let conflict = |b: &ObsColumn, n: &ObsColumn| {
        ConvertError::Inputs(format!(
            "obs column {:?} holds {} values ({}) in {based_on} but {} values ({}) in {inputs}: a column keeps one \
             kind; rename or leave out the column in the inputs (or convert everything again)",
            b.name,
            kind_name(b.kind),
            b.arrow_type,
            kind_name(n.kind),
            n.arrow_type
        ))
    };
    let mut merged = MergedObs {
        schema: base.clone(),
        rewrite_all: Vec::new(),
        columns_added: Vec::new(),
        categories_added: Vec::new(),
    };
    let mut columns = Vec::with_capacity(base.columns.len() + new.columns.len());
    for b in &base.columns {
        let Some(n) = new.column(&b.name) else {
            columns.push(b.clone());
            continue;
        };
        let column = match (b.kind, n.kind) {
            (ColumnKind::Category, ColumnKind::Category) => {
                let mut cats = b.categories.clone().unwrap_or_default();
                let known: std::collections::HashSet<&String> = cats.iter().collect();
                let added: Vec<String> =
                    n.categories.iter().flatten().filter(|c| !known.contains(c)).cloned().collect();
                if !added.is_empty() {
                    merged.categories_added.push((b.name.clone(), added.len()));
                }
                // An ordered column stays ordered when the inputs keep its order (dct_obs::keeps_order); inputs with
                // no category (no value at all) say nothing of it.
                let theirs = n.categories.as_deref().unwrap_or_default();
                let ordered = b.ordered && (theirs.is_empty() || (n.ordered && keeps_order(&cats, theirs)));
                cats.extend(added);
                let mut column = ObsColumn::category(b.name.clone(), cats).with_ordered(ordered);
                if column.arrow_type.max_categories() < b.arrow_type.max_categories() {
                    column.arrow_type = b.arrow_type;
                }
                if column.arrow_type != b.arrow_type {
                    merged.rewrite_all.push(format!(
                        "the codes of {:?} widen from {} to {} ({} categories)",
                        b.name,
                        b.arrow_type,
                        column.arrow_type,
                        column.categories.as_ref().map_or(0, Vec::len)
                    ));
                }
                column
            }
            (ColumnKind::String, ColumnKind::String | ColumnKind::Category) => b.clone(),
            (ColumnKind::Bool, ColumnKind::Bool) => b.clone(),
            (ColumnKind::Numeric, ColumnKind::Numeric) => {
                let Some(t) = promote(b.arrow_type, n.arrow_type) else { return Err(conflict(b, n)) };
                if t != b.arrow_type {
                    merged.rewrite_all.push(format!("the values of {:?} widen from {} to {t}", b.name, b.arrow_type));
                }
                ObsColumn::plain(b.name.clone(), t)
            }
            _ => return Err(conflict(b, n)),
        };
        columns.push(column);
    }
    for n in &new.columns {
        if base.column(&n.name).is_none() {
            merged.columns_added.push(n.name.clone());
            merged.rewrite_all.push(format!("column {:?} is added (missing for the dataset's cells)", n.name));
            columns.push(n.clone());
        }
    }
    merged.schema =
        ObsSchema::new(columns).map_err(|e| ConvertError::Inputs(format!("the grown obs schema is invalid: {e}")))?;
    Ok(Some(merged))
}

/// Where the obs of an append go, and what it found of the dataset's.
pub(crate) struct ObsAppend<'a> {
    /// The dataset before the append.
    pub(crate) base: &'a Manifest,
    /// Its obs schema (`None` without obs).
    pub(crate) base_schema: Option<&'a ObsSchema>,
    /// The grown schema.
    pub(crate) merged: &'a MergedObs,
    /// Cells of every tile after the append.
    pub(crate) tile_cells: &'a [u64],
    /// The first tile the append changes (the partial last tile, or the first new one).
    pub(crate) first_changed: usize,
    /// Cells of the dataset's partial last tile that the first new tile joins (0: none).
    pub(crate) lead_cells: u64,
    /// zstd level of the shards.
    pub(crate) level: i32,
}

impl ObsAppend<'_> {
    /// The dataset's obs fields, if it has obs.
    fn base_obs(&self) -> Option<&ObsFields> {
        self.base.has_obs.then_some(&self.base.obs)
    }

    /// Tiles per shard.
    pub(crate) fn tiles_per_file(&self) -> u64 {
        self.base_obs().map_or(dct_format::objects::DEFAULT_OBS_TILES_PER_FILE, |o| o.tiles_per_file)
    }

    /// The first shard written again.
    pub(crate) fn first_shard(&self) -> usize {
        if self.merged.rewrite_all.is_empty() { self.first_changed / self.tiles_per_file() as usize } else { 0 }
    }

    /// The dataset's shards that are rewritten (they are copied into the staging folder before anything
    /// changes, and read from there).
    pub(crate) fn base_shards_rewritten(&self) -> std::ops::Range<usize> {
        let n_base = self.base_obs().map_or(0, |o| o.shard_bytes.len());
        self.first_shard().min(n_base)..n_base
    }

    /// Writes the shards from [`Self::first_shard`] on into `staging` (`obs/obs_NNNN.parquet`, reading the
    /// dataset's copies from `staging`'s `base-obs/`), the new tiles' obs read from the plan's inputs. Returns the
    /// manifest's obs fields after the append and the shards written.
    pub(crate) fn write(
        &self,
        staging: &Output,
        plan: &Plan,
        version: u32,
    ) -> Result<(ObsFields, String, Vec<usize>), ConvertError> {
        let k = self.tiles_per_file();
        let schema = &self.merged.schema;
        let context = || format!("writing the obs of {}", staging.store.root());
        let obs_err = |cause: dct_obs::ObsError| ConvertError::Obs { context: context(), cause: Box::new(cause) };
        let options = ObsWriteOptions { tiles_per_file: k, zstd_level: self.level.clamp(1, 22) };
        let first = self.first_shard();
        let mut encoder = ObsShardEncoder::new(schema.clone(), self.tile_cells, &options)
            .and_then(|e| e.starting_at(first * k as usize))
            .map_err(obs_err)?;
        let mut written: Vec<(usize, Bytes, String, u32)> = Vec::new();
        let mut keep = |shard: Option<dct_obs::EncodedShard>| -> Result<(), ConvertError> {
            if let Some(s) = shard {
                staging.put(&obs_shard_path(s.index), s.bytes.clone())?;
                written.push((s.index, s.bytes, s.sha256, s.footer_crc32));
            }
            Ok(())
        };

        // The dataset's tiles in the rewritten shards, from their copies; the partial last tile's obs is kept to
        // join the first new tile's.
        let n_base_tiles = self.base.tile_cells.len();
        let mut seam_old: Option<TileObs> = None;
        let base_k = self.base_obs().map_or(k, |o| o.tiles_per_file);
        for s in self.base_shards_rewritten() {
            let tiles = obs_shard_tiles(n_base_tiles, base_k, s);
            let base_schema = self
                .base_schema
                .ok_or_else(|| ConvertError::Output("the dataset has obs shards but no obs schema".into()))?;
            let name = format!("base-{}", obs_shard_path(s));
            let file = staging.get(&name)?.ok_or_else(|| {
                ConvertError::Output(format!("{} is missing: run the same append again", staging.store.url(&name)))
            })?;
            let cells = &self.base.tile_cells[tiles.clone()];
            let obs = shard_tile_obs(file, base_schema, cells, &staging.store.url(&name)).map_err(obs_err)?;
            for (t, tile) in tiles.zip(obs) {
                if t < self.first_changed {
                    keep(encoder.push_tile(&tile).map_err(obs_err)?)?;
                } else {
                    seam_old = Some(tile);
                }
            }
        }
        if self.base_schema.is_none() {
            // A dataset without obs: its cells get missing values (a tile without columns).
            for _ in first * k as usize..self.first_changed {
                keep(encoder.push_tile(&TileObs::new()).map_err(obs_err)?)?;
            }
        }

        // The new cells' obs, cut into the plan's tiles; the first joins the partial last tile's.
        let schema_plan = SchemaPlan::new(schema.clone());
        let plan_cells: Vec<u64> = (0..plan.n_tiles)
            .map(|t| {
                let (a, b) = plan.tile_cells(t);
                b - a
            })
            .collect();
        let mut cutter = TileCutter::new(&schema_plan, &plan_cells);
        for i in 0..plan.inputs.len() {
            let input_obs = read_input_obs(plan, &schema_plan, i)?;
            cutter.push(&input_obs, |t, tile| {
                let tile = if t == 0 && self.lead_cells > 0 {
                    join_tiles(schema, seam_old.take(), self.lead_cells as usize, tile, plan_cells[0] as usize)?
                } else {
                    tile
                };
                keep(encoder.push_tile(&tile).map_err(obs_err)?)
            })?;
        }
        cutter.finish()?;
        if !encoder.is_complete() {
            return Err(ConvertError::Output("the append's obs did not fill every tile".into()));
        }

        // The manifest's fields: the shards kept as they were, then the ones written.
        let base_fields = self.base_obs();
        let n_shards = n_obs_shards(self.tile_cells.len(), k);
        let mut shard_bytes = Vec::with_capacity(n_shards);
        let mut shard_sha256 = Vec::with_capacity(n_shards);
        let mut footer: Option<Vec<u32>> = (version >= 2).then(Vec::new);
        for s in 0..first {
            let f = base_fields
                .ok_or_else(|| ConvertError::Output("the dataset's obs shards have no manifest fields".into()))?;
            shard_bytes.push(f.shard_bytes[s]);
            shard_sha256.push(f.shard_sha256[s].clone());
            match f.shard_footer_crc32.as_ref() {
                Some(crc) if footer.is_some() => footer.as_mut().expect("checked").push(crc[s]),
                _ => footer = None,
            }
        }
        for (s, (index, bytes, sha, crc)) in written.iter().enumerate() {
            debug_assert_eq!(*index, first + s);
            shard_bytes.push(bytes.len() as u64);
            shard_sha256.push(sha.clone());
            if let Some(f) = footer.as_mut() {
                f.push(*crc);
            }
        }
        let schema_json = schema.to_json();
        let fields = ObsFields {
            tiles_per_file: k,
            fingerprint: obs_fingerprint(&schema_json, self.tile_cells, &shard_sha256),
            shard_bytes,
            shard_sha256,
            shard_footer_crc32: footer,
        };
        Ok((fields, schema_json, written.iter().map(|w| w.0).collect()))
    }
}

/// The obs of the joined tile: `lead` cells of the dataset's partial last tile (`old`; `None` without obs),
/// then the first new tile's (`new`, already in `schema`'s stored form).
fn join_tiles(
    schema: &ObsSchema,
    old: Option<TileObs>,
    lead: usize,
    new: TileObs,
    n_after: usize,
) -> Result<TileObs, ConvertError> {
    let mut out = TileObs::new();
    for column in &schema.columns {
        let before = old.as_ref().and_then(|o| o.get(&column.name));
        let after = new.get(&column.name);
        let data = match column.kind {
            ColumnKind::Category => {
                // The grown vocabulary starts with the dataset's, so the old codes keep their meaning.
                let categories: Arc<[String]> = Arc::from(column.categories.clone().unwrap_or_default());
                let mut codes = Vec::with_capacity(lead + n_after);
                match before {
                    Some(ColumnData::Category(c)) => codes.extend_from_slice(&c.codes),
                    _ => codes.extend(std::iter::repeat_n(-1, lead)),
                }
                match after {
                    Some(ColumnData::Category(c)) => codes.extend_from_slice(&c.codes),
                    _ => codes.extend(std::iter::repeat_n(-1, n_after)),
                }
                ColumnData::category(codes, categories)
            }
            _ => {
                let t = column.arrow_type.data_type();
                let part = |d: Option<&ColumnData>, n: usize| -> Result<ArrayRef, ConvertError> {
                    match d {
                        Some(ColumnData::Array(a)) => arrow_cast::cast(a, &t).map_err(|e| {
                            ConvertError::Inputs(format!("obs column {:?}: joining the last tile: {e}", column.name))
                        }),
                        _ => Ok(new_null_array(&t, n)),
                    }
                };
                let (a, b) = (part(before, lead)?, part(after, n_after)?);
                let joined = arrow_select::concat::concat(&[a.as_ref() as &dyn Array, b.as_ref()]).map_err(|e| {
                    ConvertError::Inputs(format!("obs column {:?}: joining the last tile: {e}", column.name))
                })?;
                ColumnData::Array(joined)
            }
        };
        out.push(column.name.clone(), data);
    }
    Ok(out)
}
