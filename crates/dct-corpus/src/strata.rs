//! Stratified epochs: cells drawn so that each category of an obs column has its share of an epoch.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int32Type;
use dct_dataset::dct_obs::ColumnKind;
use dct_dataset::{DatasetError, EpochUnit, TileStrata};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::corpus::Corpus;
use crate::error::CorpusError;
use crate::obs::CorpusObs;
use crate::weights::{draw, epoch_allowance, largest_remainder};

/// Cells whose category is read at once while grouping.
const BLOCK: u64 = 1 << 20;

/// A corpus's selected cells grouped by the categories of one obs column ([`Corpus::strata`]).
#[derive(Debug, Clone)]
pub struct Strata {
    /// The column.
    pub column: String,
    /// Its categories (the corpus's vocabulary of the column): stratum `s` is `categories[s]`.
    pub categories: Vec<String>,
    /// The cells of each corpus tile by stratum.
    pub tiles: Arc<TileStrata>,
}

impl Corpus {
    /// The corpus's selected cells grouped by their category of obs column `column` (stratum = the code in the
    /// corpus's vocabulary of the column, [`CorpusObsColumn::categories`](crate::CorpusObsColumn::categories)),
    /// per corpus tile, for [`Corpus::stratified_units`] and [`EpochPlan::stratified`](dct_dataset::EpochPlan).
    /// Cells whose value is missing belong to no stratum and are never drawn. The column must be a category column.
    /// Memory: 4 bytes per cell with a value (see [`TileStrata`]).
    pub fn strata(&self, obs: &CorpusObs, column: &str) -> Result<Strata, CorpusError> {
        let c = obs.column(column)?;
        if c.kind != ColumnKind::Category {
            return Err(CorpusError::InvalidArgument(format!(
                "stratify_by: obs column {column:?} is {}, not a category column; strata are the categories of a \
                 category column",
                c.kind.as_str()
            )));
        }
        let categories = c.categories.clone().unwrap_or_default();
        let n_strata = categories.len() as u32;
        obs.localize(self, &[column])?;
        let n = self.n_cells();
        let mut failure: Option<CorpusError> = None;
        let strata = TileStrata::build(&self.tile_cells(), n_strata, |first, out| {
            let cells: Vec<u64> = (first..(first + BLOCK).min(n)).collect();
            match obs.take(self, &cells, &[column]) {
                Ok(values) => {
                    let codes = values[0].1.as_primitive::<Int32Type>();
                    out.extend(codes.iter().map(|c| c.and_then(|c| u32::try_from(c).ok())));
                    Ok(())
                }
                Err(e) => {
                    failure = Some(e);
                    Err(DatasetError::InvalidArgument(String::new()))
                }
            }
        });
        match (strata, failure) {
            (_, Some(e)) => Err(e),
            (Ok(s), None) => Ok(Strata { column: column.to_string(), categories, tiles: Arc::new(s) }),
            (Err(e), None) => Err(CorpusError::InvalidArgument(format!("stratify_by {column:?}: {e}"))),
        }
    }

    /// What a stratified epoch draws ([`EpochUnit`]s for [`EpochPlan::stratified`](dct_dataset::EpochPlan) with
    /// `strata`): `epoch_cells` cells, stratum `s`'s share `epoch_cells × weights[s] / Σ weights` (rounded by
    /// largest remainders, so the shares add up exactly), `weights` one per stratum (`None`: equal weights for the
    /// strata that have cells). A stratum's share is whole passes over its cells plus a remainder drawn from its
    /// tiles in a seeded order (see [`Corpus::weighted_units`]); the units come ordered by tile and pass, so the
    /// plan gives the draws of one tile in one pass one place and one fetch. Deterministic in `(seed, epoch)`.
    ///
    /// Over an epoch each stratum's share is exact (up to the cells a split across ranks leaves out); within a
    /// batch it follows the windows, each holding `shuffle_tiles` tile draws: a stratum drawn from few tiles comes
    /// in the windows holding those tiles, more often than the others' where it is drawn beyond its size.
    pub fn stratified_units(
        &self,
        strata: &Strata,
        weights: Option<&[f64]>,
        epoch_cells: u64,
        seed: u64,
        epoch: u64,
    ) -> Result<Vec<EpochUnit>, CorpusError> {
        let (tiles, labels) = (&strata.tiles, &strata.categories);
        if tiles.n_tiles() != self.n_tiles() {
            return Err(CorpusError::InvalidArgument(format!(
                "strata of {} tiles for a corpus of {} tiles; make them from this corpus",
                tiles.n_tiles(),
                self.n_tiles()
            )));
        }
        let cells = tiles.stratum_cells();
        let label =
            |s: usize| format!("{:?} of obs column {:?}", labels.get(s).map_or("?", |l| l.as_str()), strata.column);
        let weights: Vec<f64> = match weights {
            None => cells.iter().map(|&n| if n > 0 { 1.0 } else { 0.0 }).collect(),
            Some(w) if w.len() != cells.len() => {
                return Err(CorpusError::InvalidArgument(format!(
                    "{} class weights for {} categories; give one per category",
                    w.len(),
                    cells.len()
                )));
            }
            Some(w) => w.to_vec(),
        };
        if let Some((s, w)) = weights.iter().enumerate().find(|(_, w)| !(w.is_finite() && **w >= 0.0)) {
            return Err(CorpusError::InvalidArgument(format!(
                "category {} has class weight {w}; class weights must be finite and not negative",
                label(s)
            )));
        }
        let total: f64 = weights.iter().sum();
        if total <= 0.0 {
            return Err(CorpusError::InvalidArgument(
                "no category to draw: the class weights add up to 0, or no selected cell has a value".into(),
            ));
        }
        if let Some(s) = (0..cells.len()).find(|&s| weights[s] > 0.0 && cells[s] == 0) {
            return Err(CorpusError::InvalidArgument(format!(
                "category {} has class weight {} but no selected cells to draw",
                label(s),
                weights[s]
            )));
        }
        let quotas = largest_remainder(&weights, total, epoch_cells);
        let mut units = Vec::new();
        let by_stratum = tiles.tiles_by_stratum();
        let allowance = epoch_allowance(by_stratum.iter().map(Vec::len).sum());
        for (s, groups) in by_stratum.iter().enumerate() {
            let rng = |pass| stratum_rng(seed, epoch, s as u64, pass);
            draw(groups, cells[s], quotas[s], Some(s as u32), rng, &mut units, allowance)?;
        }
        units.sort_unstable_by_key(|u| (u.tile, u.pass, u.stratum));
        Ok(units)
    }
}

/// The generator of stratum `stratum`'s remainder pass `pass` in an epoch (distinct from every member's).
fn stratum_rng(seed: u64, epoch: u64, stratum: u64, pass: u64) -> ChaCha8Rng {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&epoch.to_le_bytes());
    key[16..24].copy_from_slice(&(stratum | 1 << 63).to_le_bytes());
    key[24..].copy_from_slice(&pass.to_le_bytes());
    ChaCha8Rng::from_seed(key)
}
