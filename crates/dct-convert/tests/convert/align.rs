//! `align_members`: a corpus's members written again in the vocabulary's gene order read the same rows as the
//! members themselves (whose rows the corpus re-orders), with their obs and gene names; running it again writes
//! nothing; colliding names and members without a gene of the vocabulary are refused.

use std::sync::Arc;

use dct_convert::{AlignOptions, ConvertOptions, SubsetOptions, align_members, convert, subset};
use dct_corpus::{Corpus, GeneKey, GeneSpace, Member};
use dct_dataset::Dataset;
use dct_dataset::dct_obs::ObsOptions;

use crate::support::testdata;

/// `items` in a seeded order of their own (sorted by a multiplicative hash of their position and `seed`).
fn shuffled<T: Clone>(items: &[T], seed: u64) -> Vec<T> {
    let mut keyed: Vec<(u64, T)> = items
        .iter()
        .enumerate()
        .map(|(i, x)| {
            ((i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seed.wrapping_mul(0xBF58_476D_1CE4_E5B9), x.clone())
        })
        .collect();
    keyed.sort_by_key(|(k, _)| k.rotate_left(17));
    keyed.into_iter().map(|(_, x)| x).collect()
}

fn open_corpus(urls: &[String], vocabulary: &[String]) -> Corpus {
    let members = urls
        .iter()
        .map(|u| Member { name: u.clone(), dataset: Arc::new(Dataset::open(u, Default::default()).unwrap()) })
        .collect();
    Corpus::open(members, &GeneKey::VarNames, &GeneSpace::Given(vocabulary.to_vec())).unwrap()
}

#[test]
fn aligned_members_read_the_rows_of_the_members_without_reordering_them() {
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("source");
    let mut opts = ConvertOptions::new(source.to_str().unwrap());
    opts.tile_size = 64;
    opts.level = 1;
    convert(&[testdata("inputs/pbmc200/pbmc200.h5ad")], &opts, &Default::default(), false, |_| {}).unwrap();
    let source = source.to_str().unwrap().to_string();
    let names: Vec<String> = Dataset::open(&source, Default::default()).unwrap().var_names().unwrap().unwrap().to_vec();

    // Two members of different cells, each with 80% of the genes in an order of its own, in folders named alike.
    let mut members = Vec::new();
    for (m, cells) in [(0u64, 0..120u64), (1, 120..200)] {
        let genes: Vec<String> = shuffled(&names, 10 + m).into_iter().take(names.len() * 4 / 5).collect();
        let out = tmp.path().join(format!("m{m}")).join("pbmc");
        let opts = SubsetOptions {
            cells: Some(cells.collect()),
            genes: Some(genes.clone()),
            listed_gene_order: true,
            tile_size: Some(32),
            level: 1,
            ..SubsetOptions::default()
        };
        subset(&source, out.to_str().unwrap(), &opts).unwrap();
        let stored = Dataset::open(out.to_str().unwrap(), Default::default()).unwrap().var_names().unwrap().unwrap();
        assert_eq!(stored.as_slice(), genes.as_slice(), "listed_gene_order stores the genes as listed");
        members.push(out.to_str().unwrap().to_string());
    }
    // A vocabulary of 70% of the genes in a third order, and two genes no member has.
    let mut vocabulary: Vec<String> = shuffled(&names, 99).into_iter().take(names.len() * 7 / 10).collect();
    vocabulary.insert(5, "NOT_A_GENE_A".into());
    vocabulary.push("NOT_A_GENE_B".into());

    let out_dir = tmp.path().join("aligned");
    let out_url = out_dir.to_str().unwrap();
    let options = AlignOptions { genes: GeneSpace::Given(vocabulary.clone()), level: 1, ..AlignOptions::default() };
    // The two members would both be written as `pbmc`.
    let clash = align_members(&members, out_url, &options).unwrap_err().to_string();
    assert!(clash.contains("pbmc") && clash.contains("distinct"), "{clash}");
    let renamed: Vec<String> = members
        .iter()
        .enumerate()
        .map(|(m, url)| {
            let to = tmp.path().join(format!("member_{m}"));
            std::fs::rename(url, &to).unwrap();
            to.to_str().unwrap().to_string()
        })
        .collect();
    let written = align_members(&renamed, out_url, &options).unwrap();
    assert!(written.iter().all(|w| !w.report.already_done));
    let aligned: Vec<String> = written.iter().map(|w| w.output.clone()).collect();
    assert_eq!(aligned, [format!("{out_url}/member_0"), format!("{out_url}/member_1")]);

    let before = open_corpus(&renamed, &vocabulary);
    let after = open_corpus(&aligned, &vocabulary);
    for m in 0..2 {
        assert!(!before.gene_map().member(m).in_vocabulary_order(), "the members' own orders need re-ordering");
        assert!(after.gene_map().member(m).in_vocabulary_order(), "aligned member {m}");
        assert_eq!(after.gene_map().member(m).kept(), before.gene_map().member(m).kept());
        // Its genes: the vocabulary's that the member has, in the vocabulary's order.
        let own = Dataset::open(&renamed[m], Default::default()).unwrap().var_names().unwrap().unwrap();
        let want: Vec<&String> = vocabulary.iter().filter(|g| own.contains(g)).collect();
        let got = Dataset::open(&aligned[m], Default::default()).unwrap().var_names().unwrap().unwrap();
        assert_eq!(got.iter().collect::<Vec<_>>(), want);
    }
    // The same rows, every cell, in a shuffled request order: one corpus re-orders them, the other renumbers.
    let cells = shuffled(&(0..before.n_cells()).collect::<Vec<_>>(), 7);
    let (a, b) = (before.get_batch_as::<u32>(&cells).unwrap(), after.get_batch_as::<u32>(&cells).unwrap());
    assert!(a.batch.indices.len() > 1000, "the rows hold entries");
    assert_eq!((a.batch.indptr, a.batch.indices, a.batch.values), (b.batch.indptr, b.batch.indices, b.batch.values));
    assert_eq!(a.member, b.member);
    // The obs come along, column by column.
    for m in 0..2 {
        let (src, dst) = (
            Dataset::open(&renamed[m], Default::default()).unwrap(),
            Dataset::open(&aligned[m], Default::default()).unwrap(),
        );
        let (src_obs, dst_obs) = (src.obs(ObsOptions::default()).unwrap(), dst.obs(ObsOptions::default()).unwrap());
        let every: Vec<u64> = (0..src.n_cells()).collect();
        let columns: Vec<String> = src_obs.columns().into_iter().map(|(n, _)| n.to_string()).collect();
        assert!(!columns.is_empty());
        let names: Vec<&str> = columns.iter().map(String::as_str).collect();
        src_obs.localize_blocking(&names).unwrap();
        dst_obs.localize_blocking(&names).unwrap();
        for name in &columns {
            let (x, y) = (src_obs.take_column(&every, name).unwrap(), dst_obs.take_column(&every, name).unwrap());
            assert_eq!(x.as_ref(), y.as_ref(), "obs column {name} of member {m}");
        }
    }

    // Again: each member is found written, nothing is rewritten.
    let again = align_members(&renamed, out_url, &options).unwrap();
    assert!(again.iter().all(|w| w.report.already_done), "{again:?}");
    // A member with no gene of the vocabulary is refused, naming it, before anything is written.
    let none = AlignOptions { genes: GeneSpace::Given(vec!["NOT_A_GENE_A".into()]), ..options };
    let err = align_members(&renamed, tmp.path().join("none").to_str().unwrap(), &none).unwrap_err().to_string();
    assert!(err.contains("member_0") && err.contains("no member has any gene of the given vocabulary"), "{err}");
    assert!(!tmp.path().join("none").exists());
}
