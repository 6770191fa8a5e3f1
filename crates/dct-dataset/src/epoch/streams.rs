//! The seeded random streams of an epoch (each a ChaCha8 generator keyed by seed, epoch and what it orders, so
//! that every process draws the same), and the tiles' groups, which are seeded by the seed alone.

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

/// Each tile's group of `groups` (step 1 of the module docs): the tiles in an order seeded by `seed` alone, cut into
/// `groups` runs of nearly equal cells (a tile goes to the group its middle cell falls in).
pub(super) fn tile_groups(tile_cells: &[u64], groups: usize, seed: u64) -> Vec<u32> {
    let mut order: Vec<usize> = (0..tile_cells.len()).collect();
    // The epoch `u64::MAX` and stream `u64::MAX - 1`: no epoch's unit order or window shuffle uses this key.
    order.shuffle(&mut rng(seed, u64::MAX, u64::MAX - 1));
    let total: u128 = tile_cells.iter().map(|&c| u128::from(c)).sum::<u128>().max(1);
    let mut group_of = vec![0u32; tile_cells.len()];
    let mut before = 0u128;
    for t in order {
        let middle = before + u128::from(tile_cells[t]) / 2;
        group_of[t] = (middle * groups as u128 / total).min(groups as u128 - 1) as u32;
        before += u128::from(tile_cells[t]);
    }
    group_of
}

/// The generator of the sample drawn from part of a tile's cells in pass `pass` of an epoch; `stream` is the tile,
/// with the stratum plus one in bits 40 and up when the cells are one stratum's.
pub(super) fn sample_rng(seed: u64, epoch: u64, stream: u64, pass: u64) -> ChaCha8Rng {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&epoch.to_le_bytes());
    key[16..24].copy_from_slice(&stream.to_le_bytes());
    key[24..].copy_from_slice(&pass.to_le_bytes());
    // Distinct from every shuffle's key, which ends in the tag "dctepoch": here the last byte is 0x80 for any pass
    // below 2^56, never the tag's 'h'.
    key[31] ^= 0x80;
    ChaCha8Rng::from_seed(key)
}

/// The generator of one shuffle of an epoch: `stream` is the window (or `u64::MAX` for the unit order).
pub(super) fn rng(seed: u64, epoch: u64, stream: u64) -> ChaCha8Rng {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&epoch.to_le_bytes());
    key[16..24].copy_from_slice(&stream.to_le_bytes());
    key[24..].copy_from_slice(b"dctepoch");
    ChaCha8Rng::from_seed(key)
}
