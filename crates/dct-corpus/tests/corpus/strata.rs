//! Stratified epochs: each category's share of an epoch, whole passes, resumption and the refusals.

use std::collections::HashMap;

use dct_corpus::Strata;
use dct_dataset::{EpochOptions, EpochPlan};

use crate::obs::{Setup, all, options, setup};

/// The cells of every batch of `plan` (in order).
fn drawn(plan: &mut EpochPlan) -> Vec<u64> {
    (0..plan.n_batches()).flat_map(|j| plan.batch(j).unwrap()).collect()
}

/// How often each cell type is drawn, by the written (independent) labels.
fn shares(s: &Setup, cells: &[u64]) -> HashMap<String, u64> {
    let types = all(&s.written, |w| &w.cell_type);
    let mut out = HashMap::new();
    for &c in cells {
        let label = types[c as usize].clone().expect("cells without a value are never drawn");
        *out.entry(label).or_insert(0) += 1;
    }
    out
}

fn strata(s: &Setup) -> Strata {
    let obs = s.corpus.obs(&options(s._tmp.path())).unwrap();
    s.corpus.strata(&obs, "cell_type").unwrap()
}

#[test]
fn strata_group_the_cells_of_each_category() {
    let s = setup();
    let strata = strata(&s);
    let types = all(&s.written, |w| &w.cell_type);
    let want: Vec<u64> =
        strata.categories.iter().map(|l| types.iter().filter(|t| t.as_deref() == Some(l)).count() as u64).collect();
    assert_eq!(strata.tiles.stratum_cells(), want);
    let tile_cells = s.corpus.tile_cells();
    let mut first = 0u64;
    for (tile, &n) in tile_cells.iter().enumerate() {
        for (code, label) in strata.categories.iter().enumerate() {
            let got: Vec<u64> = strata.tiles.cells(tile, code as u32).iter().map(|&o| first + u64::from(o)).collect();
            let want: Vec<u64> =
                (first..first + n).filter(|&c| types[c as usize].as_deref() == Some(label.as_str())).collect();
            assert_eq!(got, want, "tile {tile}, {label}");
        }
        first += n;
    }
}

#[test]
fn each_category_gets_its_share_of_the_epoch_exactly() {
    let s = setup();
    let strata = strata(&s);
    let tile_cells = s.corpus.tile_cells();
    let opts = EpochOptions::new(1000);
    let units = s.corpus.stratified_units(&strata, None, 40_000, 5, 0).unwrap();
    assert_eq!(units, s.corpus.stratified_units(&strata, None, 40_000, 5, 0).unwrap(), "deterministic");
    let mut plan = EpochPlan::stratified(&tile_cells, units, strata.tiles.clone(), &opts, 0).unwrap();
    let cells = drawn(&mut plan);
    let got = shares(&s, &cells);
    assert_eq!(got.len(), 4);
    for (label, n) in &got {
        assert_eq!(*n, 10_000, "{label}: equal shares of 40,000 draws");
    }
    // Whole passes first: the cells of one category drawn equally often, give or take one.
    let types = all(&s.written, |w| &w.cell_type);
    let mut draws = vec![0u64; types.len()];
    for &c in &cells {
        draws[c as usize] += 1;
    }
    for label in &strata.categories {
        let of: Vec<u64> =
            (0..types.len()).filter(|&c| types[c].as_deref() == Some(label.as_str())).map(|c| draws[c]).collect();
        let (lo, hi) = (of.iter().min().unwrap(), of.iter().max().unwrap());
        assert!(hi - lo <= 1, "{label}: {lo}..{hi}");
    }

    // Class weights by category; a category weighed 0 is not drawn.
    let weights: Vec<f64> = strata
        .categories
        .iter()
        .map(|l| match l.as_str() {
            "T" => 2.0,
            "Mono" => 0.0,
            _ => 1.0,
        })
        .collect();
    let units = s.corpus.stratified_units(&strata, Some(&weights), 10_001, 5, 1).unwrap();
    let mut plan = EpochPlan::stratified(&tile_cells, units, strata.tiles.clone(), &opts, 1).unwrap();
    let got = shares(&s, &drawn(&mut plan));
    assert_eq!((got["T"], got["B"], got["NK"], got.get("Mono")), (5001, 2500, 2500, None), "largest remainders");
}

#[test]
fn a_resumed_stratified_epoch_goes_on_as_the_uninterrupted_one() {
    let s = setup();
    let strata = strata(&s);
    let tile_cells = s.corpus.tile_cells();
    for (workers, world) in [(1, 1), (2, 2), (3, 1)] {
        for rank in 0..world {
            let units = s.corpus.stratified_units(&strata, None, 5_000, 2, 3).unwrap();
            let base = EpochOptions { num_workers: workers, rank, world_size: world, ..EpochOptions::new(64) };
            let whole: Vec<Vec<u64>> = (0..workers)
                .map(|worker| {
                    let opts = EpochOptions { worker, ..base.clone() };
                    drawn(
                        &mut EpochPlan::stratified(&tile_cells, units.clone(), strata.tiles.clone(), &opts, 3).unwrap(),
                    )
                })
                .collect();
            let rank_batches = EpochPlan::stratified(&tile_cells, units.clone(), strata.tiles.clone(), &base, 3)
                .unwrap()
                .rank_batches();
            // The rank's order: batch j of the uninterrupted run, by rank position.
            let mut by_position: Vec<Vec<u64>> = vec![Vec::new(); rank_batches];
            for worker in 0..workers {
                let opts = EpochOptions { worker, ..base.clone() };
                let mut plan =
                    EpochPlan::stratified(&tile_cells, units.clone(), strata.tiles.clone(), &opts, 3).unwrap();
                for j in 0..plan.n_batches() {
                    by_position[plan.rank_batch_of(j)] = plan.batch(j).unwrap();
                }
            }
            assert_eq!(by_position.iter().map(Vec::len).sum::<usize>(), whole.iter().map(Vec::len).sum::<usize>());
            let k = rank_batches / 3;
            let mut resumed: Vec<Vec<u64>> = vec![Vec::new(); rank_batches];
            for worker in 0..workers {
                let opts = EpochOptions { worker, first_batch: k, ..base.clone() };
                let mut plan =
                    EpochPlan::stratified(&tile_cells, units.clone(), strata.tiles.clone(), &opts, 3).unwrap();
                for j in 0..plan.n_batches() {
                    resumed[plan.rank_batch_of(j)] = plan.batch(j).unwrap();
                }
            }
            assert_eq!(resumed[k..], by_position[k..], "workers {workers}, rank {rank} of {world}");
        }
    }
}

#[test]
fn bad_strata_and_class_weights_are_refused_naming_what() {
    let s = setup();
    let obs = s.corpus.obs(&options(s._tmp.path())).unwrap();
    let e = s.corpus.strata(&obs, "n_counts").unwrap_err().to_string();
    assert!(e.contains("\"n_counts\"") && e.contains("not a category column"), "{e}");
    assert!(s.corpus.strata(&obs, "nope").unwrap_err().to_string().contains("cell_type"));
    // Member 0 alone has T and B cells only: weighing Mono is refused naming it.
    let first = s.corpus.select(&(0..30).collect::<Vec<_>>()).unwrap();
    let strata = first.strata(&first.obs(&options(s._tmp.path())).unwrap(), "cell_type").unwrap();
    let mono = strata.categories.iter().position(|l| l == "Mono").unwrap();
    let mut weights: Vec<f64> =
        strata.categories.iter().map(|l| if matches!(l.as_str(), "T" | "B" | "Mono") { 1.0 } else { 0.0 }).collect();
    let e = first.stratified_units(&strata, Some(&weights), 100, 0, 0).unwrap_err().to_string();
    assert!(e.contains("\"Mono\"") && e.contains("no selected cells"), "{e}");
    weights[mono] = 0.0;
    assert!(first.stratified_units(&strata, Some(&weights), 100, 0, 0).is_ok());
    weights[mono] = -1.0;
    assert!(first.stratified_units(&strata, Some(&weights), 100, 0, 0).unwrap_err().to_string().contains("-1"));
    let zeros = vec![0.0; strata.categories.len()];
    assert!(first.stratified_units(&strata, Some(&zeros), 100, 0, 0).unwrap_err().to_string().contains("add up to 0"));
    assert!(first.stratified_units(&strata, Some(&[1.0]), 100, 0, 0).unwrap_err().to_string().contains("one per"));
}
