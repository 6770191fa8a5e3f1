//! A corpus's obs, `filter` and `split` against the values each member was written with.

use std::path::Path;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int32Type};
use arrow_array::{Array, ArrayRef, Float32Array, Int64Array};
use dct_corpus::{Condition, Corpus, CorpusError, GeneKey, GeneSpace, Member, ObsValue};
use dct_dataset::dct_obs::{ArrowType, ColumnData, ColumnKind, ObsOptions, ObsSchemaBuilder, ObsWriteOptions, TileObs};
use dct_dataset::{CsrMatrix, DatasetWriter, WriterOptions};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::read::open;

/// What the test wrote for one member: per cell its cell type, donor, count (as f64) and flag.
#[derive(Default)]
pub(crate) struct Written {
    pub(crate) cell_type: Vec<Option<String>>,
    donor: Vec<String>,
    n_counts: Vec<f64>,
}

/// A member of `n` cells over genes g0..g4 with obs: `cell_type` (a category over `types`, some missing),
/// `donor` (a category), `n_counts` (int64 when `int_counts`, else float32) and, when `flag`, a bool column.
fn member(dir: &Path, n: usize, types: &[&str], donors: &[&str], int_counts: bool, seed: u64) -> Written {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let tile = 8usize;
    let options = WriterOptions { tile_size: tile as u64, n_chunks: 1, zstd_level: 3, ..WriterOptions::new(5) };
    let mut w = DatasetWriter::create(dir.to_str().unwrap(), options).unwrap();
    w.set_var_names((0..5).map(|g| format!("g{g}")).collect()).unwrap();
    let mut b = ObsSchemaBuilder::new();
    b.add_category("cell_type", types).unwrap();
    b.add_category("donor", donors).unwrap();
    b.add_plain("n_counts", if int_counts { ArrowType::Int64 } else { ArrowType::Float }).unwrap();
    let schema = b.finish();
    let labels = |name: &str| -> Arc<[String]> { schema.column(name).unwrap().categories.clone().unwrap().into() };
    let (type_labels, donor_labels) = (labels("cell_type"), labels("donor"));
    w.set_obs_schema(schema.clone(), &ObsWriteOptions { tiles_per_file: 2, zstd_level: 3 }).unwrap();
    let mut written = Written::default();
    for lo in (0..n).step_by(tile) {
        let rows = tile.min(n - lo);
        let indptr: Vec<i64> = (0..=rows as i64).collect();
        let indices: Vec<i32> = (0..rows).map(|r| (r % 5) as i32).collect();
        let values: Vec<u32> = vec![1; rows];
        let csr = dct_codec_csr(&indptr, &indices, &values, rows);
        let type_codes: Vec<i32> = (0..rows)
            .map(|_| if rng.random_bool(0.1) { -1 } else { rng.random_range(0..type_labels.len() as i32) })
            .collect();
        let donor_codes: Vec<i32> = (0..rows).map(|_| rng.random_range(0..donor_labels.len() as i32)).collect();
        let counts: Vec<f64> = (0..rows).map(|_| f64::from(rng.random_range(0..50u8))).collect();
        let counts_array: ArrayRef = if int_counts {
            Arc::new(Int64Array::from_iter_values(counts.iter().map(|&c| c as i64)))
        } else {
            Arc::new(Float32Array::from_iter_values(counts.iter().map(|&c| c as f32)))
        };
        for r in 0..rows {
            let t = type_codes[r];
            written.cell_type.push((t >= 0).then(|| type_labels[t as usize].clone()));
            written.donor.push(donor_labels[donor_codes[r] as usize].clone());
            written.n_counts.push(counts[r]);
        }
        let obs = TileObs::new()
            .with("cell_type", ColumnData::category(type_codes, type_labels.clone()))
            .with("donor", ColumnData::category(donor_codes, donor_labels.clone()))
            .with("n_counts", counts_array);
        w.push_tile_with_obs(csr, &obs).unwrap();
    }
    w.finish().unwrap();
    written
}

fn dct_codec_csr(indptr: &[i64], indices: &[i32], values: &[u32], rows: usize) -> dct_codec::CanonicalCsr {
    dct_codec::CanonicalCsr::from_csr(&CsrMatrix { n_rows: rows, n_cols: 5, indptr, indices, values }).unwrap()
}

pub(crate) struct Setup {
    pub(crate) _tmp: tempfile::TempDir,
    pub(crate) corpus: Corpus,
    pub(crate) written: Vec<Written>,
}

pub(crate) fn setup() -> Setup {
    let tmp = tempfile::tempdir().unwrap();
    let specs: [(usize, &[&str], &[&str], bool); 3] = [
        (30, &["T", "B"], &["d1", "d2"], true),
        (21, &["B", "NK", "T"], &["d3"], false),
        (27, &["Mono", "T"], &["d2", "d4", "d5"], true),
    ];
    let mut members = Vec::new();
    let mut written = Vec::new();
    for (i, (n, types, donors, ints)) in specs.iter().enumerate() {
        let dir = tmp.path().join(format!("m{i}"));
        written.push(member(&dir, *n, types, donors, *ints, i as u64 + 10));
        members.push(open(&dir, &format!("m{i}")));
    }
    let corpus = Corpus::open(members, &GeneKey::VarNames, &GeneSpace::Union).unwrap();
    Setup { _tmp: tmp, corpus, written }
}

pub(crate) fn options(dir: &Path) -> ObsOptions {
    ObsOptions { cache_dir: Some(dir.join("cache")), ..Default::default() }
}

/// Every cell's written values, in corpus order.
pub(crate) fn all<T: Clone>(written: &[Written], f: impl Fn(&Written) -> &Vec<T>) -> Vec<T> {
    written.iter().flat_map(|w| f(w).iter().cloned()).collect()
}

fn labels(codes: &ArrayRef, vocabulary: &[String]) -> Vec<Option<String>> {
    codes.as_primitive::<Int32Type>().iter().map(|c| c.map(|c| vocabulary[c as usize].clone())).collect()
}

#[test]
fn columns_vocabularies_and_values_across_members() {
    let s = setup();
    let obs = s.corpus.obs(&options(s._tmp.path())).unwrap();
    let names: Vec<&str> = obs.columns().iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["cell_type", "donor", "n_counts"]);
    let cell_type = obs.column("cell_type").unwrap();
    let vocabulary = cell_type.categories.clone().unwrap();
    let mut sorted = vocabulary.clone();
    sorted.sort();
    assert_eq!(sorted, ["B", "Mono", "NK", "T"], "one vocabulary: every member's categories once");
    assert_eq!(obs.column("n_counts").unwrap().data_type, arrow_schema::DataType::Float64, "int64 and float32");
    let cells: Vec<u64> = vec![77, 0, 40, 31, 55, 29, 30];
    obs.localize(&s.corpus, &["cell_type", "donor", "n_counts"]).unwrap();
    let got = obs.take(&s.corpus, &cells, &["cell_type", "donor", "n_counts"]).unwrap();
    let want_types = all(&s.written, |w| &w.cell_type);
    let want_donors = all(&s.written, |w| &w.donor);
    let want_counts = all(&s.written, |w| &w.n_counts);
    let pick = |v: &[Option<String>]| cells.iter().map(|&c| v[c as usize].clone()).collect::<Vec<_>>();
    assert_eq!(labels(&got[0].1, &vocabulary), pick(&want_types));
    let donors = obs.column("donor").unwrap().categories.clone().unwrap();
    let donor_values: Vec<Option<String>> = want_donors.into_iter().map(Some).collect();
    assert_eq!(labels(&got[1].1, &donors), pick(&donor_values));
    let counts = got[2].1.as_primitive::<Float64Type>();
    assert_eq!(counts.values().to_vec(), cells.iter().map(|&c| want_counts[c as usize]).collect::<Vec<_>>());
    let e = obs.take(&s.corpus, &[0], &["nope"]).unwrap_err();
    assert!(matches!(e, CorpusError::UnknownObsColumn { .. }) && e.to_string().contains("cell_type"), "{e}");
}

#[test]
fn filter_keeps_the_cells_meeting_every_condition() {
    let s = setup();
    let obs = s.corpus.obs(&options(s._tmp.path())).unwrap();
    let conditions = vec![
        ("cell_type".to_string(), Condition::OneOf(vec![ObsValue::Text("T".into()), ObsValue::Text("NK".into())])),
        ("n_counts".to_string(), Condition::Range(Some(10.0), None)),
    ];
    let chosen = s.corpus.filter(&obs, &conditions).unwrap();
    let types = all(&s.written, |w| &w.cell_type);
    let counts = all(&s.written, |w| &w.n_counts);
    let want: Vec<u64> = (0..s.corpus.n_cells())
        .filter(|&c| matches!(types[c as usize].as_deref(), Some("T" | "NK")) && counts[c as usize] >= 10.0)
        .collect();
    assert!(!want.is_empty() && (want.len() as u64) < s.corpus.n_cells());
    assert_eq!(chosen.n_cells(), want.len() as u64);
    let picked = s.corpus.select(&want).unwrap();
    assert_eq!(chosen.selection(), picked.selection());
    let range_on_category = vec![("cell_type".to_string(), Condition::Range(Some(1.0), None))];
    assert!(s.corpus.filter(&obs, &range_on_category).unwrap_err().to_string().contains("number column"));
}

#[test]
fn split_keeps_groups_whole_and_stays_put_when_members_are_added() {
    let s = setup();
    let obs = s.corpus.obs(&options(s._tmp.path())).unwrap();
    let fractions = vec![("train".to_string(), 0.6), ("val".to_string(), 0.2), ("test".to_string(), 0.2)];
    let parts = s.corpus.split(&obs, &fractions, Some("donor"), 7).unwrap();
    let donors = all(&s.written, |w| &w.donor);
    let mut owner: std::collections::HashMap<String, usize> = Default::default();
    let mut covered = Vec::new();
    for (p, (_, part)) in parts.iter().enumerate() {
        let (starts, ends) = part.selection().ranges();
        for (&a, &b) in starts.iter().zip(&ends) {
            for c in a..b {
                covered.push(c);
                let d = &donors[c as usize];
                assert_eq!(*owner.entry(d.clone()).or_insert(p), p, "donor {d} in two parts");
            }
        }
    }
    covered.sort_unstable();
    assert_eq!(covered, (0..s.corpus.n_cells()).collect::<Vec<_>>(), "disjoint and covering");
    let again = s.corpus.split(&obs, &fractions, Some("donor"), 7).unwrap();
    assert!(parts.iter().zip(&again).all(|(a, b)| a.1.selection() == b.1.selection()), "deterministic");
    // By cell, the same seed keeps every old cell in its part when a member is added at the end.
    let by_cell = s.corpus.split(&obs, &fractions, None, 3).unwrap();
    let dir = s._tmp.path().join("late");
    member(&dir, 12, &["T"], &["d9"], true, 99);
    let mut grown: Vec<Member> = s.corpus.members().to_vec();
    grown.push(open(&dir, "late"));
    let bigger = Corpus::open(grown, &GeneKey::VarNames, &GeneSpace::Union).unwrap();
    let bigger_obs = bigger.obs(&options(s._tmp.path())).unwrap();
    let grown_parts = bigger.split(&bigger_obs, &fractions, None, 3).unwrap();
    let old = s.corpus.n_cells();
    for ((_, a), (_, b)) in by_cell.iter().zip(&grown_parts) {
        let (b_starts, b_ends) = b.selection().ranges();
        let inside: Vec<(u64, u64)> =
            b_starts.into_iter().zip(b_ends).map(|(x, y)| (x, y.min(old))).filter(|(x, y)| x < y).collect();
        let (a_starts, a_ends) = a.selection().ranges();
        let mine: Vec<(u64, u64)> = a_starts.into_iter().zip(a_ends).collect();
        assert_eq!(inside, mine);
    }
    assert!(s.corpus.split(&obs, &[("a".into(), 0.5)], None, 0).is_err(), "fractions must add up to 1");
}

/// Cells of each part of `parts`, and the part of each cell.
fn part_sizes(parts: &[(String, Corpus)], n: u64) -> (Vec<u64>, Vec<usize>) {
    let mut part_of = vec![usize::MAX; n as usize];
    let sizes = parts
        .iter()
        .enumerate()
        .map(|(p, (_, part))| {
            let (starts, ends) = part.selection().ranges();
            for (&a, &b) in starts.iter().zip(&ends) {
                for c in a..b {
                    part_of[c as usize] = p;
                }
            }
            part.n_cells()
        })
        .collect();
    (sizes, part_of)
}

#[test]
fn split_by_groups_deals_parts_close_to_their_fractions_and_keeps_old_groups_when_members_are_added() {
    let tmp = tempfile::tempdir().unwrap();
    // Ten donors of uneven sizes in three members (none in two), then a late member with one old and one new donor.
    let specs: [(usize, &[&str]); 3] =
        [(60, &["d1", "d2", "d3", "d4"]), (50, &["d5", "d6", "d7"]), (40, &["d8", "d9", "d10"])];
    let mut members = Vec::new();
    let mut written = Vec::new();
    for (i, (n, donors)) in specs.iter().enumerate() {
        let dir = tmp.path().join(format!("m{i}"));
        written.push(member(&dir, *n, &["T"], donors, true, 40 + i as u64));
        members.push(open(&dir, &format!("m{i}")));
    }
    let corpus = Corpus::open(members.clone(), &GeneKey::VarNames, &GeneSpace::Union).unwrap();
    let obs = corpus.obs(&options(tmp.path())).unwrap();
    let donors = all(&written, |w| &w.donor);
    let n = corpus.n_cells();
    let mut group_size: std::collections::HashMap<&str, u64> = Default::default();
    for d in &donors {
        *group_size.entry(d.as_str()).or_default() += 1;
    }
    let largest = *group_size.values().max().unwrap() as f64;
    for fractions in [[0.6, 0.2, 0.2], [0.8, 0.1, 0.1], [0.5, 0.5, 0.0]] {
        let named: Vec<(String, f64)> =
            ["train", "val", "test"].iter().zip(fractions).map(|(k, f)| (k.to_string(), f)).collect();
        for seed in 0..20 {
            let parts = corpus.split(&obs, &named, Some("donor"), seed).unwrap();
            let (sizes, part_of) = part_sizes(&parts, n);
            assert_eq!(sizes.iter().sum::<u64>(), n, "covering");
            for (c, d) in donors.iter().enumerate() {
                let first = donors.iter().position(|x| x == d).unwrap();
                assert_eq!(part_of[c], part_of[first], "donor {d} in two parts");
            }
            // Dealt to the part furthest below its fraction: none ends more than the largest group above it, nor
            // more than the others' excess below it; a part of no fraction gets nothing.
            for (p, (&size, &f)) in sizes.iter().zip(&fractions).enumerate() {
                let target = f * n as f64;
                assert!(size as f64 <= target + largest, "{fractions:?} seed {seed}: part {p} has {size} of {n}");
                assert!(size as f64 >= target - 2.0 * largest, "{fractions:?} seed {seed}: part {p} has {size} of {n}");
                if f == 0.0 {
                    assert_eq!(size, 0);
                } else {
                    assert!(size > 0, "{fractions:?} seed {seed}: part {p} is empty; sizes {sizes:?}");
                }
            }
        }
    }
    // The seed changes the parts.
    let named = vec![("train".to_string(), 0.6), ("val".to_string(), 0.2), ("test".to_string(), 0.2)];
    let by_seed: Vec<Vec<usize>> =
        (0..5).map(|seed| part_sizes(&corpus.split(&obs, &named, Some("donor"), seed).unwrap(), n).1).collect();
    assert!(by_seed.iter().any(|p| p != &by_seed[0]), "five seeds gave one split");
    // A member added at the end: every old cell stays in its part; the old donor's new cells join it.
    let late = tmp.path().join("late");
    let late_written = member(&late, 30, &["T"], &["d3", "d11"], true, 77);
    members.push(open(&late, "late"));
    let grown = Corpus::open(members, &GeneKey::VarNames, &GeneSpace::Union).unwrap();
    let grown_obs = grown.obs(&options(tmp.path())).unwrap();
    for seed in 0..5 {
        let (_, before) = part_sizes(&corpus.split(&obs, &named, Some("donor"), seed).unwrap(), n);
        let (_, after) = part_sizes(&grown.split(&grown_obs, &named, Some("donor"), seed).unwrap(), grown.n_cells());
        assert_eq!(&after[..n as usize], &before[..], "seed {seed}: old cells moved");
        let d3 = before[donors.iter().position(|d| d == "d3").unwrap()];
        for (i, d) in late_written.donor.iter().enumerate() {
            if d == "d3" {
                assert_eq!(after[n as usize + i], d3, "seed {seed}: the late cells of d3 left its part");
            }
        }
    }
}

#[test]
fn split_by_groups_counts_the_cells_a_group_has_in_later_members() {
    // Donor A starts small in member 0 and has 500 cells in member 1; member 2 brings 50 donors of about 10 cells.
    // A's 505 cells against everyone else's 505 is the balanced split: A's later cells must count toward its part.
    let tmp = tempfile::tempdir().unwrap();
    let many: Vec<String> = (0..50).map(|d| format!("d{d}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let specs: [(usize, &[&str]); 3] = [(10, &["A", "B"]), (500, &["A"]), (500, &many)];
    let mut members = Vec::new();
    let mut written = Vec::new();
    for (i, (n, donors)) in specs.iter().enumerate() {
        let dir = tmp.path().join(format!("m{i}"));
        written.push(member(&dir, *n, &["T"], donors, true, 90 + i as u64));
        members.push(open(&dir, &format!("m{i}")));
    }
    let corpus = Corpus::open(members, &GeneKey::VarNames, &GeneSpace::Union).unwrap();
    let obs = corpus.obs(&options(tmp.path())).unwrap();
    let donors = all(&written, |w| &w.donor);
    let mut size: std::collections::HashMap<&str, u64> = Default::default();
    for d in &donors {
        *size.entry(d.as_str()).or_default() += 1;
    }
    // The groups that can still be placed once A is: the largest of them bounds how close a part can come.
    let largest_other = size.iter().filter(|(d, _)| **d != "A").map(|(_, &n)| n).max().unwrap() as f64;
    let n = corpus.n_cells();
    let named = vec![("train".to_string(), 0.5), ("test".to_string(), 0.5)];
    for seed in 0..10 {
        let (sizes, _) = part_sizes(&corpus.split(&obs, &named, Some("donor"), seed).unwrap(), n);
        for &got in &sizes {
            let off = (got as f64 - 0.5 * n as f64).abs();
            assert!(off <= largest_other, "seed {seed}: parts {sizes:?} of {n}, a group of {largest_other} at most");
        }
    }
}

/// A member of `n` cells whose obs hold only `n_counts`: no `donor` column.
fn member_without_donors(dir: &Path, n: usize) {
    let options = WriterOptions { tile_size: 8, n_chunks: 1, zstd_level: 3, ..WriterOptions::new(5) };
    let mut w = DatasetWriter::create(dir.to_str().unwrap(), options).unwrap();
    w.set_var_names((0..5).map(|g| format!("g{g}")).collect()).unwrap();
    let mut sb = ObsSchemaBuilder::new();
    sb.add_plain("n_counts", ArrowType::Int64).unwrap();
    w.set_obs_schema(sb.finish(), &ObsWriteOptions { tiles_per_file: 2, zstd_level: 3 }).unwrap();
    for lo in (0..n).step_by(8) {
        let rows = 8.min(n - lo);
        let indptr: Vec<i64> = (0..=rows as i64).collect();
        let indices: Vec<i32> = (0..rows as i32).map(|r| r % 5).collect();
        let csr = dct_codec_csr(&indptr, &indices, &vec![1; rows], rows);
        let counts: ArrayRef = Arc::new(Int64Array::from_iter_values((0..rows as i64).map(|r| r + lo as i64)));
        w.push_tile_with_obs(csr, &TileObs::new().with("n_counts", counts)).unwrap();
    }
    w.finish().unwrap();
}

#[test]
fn split_by_groups_deals_each_member_without_the_column_as_a_group_of_its_own() {
    // Five donors of 54 cells, then a member of 20 cells and one of 270 without a donor column. The two are groups
    // of their own: dealt as one (as they once were), the small one's part took the large one's cells too, and
    // the test part held half the corpus. Dealt apart, the small one fills the part left short and the large one
    // goes to train.
    let tmp = tempfile::tempdir().unwrap();
    let donors: Vec<String> = (0..5).map(|d| format!("d{d}")).collect();
    let donors: Vec<&str> = donors.iter().map(String::as_str).collect();
    let first = tmp.path().join("donors");
    member(&first, 270, &["T"], &donors, true, 5);
    let (small, large) = (tmp.path().join("small"), tmp.path().join("large"));
    member_without_donors(&small, 20);
    member_without_donors(&large, 270);
    let members = vec![open(&first, "donors"), open(&small, "small"), open(&large, "large")];
    let corpus = Corpus::open(members, &GeneKey::VarNames, &GeneSpace::Union).unwrap();
    let obs = corpus.obs(&options(tmp.path())).unwrap();
    let n = corpus.n_cells();
    let named = vec![("train".to_string(), 0.8), ("val".to_string(), 0.1), ("test".to_string(), 0.1)];
    for seed in 0..10 {
        let (sizes, part_of) = part_sizes(&corpus.split(&obs, &named, Some("donor"), seed).unwrap(), n);
        let part_of_member = |lo: usize, hi: usize| {
            let p = part_of[lo];
            assert!(part_of[lo..hi].iter().all(|&q| q == p), "seed {seed}: a member without donors in two parts");
            p
        };
        let (small_part, large_part) = (part_of_member(270, 290), part_of_member(290, 560));
        assert_eq!(large_part, 0, "seed {seed}: parts {sizes:?}");
        assert_ne!(small_part, 0, "seed {seed}: parts {sizes:?}");
        assert!(sizes[1] + sizes[2] <= n / 5, "seed {seed}: parts {sizes:?} of {n}");
    }
}

#[test]
fn a_column_of_two_kinds_is_refused_naming_both_members_and_the_others_stay_usable() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a");
    let a_truth = member(&a, 9, &["T"], &["d1"], true, 1);
    let b = tmp.path().join("b");
    // `donor` as numbers here.
    plain_donor_member(&b, ArrowType::Int64, Arc::new(Int64Array::from(vec![4i64])));
    let corpus = Corpus::open(vec![open(&a, "a"), open(&b, "b")], &GeneKey::VarNames, &GeneSpace::Union).unwrap();
    let obs = corpus.obs(&options(tmp.path())).unwrap();
    let e = obs.column("donor").unwrap_err();
    assert!(
        matches!(&e, CorpusError::ObsConflict { column, first, member, .. } if column == "donor" && first == "a" && member == "b"),
        "{e}"
    );
    assert!(e.to_string().contains("category") && e.to_string().contains("numeric"), "{e}");
    assert_eq!(obs.conflicts().len(), 1);
    assert!(obs.conflicts()[0].to_string() == e.to_string());
    // Left out of the columns, refused wherever it is used ...
    let names: Vec<&str> = obs.columns().iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["cell_type", "n_counts"]);
    assert!(matches!(obs.take(&corpus, &[0], &["donor"]), Err(CorpusError::ObsConflict { .. })));
    assert!(matches!(obs.localize(&corpus, &["donor"]), Err(CorpusError::ObsConflict { .. })));
    let split = corpus.split(&obs, &[("x".into(), 1.0)], Some("donor"), 0);
    assert!(matches!(split, Err(CorpusError::ObsConflict { .. })));
    // ... while the other columns read as in any corpus: member a's values, missing for member b's cell.
    obs.localize(&corpus, &["cell_type"]).unwrap();
    let cells: Vec<u64> = (0..10).collect();
    let got = obs.take(&corpus, &cells, &["cell_type"]).unwrap();
    let codes = got[0].1.as_primitive::<Int32Type>();
    assert_eq!(codes.len(), 10);
    assert!(codes.is_null(9), "member b lacks cell_type");
    let truth = a_truth.cell_type.clone();
    for (i, want) in truth.iter().enumerate() {
        let vocabulary = obs.column("cell_type").unwrap().categories.clone().unwrap();
        let label = codes.is_valid(i).then(|| vocabulary[codes.value(i) as usize].clone());
        assert_eq!(&label, want, "cell {i}");
    }
}

#[test]
fn split_by_cell_gives_each_part_its_fraction_of_every_member_within_one_cell() {
    let s = setup();
    let obs = s.corpus.obs(&options(s._tmp.path())).unwrap();
    let sizes = s.corpus.member_cells();
    for fractions in [[0.6, 0.2, 0.2], [0.8, 0.1, 0.1], [1.0 / 3.0, 1.0 / 3.0, 1.0 / 3.0], [0.5, 0.5, 0.0]] {
        let named: Vec<(String, f64)> =
            ["train", "val", "test"].iter().zip(fractions).map(|(k, f)| (k.to_string(), f)).collect();
        for seed in 0..10 {
            let parts = s.corpus.split(&obs, &named, None, seed).unwrap();
            let (_, part_of) = part_sizes(&parts, s.corpus.n_cells());
            assert!(part_of.iter().all(|&p| p < 3), "covering");
            for (p, (_, part)) in parts.iter().enumerate() {
                for (m, (&got, &n)) in part.member_cells().iter().zip(&sizes).enumerate() {
                    let want = fractions[p] * n as f64;
                    assert!((got as f64 - want).abs() <= 1.0, "{fractions:?} seed {seed}: member {m} part {p} {got}");
                }
            }
        }
    }
    // The seed orders each member's cells: another seed, other cells in each part.
    let named = vec![("a".to_string(), 0.5), ("b".to_string(), 0.5)];
    let first = |seed| s.corpus.split(&obs, &named, None, seed).unwrap()[0].1.selection().clone();
    assert!((1..5).any(|seed| first(seed) != first(0)), "five seeds gave one split");
}

#[test]
fn split_by_numbers_keeps_its_groups_when_a_member_stores_them_as_floats() {
    let tmp = tempfile::tempdir().unwrap();
    let mut members = Vec::new();
    for i in 0..2 {
        let dir = tmp.path().join(format!("m{i}"));
        member(&dir, 40, &["T"], &["d1"], true, 60 + i as u64);
        members.push(open(&dir, &format!("m{i}")));
    }
    let corpus = Corpus::open(members.clone(), &GeneKey::VarNames, &GeneSpace::Union).unwrap();
    let obs = corpus.obs(&options(tmp.path())).unwrap();
    // n_counts is int64 in the first members and float32 in the late one: floats across the grown corpus.
    let late = tmp.path().join("late");
    member(&late, 24, &["T"], &["d1"], false, 70);
    members.push(open(&late, "late"));
    let grown = Corpus::open(members, &GeneKey::VarNames, &GeneSpace::Union).unwrap();
    let grown_obs = grown.obs(&options(tmp.path())).unwrap();
    let named = vec![("train".to_string(), 0.6), ("val".to_string(), 0.2), ("test".to_string(), 0.2)];
    let n = corpus.n_cells();
    for seed in 0..5 {
        let (_, before) = part_sizes(&corpus.split(&obs, &named, Some("n_counts"), seed).unwrap(), n);
        let parts = grown.split(&grown_obs, &named, Some("n_counts"), seed).unwrap();
        let (_, after) = part_sizes(&parts, grown.n_cells());
        assert_eq!(&after[..n as usize], &before[..], "seed {seed}: old cells moved");
    }
}

#[test]
fn a_column_of_labels_in_some_members_and_strings_in_others_reads_as_strings() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b, c) = (tmp.path().join("a"), tmp.path().join("b"), tmp.path().join("c"));
    let a_donors = member(&a, 9, &["T"], &["d1", "d2"], true, 1).donor;
    let c_donors = member(&c, 5, &["B"], &["d9", "d3"], true, 3).donor;
    // `donor` as plain strings here (a column written without categories), one of them a number's text.
    let b_donors: Vec<String> = ["d2", "d9", "d2", "7"].map(String::from).to_vec();
    plain_donor_member(&b, ArrowType::String, Arc::new(arrow_array::StringArray::from(b_donors.clone())));
    // Labels first then strings, and strings first: the same column either way.
    type Members<'a> = &'a [(&'a Path, &'a str)];
    let orders: [(Members, Vec<String>); 2] = [
        (&[(&a, "a"), (&b, "b"), (&c, "c")], [a_donors.clone(), b_donors.clone(), c_donors.clone()].concat()),
        (&[(&b, "b"), (&a, "a")], [b_donors.clone(), a_donors.clone()].concat()),
    ];
    for (members, want) in orders {
        let members: Vec<Member> = members.iter().map(|(dir, name)| open(dir, name)).collect();
        let corpus = Corpus::open(members, &GeneKey::VarNames, &GeneSpace::Union).unwrap();
        let obs = corpus.obs(&options(tmp.path())).unwrap();
        assert!(obs.conflicts().is_empty());
        let column = obs.column("donor").unwrap();
        assert_eq!((column.kind, column.categories.is_none()), (ColumnKind::String, true));
        obs.localize(&corpus, &["donor"]).unwrap();
        let cells: Vec<u64> = (0..corpus.n_cells()).collect();
        let got = obs.take(&corpus, &cells, &["donor"]).unwrap();
        let got: Vec<Option<&str>> = got[0].1.as_string::<i32>().iter().collect();
        assert_eq!(got, want.iter().map(|d| Some(d.as_str())).collect::<Vec<_>>());
        // Chosen and split by their values as any string column.
        let d2 = vec![("donor".to_string(), Condition::OneOf(vec![ObsValue::Text("d2".into())]))];
        let chosen = corpus.filter(&obs, &d2).unwrap();
        let with_d2: Vec<u64> = cells.iter().copied().filter(|&i| want[i as usize] == "d2").collect();
        assert_eq!(chosen.selection(), corpus.select(&with_d2).unwrap().selection());
        // A number names the strings that read as it, as for a category of numbers.
        let seven = vec![("donor".to_string(), Condition::OneOf(vec![ObsValue::Number(7.0)]))];
        let with_seven: Vec<u64> = cells.iter().copied().filter(|&i| want[i as usize] == "7").collect();
        assert_eq!(corpus.filter(&obs, &seven).unwrap().selection(), corpus.select(&with_seven).unwrap().selection());
        let parts = corpus.split(&obs, &[("x".into(), 0.5), ("y".into(), 0.5)], Some("donor"), 0).unwrap();
        let part_of = |cell: u64| parts.iter().position(|(_, p)| p.selection().count_in(cell, cell + 1) == 1).unwrap();
        for i in &cells {
            for j in &cells {
                if want[*i as usize] == want[*j as usize] {
                    assert_eq!(part_of(*i), part_of(*j), "donor {} in one part", want[*i as usize]);
                }
            }
        }
    }
    // A numeric member beside them is a conflict, naming the first member's stored kind (a category), not the
    // string column the others make.
    let d = tmp.path().join("d");
    plain_donor_member(&d, ArrowType::Int64, Arc::new(Int64Array::from(vec![4i64])));
    let members = vec![open(&a, "a"), open(&b, "b"), open(&d, "d")];
    let corpus = Corpus::open(members, &GeneKey::VarNames, &GeneSpace::Union).unwrap();
    let e = corpus.obs(&options(tmp.path())).unwrap().column("donor").unwrap_err();
    assert!(
        matches!(&e, CorpusError::ObsConflict { first, first_kind, member, kind, .. }
            if first == "a" && *first_kind == "category" && member == "d" && *kind == "numeric"),
        "{e}"
    );
}

/// A member of one tile whose only obs column is `donor`, stored as `kind`, with a cell per value.
fn plain_donor_member(dir: &Path, kind: ArrowType, donors: ArrayRef) {
    let options = WriterOptions { tile_size: 8, n_chunks: 1, zstd_level: 3, ..WriterOptions::new(5) };
    let mut w = DatasetWriter::create(dir.to_str().unwrap(), options).unwrap();
    w.set_var_names((0..5).map(|g| format!("g{g}")).collect()).unwrap();
    let mut sb = ObsSchemaBuilder::new();
    sb.add_plain("donor", kind).unwrap();
    w.set_obs_schema(sb.finish(), &ObsWriteOptions { tiles_per_file: 2, zstd_level: 3 }).unwrap();
    let n = donors.len();
    let indptr: Vec<i64> = (0..=n as i64).collect();
    let indices: Vec<i32> = (0..n as i32).map(|r| r % 5).collect();
    let csr = dct_codec_csr(&indptr, &indices, &vec![1; n], n);
    w.push_tile_with_obs(csr, &TileObs::new().with("donor", donors)).unwrap();
    w.finish().unwrap();
}
