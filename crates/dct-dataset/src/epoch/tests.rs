//! The epoch planner against brute force: coverage, equal ranks, worker parts, resumption.

use super::*;

/// `base` for one rank and loader worker.
fn placed(base: EpochOptions, rank: usize, world_size: usize, worker: usize, num_workers: usize) -> EpochOptions {
    EpochOptions { rank, world_size, worker, num_workers, ..base }
}

fn all_batches(tile_cells: &[u64], opts: &EpochOptions, epoch: u64) -> Vec<Vec<u64>> {
    let mut plan = EpochPlan::new(tile_cells, opts, epoch).unwrap();
    (0..plan.n_batches()).map(|j| plan.batch(j).unwrap()).collect()
}

#[test]
fn one_rank_serves_every_cell_once_in_windows() {
    let tiles = [10, 10, 10, 10, 10, 7];
    let opts = EpochOptions { shuffle_tiles: 2, ..EpochOptions::new(8) };
    let batches = all_batches(&tiles, &opts, 3);
    let mut cells: Vec<u64> = batches.concat();
    assert_eq!(cells.len(), 57);
    assert_eq!(batches.len(), 8);
    // Consecutive runs of 20 (or 17) stream cells come from 2 tiles.
    let starts = [0u64, 10, 20, 30, 40, 50, 57];
    let tile = |c: u64| starts.partition_point(|&s| s <= c) - 1;
    for run in cells.chunks(20).take(2) {
        let mut ts: Vec<usize> = run.iter().map(|&c| tile(c)).collect();
        ts.dedup();
        ts.sort();
        ts.dedup();
        assert!(ts.len() <= 2, "{ts:?}");
    }
    cells.sort();
    assert_eq!(cells, (0..57).collect::<Vec<_>>());
}

#[test]
fn without_shuffle_cells_come_in_order() {
    let opts = EpochOptions { shuffle: false, ..EpochOptions::new(4) };
    assert_eq!(all_batches(&[5, 5], &opts, 9).concat(), (0..10).collect::<Vec<_>>());
}

#[test]
fn epochs_differ_and_repeat() {
    let opts = EpochOptions::new(16);
    let a = all_batches(&[40, 40, 40], &opts, 0);
    assert_eq!(a, all_batches(&[40, 40, 40], &opts, 0));
    assert_ne!(a, all_batches(&[40, 40, 40], &opts, 1));
    assert_ne!(a, all_batches(&[40, 40, 40], &EpochOptions { seed: 5, ..opts }, 0));
}

#[test]
fn ranks_and_workers_split_the_stream() {
    // 4 tiles, never grouped; 60 tiles of 1 to 3 cells in windows of 1 tile, grouped for most shapes.
    let few = vec![30u64, 30, 30, 13];
    let many: Vec<u64> = (0..60).map(|t| 1 + t % 3).collect();
    let mut grouped = 0;
    for (tiles, shuffle_tiles) in [(&few, 4usize), (&many, 1)] {
        for world in [1usize, 2, 3, 8] {
            for workers in [1usize, 2, 3] {
                for remainder in [Remainder::Drop, Remainder::Wrap] {
                    let mut seen: Vec<u64> = Vec::new();
                    let mut counts = Vec::new();
                    for rank in 0..world {
                        let mut rank_batches: Vec<(usize, Vec<u64>)> = Vec::new();
                        for worker in 0..workers {
                            let base = EpochOptions { remainder, shuffle_tiles, ..EpochOptions::new(7) };
                            let opts = placed(base, rank, world, worker, workers);
                            let mut plan = EpochPlan::new(tiles, &opts, 2).unwrap();
                            grouped += usize::from(!plan.group_start.is_empty());
                            for j in 0..plan.n_batches() {
                                rank_batches.push((plan.rank_batch_of(j), plan.batch(j).unwrap()));
                            }
                        }
                        rank_batches.sort();
                        assert!(
                            rank_batches.iter().enumerate().all(|(i, (k, _))| i == *k),
                            "worker batches interleave"
                        );
                        counts.push(rank_batches.len());
                        seen.extend(rank_batches.into_iter().flat_map(|(_, b)| b));
                    }
                    assert!(counts.iter().all(|&c| c == counts[0]), "equal batches per rank: {counts:?}");
                    let n: u64 = tiles.iter().sum();
                    let mut sorted = seen.clone();
                    sorted.sort();
                    let unique = {
                        let mut u = sorted.clone();
                        u.dedup();
                        u
                    };
                    match remainder {
                        Remainder::Drop => {
                            assert_eq!(unique.len(), sorted.len(), "no cell twice");
                            assert_eq!(sorted.len() as u64, n / world as u64 * world as u64);
                        }
                        Remainder::Wrap => {
                            assert_eq!(unique, (0..n).collect::<Vec<_>>(), "every cell");
                            assert_eq!(sorted.len() as u64, n.div_ceil(world as u64) * world as u64);
                        }
                    }
                }
            }
        }
    }
    assert!(grouped > 0, "some shapes group the 60 tiles");
}

/// What a `DataLoader` with `workers` workers yields: one batch of each worker in turn, skipping finished workers.
fn loader_order(tile_cells: &[u64], opts: &EpochOptions, epoch: u64, workers: usize) -> Vec<Vec<u64>> {
    let mut plans: Vec<EpochPlan> = (0..workers)
        .map(|worker| EpochPlan::new(tile_cells, &EpochOptions { worker, num_workers: workers, ..opts.clone() }, epoch))
        .collect::<Result<_, _>>()
        .unwrap();
    let mut next = vec![0usize; workers];
    let mut out = Vec::new();
    while (0..workers).any(|w| next[w] < plans[w].n_batches()) {
        for w in 0..workers {
            if next[w] < plans[w].n_batches() {
                assert_eq!(plans[w].rank_batch_of(next[w]), opts.first_batch + out.len(), "rank_batch_of");
                out.push(plans[w].batch(next[w]).unwrap());
                next[w] += 1;
            }
        }
    }
    out
}

#[test]
fn resuming_yields_the_rest_of_the_epoch() {
    let tiles = [25, 25, 25, 25, 11, 25, 25, 7];
    for workers in [1usize, 2, 3, 5] {
        for (shuffle_tiles, drop_last) in [(1, false), (2, false), (2, true), (3, false)] {
            let opts = EpochOptions { shuffle_tiles, drop_last, ..EpochOptions::new(6) };
            let whole = loader_order(&tiles, &opts, 4, workers);
            let plan = EpochPlan::new(&tiles, &EpochOptions { num_workers: workers, ..opts.clone() }, 4).unwrap();
            assert_eq!(whole.len(), plan.rank_batches());
            for k in 0..=whole.len() {
                let rest = loader_order(&tiles, &EpochOptions { first_batch: k, ..opts.clone() }, 4, workers);
                assert_eq!(rest, whole[k..].to_vec(), "{workers} workers, window {shuffle_tiles}, k = {k}");
            }
        }
    }
}

#[test]
fn each_tile_is_read_by_one_worker_of_a_rank() {
    let tiles: Vec<u64> = (0..23).map(|t| 40 + (t % 5) * 3).collect();
    for world in [1usize, 2, 3] {
        for workers in [1usize, 2, 3, 4] {
            for shuffle_tiles in [1usize, 2, 4] {
                for rank in 0..world {
                    let mut reader_of = std::collections::HashMap::new();
                    for worker in 0..workers {
                        let base = EpochOptions { shuffle_tiles, ..EpochOptions::new(16) };
                        let opts = placed(base, rank, world, worker, workers);
                        let plan = EpochPlan::new(&tiles, &opts, 1).unwrap();
                        for t in plan.tiles_ahead(0, usize::MAX) {
                            let other = reader_of.insert(t, worker);
                            assert!(other.is_none(), "tile {t} read by workers {other:?} and {worker}");
                        }
                        // The tiles read are those of the cells served.
                        let mut plan = plan;
                        for j in 0..plan.n_batches() {
                            for c in plan.batch(j).unwrap() {
                                let t = tiles
                                    .iter()
                                    .scan(0, |s, &n| {
                                        *s += n;
                                        Some(*s)
                                    })
                                    .position(|end| c < end)
                                    .unwrap();
                                assert_eq!(reader_of.get(&t), Some(&worker));
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn drop_last_and_tiles_ahead() {
    let opts = EpochOptions { drop_last: true, shuffle: false, ..EpochOptions::new(6) };
    let plan = EpochPlan::new(&[10, 10, 5], &opts, 0).unwrap();
    assert_eq!(plan.n_batches(), 4);
    assert_eq!(plan.rank_cells(), 24);
    let opts = EpochOptions { shuffle: false, shuffle_tiles: 1, ..EpochOptions::new(6) };
    let plan = EpochPlan::new(&[10, 10, 5], &opts, 0).unwrap();
    assert_eq!(plan.tiles_ahead(0, 8), vec![0, 1, 2]);
    assert_eq!(plan.tiles_ahead(2, 8), vec![1, 2]);
    assert_eq!(plan.tiles_ahead(0, 1), vec![0]);
}

#[test]
fn bad_options_are_refused() {
    for opts in [
        EpochOptions::new(0),
        EpochOptions { rank: 2, world_size: 2, ..EpochOptions::new(4) },
        EpochOptions { worker: 1, ..EpochOptions::new(4) },
        EpochOptions { shuffle_tiles: 0, ..EpochOptions::new(4) },
    ] {
        assert!(EpochPlan::new(&[4], &opts, 0).is_err(), "{opts:?}");
    }
    let mut plan = EpochPlan::new(&[4], &EpochOptions::new(4), 0).unwrap();
    assert!(plan.batch(1).is_err());
}

#[test]
fn a_tile_s_strata_drawn_in_one_pass_share_one_window() {
    // Tiles of 6 cells; strata by cell offset: 0 for offsets 0..4, 1 for 4..6.
    let tiles = [6u64; 5];
    let strata = Arc::new(
        TileStrata::build(&tiles, 2, |first, out| {
            out.extend((first..30).map(|c| Some(u32::from(c % 6 >= 4))));
            Ok(())
        })
        .unwrap(),
    );
    // Stratum 1 drawn twice (two passes), stratum 0 once (half of it in a second pass on tiles 1 and 3).
    let mut units = Vec::new();
    for tile in 0..5 {
        units.push(EpochUnit { tile, take: 4, pass: 0, stratum: Some(0) });
        units.push(EpochUnit { tile, take: 2, pass: 0, stratum: Some(1) });
        units.push(EpochUnit { tile, take: 2, pass: 1, stratum: Some(1) });
        if tile % 2 == 1 {
            units.push(EpochUnit { tile, take: 3, pass: 1, stratum: Some(0) });
        }
    }
    let opts = EpochOptions { shuffle_tiles: 1, ..EpochOptions::new(1) };
    let mut plan = EpochPlan::stratified(&tiles, units.clone(), strata.clone(), &opts, 4).unwrap();
    let cells: Vec<u64> = (0..plan.n_batches()).flat_map(|j| plan.batch(j).unwrap()).collect();
    assert_eq!(cells.len(), 5 * 8 + 2 * 3);
    // One window per (tile, pass): the stream runs through 10 windows, each of one tile.
    let mut runs: Vec<u64> = cells.iter().map(|c| c / 6).collect();
    runs.dedup();
    assert_eq!(runs.len(), 10, "{runs:?}");
    for tile in 0..5u64 {
        let of: Vec<u64> = cells.iter().copied().filter(|c| c / 6 == tile).collect();
        let high = of.iter().filter(|&&c| c % 6 >= 4).count();
        assert_eq!(high, 4, "stratum 1 of tile {tile}: its 2 cells twice");
        assert_eq!(of.len() - high, if tile % 2 == 1 { 7 } else { 4 });
    }
    // A stratum's unit may not draw more than the tile's cells of it, nor name strata a plan does not have.
    let too_many = vec![EpochUnit { tile: 0, take: 3, pass: 0, stratum: Some(1) }];
    assert!(EpochPlan::stratified(&tiles, too_many.clone(), strata, &opts, 0).is_err());
    assert!(EpochPlan::with_units(&tiles, too_many, &opts, 0).is_err());
}

#[test]
fn without_shuffle_workers_take_turns_so_the_loader_yields_cell_order_and_resumes_exactly() {
    let tiles = [25, 25, 25, 25, 11, 25, 25, 7];
    let n: u64 = tiles.iter().sum();
    for workers in [1usize, 2, 3, 5] {
        for drop_last in [false, true] {
            let opts = EpochOptions { shuffle: false, shuffle_tiles: 2, drop_last, ..EpochOptions::new(6) };
            let whole = loader_order(&tiles, &opts, 4, workers);
            let plan = EpochPlan::new(&tiles, &EpochOptions { num_workers: workers, ..opts.clone() }, 4).unwrap();
            assert_eq!(whole.len(), plan.rank_batches(), "{workers} workers");
            let cells: Vec<u64> = whole.concat();
            let served = if drop_last { n / 6 * 6 } else { n };
            assert_eq!(cells, (0..served).collect::<Vec<_>>(), "{workers} workers, drop_last {drop_last}: cell order");
            assert!(whole.iter().all(|b| b.len() == 6 || (!drop_last && b.len() == (n % 6) as usize)));
            for k in 0..=whole.len() {
                let rest = loader_order(&tiles, &EpochOptions { first_batch: k, ..opts.clone() }, 4, workers);
                assert_eq!(rest, whole[k..].to_vec(), "{workers} workers, k = {k}");
            }
        }
    }
    // Ranks: equal batch counts, disjoint, each rank's batches in cell order.
    for world in [2usize, 3] {
        let mut counts = Vec::new();
        for rank in 0..world {
            let opts = placed(EpochOptions { shuffle: false, ..EpochOptions::new(7) }, rank, world, 0, 3);
            let order = loader_order(&tiles, &opts, 1, 3);
            let cells = order.concat();
            assert!(cells.windows(2).all(|w| w[1] == w[0] + 1), "rank {rank} of {world}: in cell order");
            counts.push(order.len());
        }
        assert!(counts.iter().all(|&c| c == counts[0]), "{counts:?}");
    }
}

/// The tiles a worker of a rank reads in an epoch, sorted.
fn tiles_read(tile_cells: &[u64], opts: &EpochOptions, epoch: u64) -> Vec<usize> {
    let mut tiles = EpochPlan::new(tile_cells, opts, epoch).unwrap().tiles_ahead(0, usize::MAX);
    tiles.sort();
    tiles
}

/// The tiles of group `g` of `groups`, sorted.
fn group_tiles(tile_cells: &[u64], groups: usize, seed: u64, g: usize) -> Vec<usize> {
    let of = tile_groups(tile_cells, groups, seed);
    (0..tile_cells.len()).filter(|&t| of[t] as usize == g && tile_cells[t] > 0).collect()
}

#[test]
fn one_rank_s_workers_each_read_their_group_every_epoch_in_another_order() {
    // Equal tiles and tiles of different sizes (members of a corpus), with a tile holding no selected cell.
    let equal = vec![50u64; 24];
    let unequal: Vec<u64> = (0..31).map(|t| if t == 7 { 0 } else { 30 + (t * 37 % 23) }).collect();
    for tiles in [&equal, &unequal] {
        for seed in 0..12 {
            for (workers, shuffle_tiles) in [(2usize, 1usize), (2, 3), (3, 2), (4, 3)] {
                let base = EpochOptions { shuffle_tiles, seed, ..EpochOptions::new(16) };
                let mut all: Vec<usize> = Vec::new();
                for worker in 0..workers {
                    let opts = placed(base.clone(), 0, 1, worker, workers);
                    let group = group_tiles(tiles, workers, seed, worker);
                    let orders: Vec<Vec<usize>> =
                        (0..4).map(|e| EpochPlan::new(tiles, &opts, e).unwrap().tiles_ahead(0, usize::MAX)).collect();
                    for (e, order) in orders.iter().enumerate() {
                        let mut sorted = order.clone();
                        sorted.sort();
                        assert_eq!(sorted, group, "seed {seed}, worker {worker} of {workers}, epoch {e}: its group");
                    }
                    assert!(orders.windows(2).any(|o| o[0] != o[1]), "the order within a group changes");
                    all.extend(group);
                }
                all.sort();
                let with_cells: Vec<usize> = (0..tiles.len()).filter(|&t| tiles[t] > 0).collect();
                assert_eq!(all, with_cells, "every tile in one group");
            }
        }
    }
    // The groups are seeded: not runs of consecutive tiles, and another seed deals them otherwise.
    let g0 = group_tiles(&equal, 4, 0, 0);
    assert!(g0.windows(2).any(|w| w[1] != w[0] + 1), "{g0:?}");
    assert_ne!(g0, group_tiles(&equal, 4, 1, 0));
}

#[test]
fn across_ranks_a_worker_leaves_its_group_only_at_its_rank_s_edge() {
    // Tiles of 30 to 52 cells: a group's end lies within half a tile of the rank's, so an edge worker's reads differ
    // from its group by at most one window at each edge. With `Wrap` the last rank's share runs on into the first group.
    let unequal: Vec<u64> = (0..90).map(|t| 30 + (t * 37 % 23)).collect();
    for seed in 0..8 {
        for (world, workers, shuffle_tiles) in [(2usize, 1usize, 2usize), (2, 3, 2), (3, 2, 4), (4, 2, 3)] {
            for remainder in [Remainder::Drop, Remainder::Wrap] {
                for rank in 0..world {
                    for worker in 0..workers {
                        let base = EpochOptions { shuffle_tiles, seed, remainder, ..EpochOptions::new(16) };
                        let opts = placed(base, rank, world, worker, workers);
                        let group = group_tiles(&unequal, world * workers, seed, rank * workers + worker);
                        let last = worker == workers - 1 && (rank < world - 1 || remainder == Remainder::Wrap);
                        // A worker at both edges of its rank's share may read a window beyond each.
                        let edges = usize::from(worker == 0 && rank > 0) + usize::from(last);
                        for e in 0..3 {
                            let read = tiles_read(&unequal, &opts, e);
                            let foreign = read.iter().filter(|t| group.binary_search(t).is_err()).count();
                            let missing = group.iter().filter(|t| read.binary_search(t).is_err()).count();
                            let what = format!(
                                "seed {seed}, {remainder:?}, rank {rank} of {world}, worker {worker} of {workers}, epoch {e}"
                            );
                            if edges > 0 {
                                let most = edges * shuffle_tiles;
                                assert!(foreign <= most && missing <= most, "{what}: {foreign} {missing}");
                            } else {
                                assert_eq!((foreign, missing), (0, 0), "{what}: inside the rank, exactly its group");
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn groups_too_small_for_two_windows_leave_the_tiles_ungrouped_and_windows_whole() {
    // 16 tiles for 4 workers with windows of 4: a group would be 4 tiles, one window every epoch. Ungrouped, each
    // worker's part is one window of 4 tiles, other tiles each epoch.
    let tiles = vec![50u64; 16];
    let opts = placed(EpochOptions { shuffle_tiles: 4, ..EpochOptions::new(32) }, 0, 1, 0, 4);
    let plan = EpochPlan::new(&tiles, &opts, 0).unwrap();
    assert!(plan.group_start.is_empty());
    assert!(plan.windows.iter().all(|w| w.units.len() == 4), "windows of 4 tiles");
    let (first, second) = (tiles_read(&tiles, &opts, 0), tiles_read(&tiles, &opts, 1));
    assert_eq!((first.len(), second.len()), (4, 4));
    assert_ne!(first, second, "other tiles each epoch, as ungrouped");
    // Grouped (70 tiles, 8 groups of 8 or 9): each group's windows as nearly equal as possible, none above 4 tiles.
    let tiles = vec![50u64; 70];
    let opts = placed(EpochOptions { shuffle_tiles: 4, ..EpochOptions::new(32) }, 0, 2, 0, 4);
    let plan = EpochPlan::new(&tiles, &opts, 0).unwrap();
    assert_eq!(plan.group_start.len(), 8);
    let sizes: Vec<usize> = plan.windows.iter().map(|w| w.units.len()).collect();
    assert!(sizes.iter().all(|&n| (3..=4).contains(&n)), "{sizes:?}");
    // Groups hold equal cells, not equal tiles: one tile of 1,000 cells and 19 of 10 make, for 2 workers, a group
    // of the large tile and the small ones dealt before it. Grouped only when both groups hold 2 windows of 4.
    let tiles: Vec<u64> = (0..20).map(|t| if t == 0 { 1000 } else { 10 }).collect();
    let (mut on, mut off) = (0, 0);
    for seed in 0..40 {
        let opts = placed(EpochOptions { shuffle_tiles: 4, seed, ..EpochOptions::new(32) }, 0, 1, 0, 2);
        let plan = EpochPlan::new(&tiles, &opts, 0).unwrap();
        let sizes = [group_tiles(&tiles, 2, seed, 0).len(), group_tiles(&tiles, 2, seed, 1).len()];
        assert_eq!(!plan.group_start.is_empty(), sizes.iter().all(|&n| n >= 8), "seed {seed}: groups of {sizes:?}");
        if plan.group_start.is_empty() { off += 1 } else { on += 1 }
    }
    assert!(on > 0 && off > 0, "both cases met: {on} grouped, {off} not");
}

#[test]
fn the_tile_order_lists_each_tile_the_batches_read_once_in_the_order_of_their_windows() {
    // Against the batches' cells: every tile they read is listed once (with one rank and worker, only those); the
    // tiles read by batches 0..=j are listed within the first tiles of batches 0..=j's windows (at most two
    // windows a batch past those read); and each prefix is what tiles_ahead gives the prefetcher.
    let tiles = [7u64, 9, 4, 12, 8, 8, 3, 10, 6, 9];
    let starts: Vec<u64> = std::iter::once(0)
        .chain(tiles.iter().scan(0, |s, &n| {
            *s += n;
            Some(*s)
        }))
        .collect();
    let tile_of = |c: u64| starts.partition_point(|&s| s <= c) - 1;
    for (shuffle, window, rank, world, worker, workers) in [
        (true, 2, 0, 1, 0, 1),
        (true, 3, 1, 2, 0, 1),
        (true, 1, 0, 1, 1, 3),
        (false, 2, 0, 1, 0, 1),
        (false, 2, 1, 3, 1, 2),
    ] {
        let base = EpochOptions { shuffle, shuffle_tiles: window, seed: 5, ..EpochOptions::new(5) };
        for epoch in 0..3 {
            let opts = placed(base.clone(), rank, world, worker, workers);
            let plan = EpochPlan::new(&tiles, &opts, epoch).unwrap();
            let order = plan.tile_order();
            let mut distinct = order.clone();
            distinct.sort_unstable();
            distinct.dedup();
            assert_eq!(distinct.len(), order.len(), "{opts:?} epoch {epoch}: {order:?}");
            let mut read_so_far: Vec<usize> = Vec::new();
            for batch in all_batches(&tiles, &opts, epoch) {
                for c in batch {
                    if !read_so_far.contains(&tile_of(c)) {
                        read_so_far.push(tile_of(c));
                    }
                }
                let within = (read_so_far.len() + 2 * window).min(order.len());
                for t in &read_so_far {
                    assert!(order[..within].contains(t), "{opts:?} epoch {epoch}: {t} not in {:?}", &order[..within]);
                }
            }
            if world == 1 && workers == 1 {
                assert_eq!(distinct.len(), read_so_far.len(), "{opts:?} epoch {epoch}");
            }
            for k in 0..=order.len() {
                assert_eq!(plan.tiles_ahead(0, k), order[..k], "{opts:?} epoch {epoch}");
            }
        }
    }
}
