//! [`Corpus::split`]: deterministic, disjoint parts of a corpus in given fractions, whole groups of cells (those
//! sharing an obs value, e.g. a donor) to one part.
//!
//! Single cells are dealt member by member: a member's cells in the seeded order of their hashes, the first
//! `fraction * cells` (rounded at each part's running total) to the first part, and so on, so every part holds its
//! fraction of each member's cells to within one cell. Groups are dealt: member by member, each member's new
//! groups (values no earlier member has; a member's cells missing the value are one group of that member's, so a
//! member without the column is one group) in a seeded order, each to the part furthest below its fraction of the
//! cells dealt so far (a group weighing its cells in the member where it first appears; its cells in later members
//! count toward its part before those members' new groups are dealt, so a donor spread over many datasets does not
//! tip the balance). Of a few seeded orders, the one that leaves the parts closest to their fractions is kept.
//! Every part then ends within about one group's cells of its fraction, as close as the groups' sizes allow
//! without moving the groups of earlier members, and a member added at the end deals only its own new groups: the
//! earlier groups stay where they were.

use std::collections::HashMap;

use arrow_array::ArrayRef;
use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int32Type};
use arrow_schema::DataType;
use dct_dataset::dct_obs::ColumnKind;

use crate::choose::BLOCK;
use crate::corpus::Corpus;
use crate::error::CorpusError;
use crate::obs::{CorpusObs, CorpusObsColumn};
use crate::selection::SelectionBuilder;

impl Corpus {
    /// Disjoint parts covering every cell, one per `(name, fraction)` (fractions summing to 1). Without `by`, each
    /// member's cells are ranked by their seeded hash (of the member's place and the cell's place there) and cut at
    /// the fractions, so each part holds its fraction of every member's cells to within one. With `by`, whole
    /// groups of cells sharing that obs column's value (a member's cells missing it form one group) go to one part, dealt so
    /// that each part comes within about one group's cells of its fraction (see the module documentation). The
    /// same `(fractions, by, seed)` always gives the same parts, also after members are added at the end.
    pub fn split(
        &self,
        obs: &CorpusObs,
        fractions: &[(String, f64)],
        by: Option<&str>,
        seed: u64,
    ) -> Result<Vec<(String, Corpus)>, CorpusError> {
        if fractions.is_empty() || fractions.iter().any(|(_, f)| !(f.is_finite() && *f >= 0.0)) {
            return Err(CorpusError::InvalidArgument("split fractions must be finite and not negative".into()));
        }
        let total: f64 = fractions.iter().map(|(_, f)| f).sum();
        if (total - 1.0).abs() > 1e-6 {
            return Err(CorpusError::InvalidArgument(format!("split fractions add up to {total}, not 1")));
        }
        let targets: Vec<f64> = fractions.iter().map(|(_, f)| f / total).collect();
        let mut parts: Vec<SelectionBuilder> = (0..fractions.len()).map(|_| SelectionBuilder::default()).collect();
        match by {
            None => self.split_cells(&targets, seed, &mut parts)?,
            Some(name) => {
                let column = obs.column(name)?;
                obs.localize(self, &[name])?;
                let dealt = self.deal_groups(obs, name, column, &targets, seed)?;
                self.for_each_block(|cells, members| {
                    let keys = group_keys(column, &obs.take(self, cells, &[name])?[0].1);
                    for ((&c, &(m, _)), key) in cells.iter().zip(members).zip(keys) {
                        let key = key.unwrap_or_else(|| missing_key(m));
                        let part = dealt.get(&key).ok_or_else(|| {
                            CorpusError::InvalidArgument(format!("obs column {name:?} changed while it was split"))
                        })?;
                        parts[*part as usize].push(self.selection().base_cell(c, 0)?);
                    }
                    Ok(())
                })?;
            }
        }
        fractions
            .iter()
            .zip(parts)
            .map(|((name, _), builder)| Ok((name.clone(), self.with_selection(builder.finish())?)))
            .collect()
    }

    /// Each member's cells, ranked by their seeded hash, cut at the fractions' running totals.
    fn split_cells(&self, targets: &[f64], seed: u64, parts: &mut [SelectionBuilder]) -> Result<(), CorpusError> {
        // By the member's place, not its name: the name is how its location was spelled (a relative path, an
        // absolute one, a `file://` URL), which must not change the parts; a member added at the end takes a new
        // place.
        let member_hash: Vec<u64> = (0..self.members().len() as u64).map(|m| fnv(&m.to_le_bytes())).collect();
        // The current member's cells: (hash, corpus cell). A member's cells are contiguous in corpus order.
        let mut pending: Vec<(u64, u64)> = Vec::new();
        let mut member = None;
        let cut = |pending: &mut Vec<(u64, u64)>, parts: &mut [SelectionBuilder]| -> Result<(), CorpusError> {
            pending.sort_unstable();
            let n = pending.len() as f64;
            let (mut acc, mut lo) = (0.0, 0usize);
            for (p, f) in targets.iter().enumerate() {
                acc += f;
                let hi = if p + 1 == targets.len() {
                    pending.len()
                } else {
                    ((acc * n).round() as usize).min(pending.len())
                };
                let mut cells: Vec<u64> = pending[lo..hi].iter().map(|&(_, c)| c).collect();
                cells.sort_unstable();
                for c in cells {
                    parts[p].push(self.selection().base_cell(c, 0)?);
                }
                lo = hi;
            }
            pending.clear();
            Ok(())
        };
        self.for_each_block(|cells, members| {
            for (&c, &(m, local)) in cells.iter().zip(members) {
                if member != Some(m) {
                    cut(&mut pending, parts)?;
                    member = Some(m);
                }
                pending.push((mix(seed, mix(member_hash[m as usize], local)), c));
            }
            Ok(())
        })?;
        cut(&mut pending, parts)
    }

    /// The part of each group of column `name` (by its key): groups dealt member by member, each member's new
    /// groups in the seeded order of their keys, each to the part whose cells fall furthest below its target
    /// share of the cells dealt so far with it (the member's cells of groups dealt before included).
    fn deal_groups(
        &self,
        obs: &CorpusObs,
        name: &str,
        column: &CorpusObsColumn,
        targets: &[f64],
        seed: u64,
    ) -> Result<HashMap<u64, u32>, CorpusError> {
        let mut part_of: HashMap<u64, u32> = HashMap::new();
        // The groups first seen in the member being read, with their cells there.
        let mut pending: HashMap<u64, u64> = HashMap::new();
        let mut member = None;
        // Cells of each part so far: those of the groups dealt, in every member read (a group dealt in an earlier
        // member keeps its part, and its cells in later members count toward that part's share).
        let mut dealt = vec![0u64; targets.len()];
        let deal = |pending: &mut HashMap<u64, u64>, part_of: &mut HashMap<u64, u32>, dealt: &mut Vec<u64>| {
            let groups: Vec<(u64, u64)> = pending.drain().collect();
            // The member's new groups dealt in each of a few seeded orders; the order that leaves the parts
            // closest to their fractions is kept (the first of equals), so that the seed still changes the parts
            // but one unlucky order (its large groups last) does not decide them.
            let mut best: Option<Dealing> = None;
            for order in 0..DEAL_ORDERS {
                let mut groups = groups.clone();
                // Order 0 is the one splits used before there were several.
                let order_seed = if order == 0 { seed } else { mix(seed, order) };
                groups.sort_unstable_by_key(|&(key, _)| (mix(order_seed, key), key));
                let trial = Dealing::of(&groups, dealt, targets);
                if best.as_ref().is_none_or(|b| trial.off < b.off) {
                    best = Some(trial);
                }
            }
            if let Some(best) = best {
                *dealt = best.dealt;
                part_of.extend(best.placed);
            }
        };
        self.for_each_block(|cells, members| {
            let keys = group_keys(column, &obs.take(self, cells, &[name])?[0].1);
            for (&(m, _), key) in members.iter().zip(keys) {
                let key = key.unwrap_or_else(|| missing_key(m));
                if member != Some(m) {
                    deal(&mut pending, &mut part_of, &mut dealt);
                    member = Some(m);
                }
                match part_of.get(&key) {
                    Some(&part) => dealt[part as usize] += 1,
                    None => *pending.entry(key).or_insert(0) += 1,
                }
            }
            Ok(())
        })?;
        deal(&mut pending, &mut part_of, &mut dealt);
        Ok(part_of)
    }

    /// Runs `f` over the corpus's cells a block at a time, with each cell's `(member, place in it)`.
    fn for_each_block(
        &self,
        mut f: impl FnMut(&[u64], &[(u32, u64)]) -> Result<(), CorpusError>,
    ) -> Result<(), CorpusError> {
        let n = self.n_cells();
        let mut lo = 0;
        while lo < n {
            let hi = (lo + BLOCK).min(n);
            let cells: Vec<u64> = (lo..hi).collect();
            let members = self.locate(&cells)?;
            f(&cells, &members)?;
            lo = hi;
        }
        Ok(())
    }
}

/// Groups dealt in one order, each to the part furthest below its fraction of the cells dealt with it.
struct Dealing {
    /// Cells of each part afterwards.
    dealt: Vec<u64>,
    /// Each group's key and part.
    placed: Vec<(u64, u32)>,
    /// How far the parts are from their fractions afterwards: the sum of their cells' distances.
    off: f64,
}

impl Dealing {
    /// `groups` (`(key, cells)`, in order) dealt onto parts holding `dealt` cells, aiming at `targets`.
    fn of(groups: &[(u64, u64)], dealt: &[u64], targets: &[f64]) -> Dealing {
        let mut dealt = dealt.to_vec();
        let placed = groups
            .iter()
            .map(|&(key, cells)| {
                let total = (dealt.iter().sum::<u64>() + cells) as f64;
                let short = |p: usize| targets[p] * total - dealt[p] as f64;
                let part = (1..targets.len()).fold(0, |best, p| if short(p) > short(best) { p } else { best });
                dealt[part] += cells;
                (key, part as u32)
            })
            .collect();
        let total = dealt.iter().sum::<u64>() as f64;
        let off = dealt.iter().zip(targets).map(|(&got, f)| (got as f64 - f * total).abs()).sum();
        Dealing { dealt, placed, off }
    }
}

/// Seeded orders in which a member's new groups are dealt, the best kept ([`Corpus::deal_groups`]).
const DEAL_ORDERS: u64 = 8;

/// The group of the cells of member `m` missing the column's value: one per member (a member without the column is
/// one group), so that members without it are not all dealt to one part together.
fn missing_key(m: u32) -> u64 {
    mix(0x9e37_79b9_7f4a_7c15, fnv(&u64::from(m).to_le_bytes()))
}

/// Each value's group key: a hash of its text (category label, string, number, boolean); `None` where it is
/// missing.
fn group_keys(column: &CorpusObsColumn, a: &ArrayRef) -> Vec<Option<u64>> {
    match column.kind {
        ColumnKind::Category => {
            let cats = column.categories.as_deref().unwrap_or_default();
            let hashes: Vec<u64> = cats.iter().map(|c| fnv(c.as_bytes())).collect();
            a.as_primitive::<Int32Type>().iter().map(|c| c.and_then(|c| hashes.get(c as usize).copied())).collect()
        }
        _ => {
            let text = arrow_cast::cast(a, &DataType::Utf8)
                .unwrap_or_else(|_| arrow_array::new_null_array(&DataType::Utf8, a.len()));
            // A whole number keys as its integer text whatever its type: a column stored as integers in some
            // members and as floats in others (widened to floats across the corpus) keeps its groups' keys when
            // a member of the other type is added.
            let whole = matches!(a.data_type(), DataType::Float16 | DataType::Float32 | DataType::Float64)
                .then(|| arrow_cast::cast(a, &DataType::Float64).ok())
                .flatten();
            let whole = whole.as_ref().map(|w| w.as_primitive::<Float64Type>());
            text.as_string::<i32>()
                .iter()
                .enumerate()
                .map(|(i, v)| match whole.and_then(|w| integral(w.value(i))) {
                    Some(n) if v.is_some() => Some(fnv(n.to_string().as_bytes())),
                    _ => v.map(|v| fnv(v.as_bytes())),
                })
                .collect()
        }
    }
}

/// `x` as an integer when it is a whole number an `i64` holds.
fn integral(x: f64) -> Option<i64> {
    (x.fract() == 0.0 && x.abs() < 9.2e18).then_some(x as i64)
}

/// FNV-1a, 64 bits: a stable hash of bytes (the same on every platform and run).
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// splitmix64 of two words: a well-mixed, stable hash.
fn mix(a: u64, b: u64) -> u64 {
    let mut z = a.wrapping_add(b.wrapping_mul(0x9e37_79b9_7f4a_7c15)).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
