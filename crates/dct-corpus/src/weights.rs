//! Weighted epochs: each member's share of an epoch in proportion to its weight.

use dct_dataset::EpochUnit;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use crate::corpus::Corpus;
use crate::error::CorpusError;

impl Corpus {
    /// What a weighted epoch draws ([`EpochUnit`]s over [`Corpus::tile_cells`], for
    /// [`EpochPlan::with_units`](dct_dataset::EpochPlan::with_units)): `epoch_cells` cells, member `m`'s share
    /// `epoch_cells × weights[m] / Σ weights` (rounded by largest remainders, so the shares add up exactly). A
    /// member's share is whole passes over its selected cells plus a remainder; the remainder takes the member's
    /// tiles whole in a seeded order and a sample of the next one, so it stays as local as a pass (a tile is
    /// fetched only if cells of it are drawn). Deterministic in `(seed, epoch)`.
    pub fn weighted_units(
        &self,
        weights: &[f64],
        epoch_cells: u64,
        seed: u64,
        epoch: u64,
    ) -> Result<Vec<EpochUnit>, CorpusError> {
        let members = self.members();
        if weights.len() != members.len() {
            return Err(CorpusError::InvalidArgument(format!(
                "{} weights for {} members; give one per member",
                weights.len(),
                members.len()
            )));
        }
        if let Some((m, w)) = weights.iter().enumerate().find(|(_, w)| !(w.is_finite() && **w >= 0.0)) {
            return Err(CorpusError::InvalidArgument(format!(
                "member {:?} has weight {w}; weights must be finite and not negative",
                members[m].name
            )));
        }
        let total: f64 = weights.iter().sum();
        if total <= 0.0 {
            return Err(CorpusError::InvalidArgument("the weights add up to 0; give some member a weight".into()));
        }
        let member_cells = self.member_cells();
        if let Some(m) = (0..members.len()).find(|&m| weights[m] > 0.0 && member_cells[m] == 0) {
            return Err(CorpusError::InvalidArgument(format!(
                "member {:?} has weight {} but no selected cells to draw",
                members[m].name, weights[m]
            )));
        }
        let quotas = largest_remainder(weights, total, epoch_cells);
        let tile_cells = self.tile_cells();
        let allowance = epoch_allowance(tile_cells.len());
        let mut units = Vec::new();
        for (m, &quota) in quotas.iter().enumerate() {
            let tiles: Vec<(usize, u64)> =
                self.member_tiles(m).filter(|&t| tile_cells[t] > 0).map(|t| (t, tile_cells[t])).collect();
            let rng = |pass| member_rng(seed, epoch, m as u64, pass);
            draw(&tiles, member_cells[m], quota, None, rng, &mut units, allowance)?;
        }
        Ok(units)
    }
}

/// Units drawing `quota` cells from `groups` (`(tile, cells)` pairs holding `total` cells, of stratum `stratum` or
/// of any): whole passes over every group, then for the rest the groups whole in a seeded order (`rng` of the pass)
/// and a sample of the next one, so the rest stays as local as a pass (a tile is fetched only if cells of it are
/// drawn).
///
/// An epoch is planned whole, a unit per group per pass: an `epoch_cells` that draws cells thousands of times over
/// (10^12 of a few thousand cells, say) would take memory in proportion, so more than `allowance` units in all
/// ([`epoch_allowance`]) are refused, before any is made.
pub(crate) fn draw(
    groups: &[(usize, u64)],
    total: u64,
    quota: u64,
    stratum: Option<u32>,
    rng: impl Fn(u64) -> ChaCha8Rng,
    units: &mut Vec<EpochUnit>,
    allowance: u64,
) -> Result<(), CorpusError> {
    if quota == 0 || total == 0 {
        return Ok(());
    }
    let passes = quota / total;
    let planned = units.len() as u128 + (u128::from(passes) + 1) * groups.len() as u128;
    if planned > u128::from(allowance) {
        return Err(CorpusError::InvalidArgument(format!(
            "the epoch draws some cells {passes} times over, which takes more than {allowance} tile draws to \
             plan; ask for fewer cells an epoch (epoch_cells: more epochs draw the same)"
        )));
    }
    for pass in 0..passes {
        units.extend(groups.iter().map(|&(tile, take)| EpochUnit { tile, take, pass, stratum }));
    }
    let mut left = quota % total;
    if left > 0 {
        let mut order = groups.to_vec();
        order.shuffle(&mut rng(passes));
        for (tile, cells) in order {
            let take = cells.min(left);
            units.push(EpochUnit { tile, take, pass: passes, stratum });
            left -= take;
            if left == 0 {
                break;
            }
        }
    }
    Ok(())
}

/// The most tile draws ([`EpochUnit`]s) a weighted or stratified epoch of many passes is planned with: 20 passes
/// over a corpus of 100,000 tiles (10^9 cells in tiles of 10,000). An epoch may always take 4 passes over its
/// groups (tiles, or tiles by category), however many there are.
pub const MAX_EPOCH_UNITS: u64 = 2_000_000;

/// The units an epoch drawing from `groups` groups (a member's tiles, or a stratum's tiles) may be planned with.
pub(crate) fn epoch_allowance(groups: usize) -> u64 {
    MAX_EPOCH_UNITS.max(4 * groups as u64)
}

/// `total_cells` split in proportion to `weights` (summing to `total`), rounded by largest remainders.
pub(crate) fn largest_remainder(weights: &[f64], total: f64, total_cells: u64) -> Vec<u64> {
    let exact: Vec<f64> = weights.iter().map(|w| total_cells as f64 * w / total).collect();
    let mut quotas: Vec<u64> = exact.iter().map(|x| x.floor() as u64).collect();
    let assigned: u64 = quotas.iter().sum();
    let mut by_remainder: Vec<usize> = (0..weights.len()).collect();
    by_remainder
        .sort_by(|&a, &b| (exact[b] - exact[b].floor()).total_cmp(&(exact[a] - exact[a].floor())).then(a.cmp(&b)));
    for &m in by_remainder.iter().take(total_cells.saturating_sub(assigned) as usize) {
        quotas[m] += 1;
    }
    quotas
}

/// The generator of member `member`'s remainder pass `pass` in an epoch.
fn member_rng(seed: u64, epoch: u64, member: u64, pass: u64) -> ChaCha8Rng {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&epoch.to_le_bytes());
    key[16..24].copy_from_slice(&member.to_le_bytes());
    key[24..].copy_from_slice(&pass.to_le_bytes());
    ChaCha8Rng::from_seed(key)
}

#[cfg(test)]
mod tests {
    #[test]
    fn shares_add_up_exactly() {
        let q = super::largest_remainder(&[1.0, 1.0, 1.0], 3.0, 100);
        assert_eq!(q.iter().sum::<u64>(), 100);
        assert_eq!(q, [34, 33, 33]);
        assert_eq!(super::largest_remainder(&[0.0, 2.0], 2.0, 7), [0, 7]);
    }
}
