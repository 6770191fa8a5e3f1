//! A corpus read against an independent truth: each member's dense matrix, re-indexed by gene identifier in the
//! test (a map from identifier to column, built here), for random batches across members, selections, and genes
//! named by `var_names` or by a gene-table column.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use dct_corpus::{Corpus, CorpusError, GeneKey, GeneSpace, Member};
use dct_dataset::dct_obs::{VarTable, encode_var_parquet};
use dct_dataset::{
    CsrMatrix, Dataset, DatasetWriter, EpochOptions, EpochPlan, ReadOptions, SLOT_HEADER, SlotFill, SlotLayout,
    WriterOptions,
};
use dct_format::Version;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A member as the test knows it: its genes (symbols and IDs) and its dense counts, cells × genes.
struct Truth {
    symbols: Vec<String>,
    ids: Vec<String>,
    dense: Vec<Vec<u32>>,
}

/// Writes a member of `n_cells` random cells over `symbols` (each gene's ID is `ENSG` + its symbol) at `dir`.
fn member(dir: &Path, symbols: &[&str], n_cells: usize, version: Version, seed: u64) -> Truth {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let n_genes = symbols.len();
    let dense: Vec<Vec<u32>> = (0..n_cells)
        .map(|_| (0..n_genes).map(|_| if rng.random_bool(0.3) { rng.random_range(1..50) } else { 0 }).collect())
        .collect();
    let (mut indptr, mut indices, mut values) = (vec![0i64], Vec::new(), Vec::new());
    for row in &dense {
        for (g, &v) in row.iter().enumerate() {
            if v > 0 {
                indices.push(g as i32);
                values.push(v);
            }
        }
        indptr.push(indices.len() as i64);
    }
    let options =
        WriterOptions { tile_size: 16, n_chunks: 2, zstd_level: 3, version, ..WriterOptions::new(n_genes as u64) };
    let mut w = DatasetWriter::create(dir.to_str().unwrap(), options).unwrap();
    w.append(&CsrMatrix {
        n_rows: n_cells,
        n_cols: n_genes as u64,
        indptr: &indptr,
        indices: &indices,
        values: &values,
    })
    .unwrap();
    let symbols: Vec<String> = symbols.iter().map(|s| s.to_string()).collect();
    let ids: Vec<String> = symbols.iter().map(|s| format!("ENSG{s}")).collect();
    w.set_var_names(symbols.clone()).unwrap();
    let ids_column = Arc::new(arrow_array::StringArray::from(ids.clone())) as arrow_array::ArrayRef;
    let table = VarTable {
        index_name: None,
        index: symbols.clone(),
        columns: vec![("gene_ids".into(), ids_column)],
        ordered: vec![],
    };
    w.put_file("var.parquet", encode_var_parquet(&table).unwrap()).unwrap();
    w.finish().unwrap();
    Truth { symbols, ids, dense }
}

pub(crate) fn open(dir: &Path, name: &str) -> Member {
    let dataset = Dataset::open(dir.to_str().unwrap(), ReadOptions::default()).unwrap();
    Member { name: name.into(), dataset: Arc::new(dataset) }
}

/// The corpus row of member cell `cell`: `(column, count)` for each gene of the vocabulary the member has and
/// counted, in vocabulary order.
fn expected_row(truth: &Truth, by_ids: bool, cell: usize, genes: &[String]) -> Vec<(i32, u32)> {
    let names = if by_ids { &truth.ids } else { &truth.symbols };
    let column: HashMap<&str, usize> = names.iter().enumerate().map(|(j, g)| (g.as_str(), j)).collect();
    genes
        .iter()
        .enumerate()
        .filter_map(|(c, g)| column.get(g.as_str()).map(|&j| (c as i32, truth.dense[cell][j])))
        .filter(|&(_, v)| v > 0)
        .collect()
}

struct Setup {
    _tmp: tempfile::TempDir,
    members: Vec<Member>,
    truths: Vec<Truth>,
}

fn setup() -> Setup {
    let tmp = tempfile::tempdir().unwrap();
    let specs: [(&[&str], usize, Version); 3] = [
        (&["A", "B", "C", "D", "E"], 40, Version::V2),
        (&["D", "B", "F", "A"], 25, Version::V1),
        (&["G", "E", "C", "B", "A", "H"], 37, Version::V2),
    ];
    let mut members = Vec::new();
    let mut truths = Vec::new();
    for (i, (symbols, n, version)) in specs.iter().enumerate() {
        let dir = tmp.path().join(format!("m{i}"));
        truths.push(member(&dir, symbols, *n, *version, i as u64 + 1));
        members.push(open(&dir, &format!("m{i}")));
    }
    Setup { _tmp: tmp, members, truths }
}

/// Random batches across members (repeats, any order) checked row by row against the truth.
fn check(corpus: &Corpus, truths: &[Truth], by_ids: bool, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let n = corpus.n_cells();
    let mut all: Vec<u64> = (0..n).collect();
    all.shuffle(&mut rng);
    let mut batches: Vec<Vec<u64>> = all.chunks(17).map(<[u64]>::to_vec).collect();
    batches.push((0..30).map(|_| rng.random_range(0..n)).collect());
    for cells in batches {
        let got = corpus.get_batch_as::<u32>(&cells).unwrap();
        let located = corpus.locate(&cells).unwrap();
        assert_eq!(got.member, located.iter().map(|&(m, _)| m).collect::<Vec<_>>());
        assert_eq!(got.batch.n_genes as usize, corpus.n_genes());
        for (r, &(m, local)) in located.iter().enumerate() {
            let (lo, hi) = (got.batch.indptr[r] as usize, got.batch.indptr[r + 1] as usize);
            let row: Vec<(i32, u32)> =
                got.batch.indices[lo..hi].iter().copied().zip(got.batch.values[lo..hi].iter().copied()).collect();
            let want = expected_row(&truths[m as usize], by_ids, local as usize, corpus.genes());
            assert_eq!(row, want, "cell {} (member {m}, cell {local})", cells[r]);
        }
        slot_read_matches(corpus, &cells, &got);
    }
}

/// The batch read into a slot (the loader's path: planned once, the slot chosen by size) holds what
/// `get_batch_as` returned: the cells, row offsets, columns, counts and members, read back from the bytes by hand.
fn slot_read_matches(corpus: &Corpus, cells: &[u64], got: &dct_corpus::CorpusBatch<u32>) {
    let nnz = got.batch.indices.len();
    let layout = SlotLayout::new(cells.len() as u64, nnz as u64).unwrap();
    let body_len = (layout.used - SLOT_HEADER) as usize;
    let mut small = vec![0u64; (body_len - 8) / 8];
    let mut fits = vec![0u64; body_len.div_ceil(8) + 4];
    let (small_bytes, fits_bytes) = (bytes_mut(&mut small), bytes_mut(&mut fits));
    let (fill, members) = corpus.get_batch_into_slot::<u32>(cells, &mut [small_bytes, &mut fits_bytes[..]]).unwrap();
    assert_eq!(fill, SlotFill::Filled { slot: 1, nnz, layout });
    assert_eq!(members, got.member);
    let at = |off: u64| (off - SLOT_HEADER) as usize;
    let word = |off: usize| u32::from_ne_bytes(fits_bytes[off..off + 4].try_into().unwrap());
    let slot_cells: Vec<u64> = (0..cells.len())
        .map(|i| u64::from_ne_bytes(fits_bytes[at(layout.cells) + 8 * i..][..8].try_into().unwrap()))
        .collect();
    assert_eq!(slot_cells, cells);
    let crow: Vec<i64> = (0..=cells.len()).map(|i| i64::from(word(at(layout.crow) + 4 * i))).collect();
    assert_eq!(crow, got.batch.indptr);
    let col: Vec<i32> = (0..nnz).map(|i| word(at(layout.col) + 4 * i) as i32).collect();
    assert_eq!(col, got.batch.indices);
    let val: Vec<u32> = (0..nnz).map(|i| word(at(layout.val) + 4 * i)).collect();
    assert_eq!(val, got.batch.values);
}

/// Words as their bytes (8-byte aligned, as slots are).
fn bytes_mut(words: &mut [u64]) -> &mut [u8] {
    zerocopy::IntoBytes::as_mut_bytes(words)
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn union_intersection_and_a_given_vocabulary_read_as_the_reindexed_members() {
    let s = setup();
    let union = Corpus::open(s.members.clone(), &GeneKey::VarNames, &GeneSpace::Union).unwrap();
    assert_eq!(union.genes(), strings(&["A", "B", "C", "D", "E", "F", "G", "H"]));
    assert_eq!(union.n_cells(), 102);
    assert_eq!(union.member_cells(), [40, 25, 37]);
    check(&union, &s.truths, false, 1);

    let common = Corpus::open(s.members.clone(), &GeneKey::VarNames, &GeneSpace::Intersection).unwrap();
    assert_eq!(common.genes(), strings(&["A", "B"]));
    check(&common, &s.truths, false, 2);

    let vocabulary = GeneSpace::Given(strings(&["H", "Z", "B", "E", "A"]));
    let given = Corpus::open(s.members.clone(), &GeneKey::VarNames, &vocabulary).unwrap();
    assert_eq!(given.n_genes(), 5);
    check(&given, &s.truths, false, 3);

    // Member 0's genes but its last: that gene's index is the vocabulary's size, and it is still dropped.
    let first_four = GeneSpace::Given(strings(&["A", "B", "C", "D"]));
    let first_four = Corpus::open(s.members.clone(), &GeneKey::VarNames, &first_four).unwrap();
    check(&first_four, &s.truths, false, 4);
}

#[test]
fn genes_named_by_a_gene_table_column() {
    let s = setup();
    let ids = GeneKey::Column("gene_ids".into());
    let corpus = Corpus::open(s.members.clone(), &ids, &GeneSpace::Union).unwrap();
    assert_eq!(corpus.genes()[..3], strings(&["ENSGA", "ENSGB", "ENSGC"]));
    check(&corpus, &s.truths, true, 4);
    let e = Corpus::open(s.members.clone(), &GeneKey::Column("nope".into()), &GeneSpace::Union).unwrap_err();
    assert!(matches!(&e, CorpusError::GeneKey { member, .. } if member == "m0"), "{e}");
    assert!(e.to_string().contains("\"nope\"") && e.to_string().contains("gene_ids"), "{e}");
}

#[test]
fn selections_are_cells_of_their_own() {
    let s = setup();
    let corpus = Corpus::open(s.members.clone(), &GeneKey::VarNames, &GeneSpace::Union).unwrap();
    let picked: Vec<u64> = vec![101, 3, 45, 44, 3, 70, 66];
    let sub = corpus.select(&picked).unwrap();
    assert_eq!(sub.n_cells(), 6);
    assert_eq!(sub.member_cells(), [1, 2, 3]);
    let whole = corpus.get_batch_as::<u32>(&[3, 44, 45, 66, 70, 101]).unwrap();
    assert_eq!(sub.get_batch_as::<u32>(&[0, 1, 2, 3, 4, 5]).unwrap(), whole, "in corpus order");
    check(&sub, &s.truths, false, 5);
    let mask: Vec<bool> = (0..sub.n_cells()).map(|i| i % 2 == 0).collect();
    let half = sub.select_mask(&mask).unwrap();
    assert_eq!(half.member_of(&[0, 1, 2]).unwrap(), [0, 1, 2]);
    let e = sub.get_batch_as::<u32>(&[0, 6]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "cell 6 (position 1 of the request) is out of range: there are 6 cells",
        "the readers' own out-of-range error"
    );
}

#[test]
fn members_that_cannot_be_placed_are_refused_by_name() {
    let s = setup();
    let tmp = tempfile::tempdir().unwrap();
    let twice = tmp.path().join("twice");
    member(&twice, &["A", "B", "A"], 5, Version::V2, 9);
    let mut members = s.members.clone();
    members.push(open(&twice, "twice"));
    let e = Corpus::open(members.clone(), &GeneKey::VarNames, &GeneSpace::Union).unwrap_err();
    assert!(matches!(&e, CorpusError::DuplicateGene { member, gene } if member == "twice" && gene == "A"), "{e}");
    assert!(e.to_string().contains("a gene key such as"), "{e}");
    // By a gene-table column, the advice is not that column's kind again: the table lists one gene twice.
    let e = Corpus::open(members.clone(), &GeneKey::Column("gene_ids".into()), &GeneSpace::Union).unwrap_err();
    let text = e.to_string();
    assert!(matches!(&e, CorpusError::GeneKey { member, .. } if member == "twice"), "{e}");
    assert!(text.contains("\"gene_ids\"") && text.contains("\"ENSGA\" in two rows"), "{e}");
    assert!(!text.contains("a gene key such as"), "{e}");
    let mut same_name = s.members.clone();
    same_name.push(s.members[0].clone());
    let e = Corpus::open(same_name, &GeneKey::VarNames, &GeneSpace::Union).unwrap_err();
    assert!(e.to_string().contains("two members are named \"m0\""), "{e}");
}

#[test]
fn an_epoch_plan_over_the_corpus_covers_the_selection_and_fetches_only_its_tiles() {
    let s = setup();
    let corpus = Corpus::open(s.members.clone(), &GeneKey::VarNames, &GeneSpace::Union).unwrap();
    // Member 0's cells 0..10 (its tile 0) and member 2's cells 25..37 (its tiles 1 and 2); nothing of member 1.
    let picked: Vec<u64> = (0..10).chain(90..102).collect();
    let sub = corpus.select(&picked).unwrap().reopened(&ReadOptions::default()).unwrap();
    let tile_cells = sub.tile_cells();
    assert_eq!(tile_cells.len(), sub.n_tiles());
    assert_eq!(tile_cells, [10, 0, 0, 0, 0, 0, 7, 5], "3 + 2 + 3 member tiles of 16 cells");
    let mut plan = EpochPlan::new(&tile_cells, &EpochOptions { shuffle_tiles: 2, ..EpochOptions::new(5) }, 3).unwrap();
    let mut seen = Vec::new();
    for j in 0..plan.n_batches() {
        sub.prefetch(&plan.tiles_ahead(j, 4)).unwrap();
        let cells = plan.batch(j).unwrap();
        let got = sub.get_batch_as::<u32>(&cells).unwrap();
        assert_eq!(
            got,
            corpus.get_batch_as::<u32>(&cells.iter().map(|&c| picked[c as usize]).collect::<Vec<_>>()).unwrap()
        );
        seen.extend(cells);
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..22).collect::<Vec<u64>>(), "every selected cell once");
    let fetched: Vec<u64> = sub.members().iter().map(|m| m.dataset.stats().tiles_fetched).collect();
    assert_eq!(fetched, [1, 0, 2], "only tiles holding selected cells are fetched, each once");
    assert_eq!((sub.tile_of(6), sub.tile_of(8)), (Some((2, 1)), None));
    assert_eq!(sub.release_tiles_except(&[7]), 2, "member 0's tile and member 2's tile 1 are given back");
}

#[test]
fn a_weighted_epoch_gives_each_member_its_share_in_whole_passes() {
    let s = setup();
    let corpus = Corpus::open(s.members.clone(), &GeneKey::VarNames, &GeneSpace::Union).unwrap();
    let weights = [1.0, 2.0, 1.0];
    let units = corpus.weighted_units(&weights, 100_000, 9, 0).unwrap();
    assert_eq!(units, corpus.weighted_units(&weights, 100_000, 9, 0).unwrap(), "deterministic in (seed, epoch)");
    assert_ne!(units, corpus.weighted_units(&weights, 100_000, 9, 1).unwrap());
    let tile_cells = corpus.tile_cells();
    let opts = EpochOptions { shuffle_tiles: 3, ..EpochOptions::new(1000) };
    let mut plan = EpochPlan::with_units(&tile_cells, units, &opts, 0).unwrap();
    let mut draws = vec![0u64; corpus.n_cells() as usize];
    for j in 0..plan.n_batches() {
        for c in plan.batch(j).unwrap() {
            draws[c as usize] += 1;
        }
    }
    let per_member: Vec<u64> = [0..40, 40..65, 65..102].iter().map(|r| draws[r.clone()].iter().sum()).collect();
    assert_eq!(per_member, [25_000, 50_000, 25_000], "shares exactly in proportion to the weights");
    // Whole passes first: every cell of a member drawn as often as any other, give or take one.
    for r in [0..40, 40..65, 65..102] {
        let (lo, hi) = (draws[r.clone()].iter().min().unwrap(), draws[r].iter().max().unwrap());
        assert!(hi - lo <= 1, "{lo}..{hi}");
    }
    let e = corpus.weighted_units(&[1.0, 0.0], 10, 0, 0).unwrap_err();
    assert!(e.to_string().contains("2 weights for 3 members"), "{e}");
    // An epoch of 10^12 cells over these 102 would be planned in memory in proportion: refused at once.
    let e = corpus.weighted_units(&weights, 1_000_000_000_000, 9, 0).unwrap_err();
    assert!(matches!(e, CorpusError::InvalidArgument(_)), "{e:?}");
    assert!(e.to_string().contains("ask for fewer cells an epoch"), "{e}");
    assert!(e.to_string().contains("more than 2000000 tile draws"), "{e}");
    let per_pass = tile_cells.iter().filter(|&&c| c > 0).count() as u64;
    let most = dct_corpus::MAX_EPOCH_UNITS / per_pass * 100; // about as many passes as the limit allows
    assert!(corpus.weighted_units(&weights, most / 10, 9, 0).is_ok(), "an epoch of many passes within it");
}

#[test]
fn a_tile_cap_bounds_the_tiles_the_members_keep_together_and_reads_stay_exact() {
    let s = setup(); // 3 members of 16-cell tiles: 3 + 2 + 3 tiles
    let uncapped = Corpus::open(s.members.clone(), &GeneKey::VarNames, &GeneSpace::Union).unwrap();
    check(&uncapped, &s.truths, false, 5);
    // Each member's reader keeps its own tiles: here all 8.
    assert_eq!(uncapped.release_tiles_except(&[]), 8);
    let capped = uncapped.with_tile_cap(2);
    check(&capped, &s.truths, false, 6);
    assert!(capped.release_tiles_except(&[]) <= 2);
    // The cap keeps the tiles read last: reading them again fetches nothing.
    let cells = [0, 45, 46]; // member 0's first tile, member 1's first tile
    capped.get_batch_as::<u32>(&cells).unwrap();
    let fetched = || s.members.iter().map(|m| m.dataset.stats().tiles_fetched).sum::<u64>();
    let before = fetched();
    capped.get_batch_as::<u32>(&[1, 47]).unwrap();
    assert_eq!(fetched(), before, "the two tiles read last are kept");
    capped.get_batch_as::<u32>(&[70]).unwrap(); // member 2's first tile: member 0's tile falls out
    assert_eq!(capped.release_tiles_except(&[]), 2);
    // Corpora made from it by choosing cells share its cap.
    let chosen = capped.select(&(0..102).step_by(3).collect::<Vec<_>>()).unwrap();
    chosen.get_batch_as::<u32>(&(0..chosen.n_cells()).collect::<Vec<_>>()).unwrap();
    assert!(capped.release_tiles_except(&[]) <= 2);
    // A read that fails in its last member keeps no more: the tiles the members before it loaded are kept under
    // the cap as a read's are.
    let tile = s._tmp.path().join("m2/tiles/tile_000000.dct");
    let mut bytes = std::fs::read(&tile).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x10;
    std::fs::write(&tile, bytes).unwrap();
    let all_tiles: Vec<u64> = vec![0, 16, 32, 40, 56, 65];
    let e = capped.get_batch_as::<u32>(&all_tiles).unwrap_err();
    assert!(e.to_string().contains("m2"), "{e}");
    assert!(capped.release_tiles_except(&[]) <= 2);
    assert!(capped.batch_nnz(&[0, 16, 32, 40, 56]).is_ok());
    assert!(capped.release_tiles_except(&[]) <= 2, "batch_nnz's tiles are kept under the cap too");
}

#[test]
fn at_a_window_the_members_keep_the_tiles_read_soonest_within_the_cache_size() {
    let s = setup(); // 3 members of 16-cell tiles: 3 + 2 + 3 corpus tiles (0..3, 3..5, 5..8)
    let opened = Corpus::open(s.members.clone(), &GeneKey::VarNames, &GeneSpace::Union).unwrap();
    let corpus = opened.reopened(&ReadOptions { max_cached_tiles: 5, ..ReadOptions::default() }).unwrap();
    let every_tile: Vec<u64> = vec![0, 16, 32, 40, 56, 65, 81, 97];
    let held = |c: &Corpus| -> Vec<usize> {
        let mut v: Vec<usize> = c
            .members()
            .iter()
            .enumerate()
            .flat_map(|(m, member)| member.dataset.cached_tiles().into_iter().map(move |t| [0, 3, 5][m] + t))
            .collect();
        v.sort_unstable();
        v
    };
    // Without planned passes, every tile but the windows ahead is given back.
    corpus.get_batch_as::<u32>(&every_tile).unwrap();
    assert_eq!(held(&corpus).len(), 8, "each member's cache holds its own tiles");
    assert_eq!(corpus.release_tiles_for(&[6], 1), 7);
    assert_eq!(held(&corpus), [6]);
    // Planned: this pass reads 6, 2, 0 and the next 4, 1, 7, 3, 6 (5 is in neither). At a window of 1 tile needing
    // tile 6, the cache of 5 keeps 6 and, within the 3 places left, the soonest read: 2 and 0 (this pass), then 4.
    corpus.get_batch_as::<u32>(&every_tile).unwrap();
    corpus.plan_passes(&[6, 2, 0], &[4, 1, 7, 3, 6]);
    assert_eq!(corpus.release_tiles_for(&[6], 1), 4);
    assert_eq!(held(&corpus), [0, 2, 4, 6]);
    let rows = corpus.get_batch_as::<u32>(&every_tile).unwrap();
    assert_eq!(rows, opened.get_batch_as::<u32>(&every_tile).unwrap(), "reads stay exact");
    // Tile 2's window: 6 is read now, so it is next read in the next pass, after 4 and 1 (and 0, still to come).
    assert_eq!(corpus.release_tiles_for(&[2], 1), 4);
    assert_eq!(held(&corpus), [0, 1, 2, 4]);
}
