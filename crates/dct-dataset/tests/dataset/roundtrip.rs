//! Writer -> reader round trips against an in-memory source matrix, and the writer's atomicity rules.

use crate::common;

use common::{Truth, append_all, assert_batch, create_in, open_in, random_batches, random_truth};
use dct_codec::{CsrMatrix, ExceptionPolicy};
use dct_dataset::{
    Batch, Category, Dataset, DatasetError, DatasetWriter, LocalReads, ReadOptions, SparseRows, Store, StoreOptions,
    VerifyOptions, WriterOptions,
};
use dct_store::testing::{Throttle, counted, throttled};
use rand::SeedableRng;
use rand::seq::SliceRandom;

fn opts(n_genes: u64, tile_size: u64) -> WriterOptions {
    WriterOptions { tile_size, n_chunks: 3, zstd_level: 3, encode_threads: 2, ..WriterOptions::new(n_genes) }
}

fn check_all(ds: &Dataset, truth: &Truth, seed: u64) {
    for batch in random_batches(seed, truth.n_cells(), 40, 250) {
        assert_batch(&ds.get_batch_as::<u32>(&batch).unwrap(), truth, &batch);
        assert_eq!(ds.batch_nnz(&batch).unwrap(), truth.nnz_of(&batch));
    }
    // Every cell once, in a shuffled order, into one reused buffer.
    let mut all: Vec<u64> = (0..truth.n_cells()).collect();
    all.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(seed));
    let mut buf = Batch::<u32>::default();
    for chunk in all.chunks(97) {
        ds.get_batch_into(chunk, &mut buf).unwrap();
        assert_batch(&buf, truth, chunk);
    }
}

#[test]
fn local_round_trip_with_short_last_tile_and_side_files() {
    let truth = random_truth(1, 1003, 700, 0.03, false);
    let dir = tempfile::tempdir().unwrap();
    let url = dir.path().join("nested/ds");
    let url = url.to_str().unwrap();
    let mut w = DatasetWriter::create(url, opts(700, 100)).unwrap();
    append_all(&mut w, &truth, 2, 250);
    let mut order: Vec<i32> = (0..700).collect();
    order.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(3));
    let names: Vec<String> = (0..700).map(|g| format!("GENE{g}")).collect();
    w.set_gene_order(order.clone()).unwrap();
    w.set_var_names(names.clone()).unwrap();
    w.set_metadata(serde_json::json!({"source": "test"}));
    assert_eq!(w.n_cells(), 1003);
    let written = w.finish().unwrap();

    let ds = Dataset::open(url, ReadOptions { max_cached_tiles: 4, ..ReadOptions::default() }).unwrap();
    let m = ds.manifest();
    assert_eq!(m, &written);
    assert_eq!(m.version, 2);
    assert_eq!(m.tile_cells, [vec![100; 10], vec![3]].concat());
    assert_eq!(m.nnz(), truth.nnz());
    for t in 0..ds.n_tiles() {
        let (lo, hi) = ds.tile_bounds(t).unwrap();
        assert_eq!(m.tile_nnz[t], truth.nnz_of(&(lo..hi).collect::<Vec<_>>()));
        let len = std::fs::metadata(dir.path().join(format!("nested/ds/tiles/tile_{t:06}.dct"))).unwrap().len();
        assert_eq!(m.tile_bytes[t], len);
    }
    assert_eq!(m.metadata["source"], "test");
    assert_eq!(*ds.gene_order().unwrap().unwrap(), order);
    assert_eq!(*ds.var_names().unwrap().unwrap(), names);
    check_all(&ds, &truth, 4);
    assert!(ds.verify(&VerifyOptions::default(), |_, _| {}).is_ok());
    // No temporary files are left behind.
    let mut files: Vec<String> = walk(dir.path());
    files.sort();
    assert_eq!(files.len(), 11 + 3, "{files:?}");
    assert!(files.iter().all(|f| !f.contains('#')), "{files:?}");
    // The side files' digests are recorded, as computed from the files stored.
    let digest = |rel: &str| sha2_hex(&std::fs::read(dir.path().join("nested/ds").join(rel)).unwrap());
    let recorded: Vec<(&str, &str)> = m.side_file_sha256.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_eq!(
        recorded,
        [("gene_order.npy", digest("gene_order.npy").as_str()), ("var_names.txt", digest("var_names.txt").as_str())]
    );
}

fn sha2_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// A side file changed after the dataset was written (two gene names swapped: every count then read under the
/// other's name) is refused by readers and by `verify`, naming the file; a version 1 dataset records no digest.
#[test]
fn side_files_changed_after_writing_are_refused_by_readers_and_verify() {
    let truth = random_truth(5, 120, 30, 0.1, false);
    for version in [dct_format::Version::V2, dct_format::Version::V1] {
        let dir = tempfile::tempdir().unwrap();
        let url = dir.path().to_str().unwrap();
        let mut w = DatasetWriter::create(url, WriterOptions { version, ..opts(30, 50) }).unwrap();
        append_all(&mut w, &truth, 1, 50);
        let names: Vec<String> = (0..30).map(|g| format!("G{g}")).collect();
        w.set_var_names(names.clone()).unwrap();
        w.set_gene_order((0..30).rev().collect()).unwrap();
        let m = w.finish().unwrap();
        assert_eq!(m.side_file_sha256.len(), if version == dct_format::Version::V2 { 2 } else { 0 });
        assert!(
            !std::fs::read_to_string(dir.path().join("manifest.json")).unwrap().contains("side_file_sha256")
                || version == dct_format::Version::V2
        );
        let mut swapped = names.clone();
        swapped.swap(3, 4);
        std::fs::write(dir.path().join("var_names.txt"), swapped.join("\n") + "\n").unwrap();
        let ds = Dataset::open(url, ReadOptions::default()).unwrap();
        let verified = ds.verify(&VerifyOptions::default(), |_, _| {});
        if version == dct_format::Version::V1 {
            assert_eq!(*ds.var_names().unwrap().unwrap(), swapped, "nothing to check it against");
            continue;
        }
        let e = ds.var_names().unwrap_err();
        assert_eq!(e.category(), Category::SideFile, "{e}");
        let text = e.to_string();
        assert!(text.contains("var_names.txt") && text.contains("SHA-256") && text.contains("write the dataset again"));
        assert!(!verified.is_ok());
        let problems = format!("{:?}", verified.problems);
        assert!(problems.contains("var_names.txt") && problems.contains("SHA-256"), "{problems}");
        // The gene order, unchanged, still reads.
        assert_eq!(ds.gene_order().unwrap().unwrap().len(), 30);
    }
    // A digest for a file the dataset does not have, or not a digest: the manifest is invalid.
    let mut m = dct_dataset::Manifest::new(10, 5);
    m.tile_cells = vec![5];
    m.tile_nnz = vec![0];
    m.tile_bytes = vec![200];
    m.n_cells = 5;
    m.record_side_file("var_names.txt", b"x");
    assert!(m.validate().is_err(), "has_var_names is false");
    m.has_var_names = true;
    assert!(m.validate().is_ok());
    m.side_file_sha256.insert("var_names.txt".into(), "xyz".into());
    assert!(m.validate().is_err());
    // Upper-case hex reads as the digest it is; a name this reader does not know is kept, unchecked.
    m.side_file_sha256.insert("var_names.txt".into(), sha2_hex(b"x").to_uppercase());
    m.side_file_sha256.insert("obs/schema.json".into(), "later writers' business".into());
    assert!(m.validate().is_ok() && m.check_side_file("var_names.txt", b"x").is_ok());
    assert!(m.check_side_file("var_names.txt", b"y").is_err());
}

#[test]
fn local_tiles_read_the_same_mapped_or_read_and_a_truncated_or_missing_tile_is_named() {
    let truth = random_truth(5, 420, 300, 0.05, false);
    let dir = tempfile::tempdir().unwrap();
    let url = dir.path().join("ds");
    let url = url.to_str().unwrap();
    let mut w = DatasetWriter::create(url, opts(300, 100)).unwrap();
    append_all(&mut w, &truth, 6, 90);
    w.finish().unwrap();
    let open = |local_reads| {
        let store = StoreOptions { local_reads, ..StoreOptions::default() };
        Dataset::open(url, ReadOptions { max_cached_tiles: 2, store, ..ReadOptions::default() }).unwrap()
    };
    for mode in [LocalReads::MemoryMap, LocalReads::Read] {
        check_all(&open(mode), &truth, 7);
    }
    // Tile 1 loses its last byte (rewritten, as a copy would be, so no live map is affected); tile 3 disappears.
    let tile = |t: usize| dir.path().join(format!("ds/tiles/tile_{t:06}.dct"));
    let bytes = std::fs::read(tile(1)).unwrap();
    std::fs::remove_file(tile(1)).unwrap();
    std::fs::write(tile(1), &bytes[..bytes.len() - 1]).unwrap();
    std::fs::remove_file(tile(3)).unwrap();
    for mode in [LocalReads::MemoryMap, LocalReads::Read] {
        let ds = open(mode);
        let (lo, _) = ds.tile_bounds(1).unwrap();
        match ds.get_batch(&[lo]) {
            Err(DatasetError::Tile { category: Category::TileBytes, tile: 1, url: u, message }) => {
                assert!(u.ends_with("tiles/tile_000001.dct"), "{mode:?}: {u}");
                assert!(message.contains(&format!("{} bytes", bytes.len() - 1)), "{mode:?}: {message}");
            }
            other => panic!("{mode:?}: truncated tile gave {other:?}"),
        }
        let (lo, _) = ds.tile_bounds(3).unwrap();
        match ds.get_batch(&[lo]) {
            Err(DatasetError::Tile { category: Category::TileMissing, tile: 3, .. }) => {}
            other => panic!("{mode:?}: missing tile gave {other:?}"),
        }
        // The intact tiles still read.
        let cells: Vec<u64> = (0..100).chain(200..300).collect();
        assert_batch(&ds.get_batch_as::<u32>(&cells).unwrap(), &truth, &cells);
    }
}

fn walk(p: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(p).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            out.extend(walk(&e.path()));
        } else {
            out.push(e.path().display().to_string());
        }
    }
    out
}

#[test]
fn in_memory_round_trip_with_exceptions_and_float_input() {
    // 100000 genes: gaps above 65535; some counts above 65535.
    let truth = random_truth(5, 333, 100_000, 0.0002, true);
    let store = Store::memory("test");
    let mut w = create_in(
        store.clone(),
        "a/b",
        WriterOptions { exception_policy: ExceptionPolicy::Unlimited, ..opts(100_000, 64) },
    )
    .unwrap();
    append_all(&mut w, &truth, 6, 100);
    w.finish().unwrap();
    let ds = open_in(store.clone(), "a/b", ReadOptions::default()).unwrap();
    assert_eq!(ds.n_tiles(), 6);
    check_all(&ds, &truth, 7);
    let cells: Vec<u64> = (0..truth.n_cells()).collect();
    let wide = ds.get_batch_as::<f64>(&cells).unwrap();
    let exact = ds.get_batch_as::<u32>(&cells).unwrap();
    assert!(wide.values.iter().zip(&exact.values).all(|(&f, &u)| f == f64::from(u)));
    assert!(exact.values.iter().any(|&v| v > 65_535), "the test data has value exceptions");

    // f32 input (integral floats) gives the same dataset.
    let store2 = Store::memory("test");
    let mut w = create_in(store2.clone(), "", opts(5, 2)).unwrap();
    let m = CsrMatrix {
        n_rows: 3,
        n_cols: 5,
        indptr: &[0i64, 2, 2, 4],
        indices: &[4i32, 1, 0, 0],
        values: &[2.0f32, 1.0, 3.0, 4.0],
    };
    w.append(&m).unwrap();
    w.finish().unwrap();
    let ds = open_in(store2, "", ReadOptions::default()).unwrap();
    let b = ds.get_batch_as::<u32>(&[0, 1, 2]).unwrap();
    assert_eq!(b.row(0), (&[1, 4][..], &[1, 2][..]));
    assert_eq!(b.row(1), (&[][..], &[][..]));
    assert_eq!(b.row(2), (&[0][..], &[7][..])); // repeats summed
}

#[test]
fn manifest_is_the_last_put() {
    let truth = random_truth(8, 250, 50, 0.1, false);
    let (store, counter) = counted(&Store::memory("test"));
    let mut w = create_in(store.clone(), "ds", opts(50, 30)).unwrap();
    append_all(&mut w, &truth, 9, 80);
    w.set_var_names((0..50).map(|g| g.to_string()).collect()).unwrap();
    w.put_file("var.parquet", bytes::Bytes::from_static(b"not really parquet")).unwrap();
    let m = w.finish().unwrap();
    assert!(m.has_var_table && m.has_var_names && !m.has_gene_order);
    let counts = counter.counts();
    assert_eq!(counts.puts, 9 + 2 + 1, "one PUT per tile, per side file, and the manifest");
    assert_eq!(counts.put_paths.last().unwrap(), "ds/manifest.json");
    assert_eq!(counts.put_paths.iter().filter(|p| p.contains("manifest")).count(), 1);
}

#[test]
fn existing_destination_is_refused_unless_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let url = dir.path().to_str().unwrap();
    let big = random_truth(10, 500, 40, 0.1, false);
    let mut w = DatasetWriter::create(url, opts(40, 100)).unwrap();
    append_all(&mut w, &big, 11, 500);
    w.set_var_names((0..40).map(|g| g.to_string()).collect()).unwrap();
    w.finish().unwrap();

    let e = DatasetWriter::create(url, opts(40, 100)).unwrap_err();
    assert_eq!(e.category(), Category::AlreadyExists, "{e}");
    assert!(e.to_string().contains("overwrite"), "{e}");

    // An unrelated file is enough to refuse a location, and a refused location is left as it was: even files
    // named as a killed write's temporary files are, and those the writer would sweep.
    let other = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(other.path().join("tiles")).unwrap();
    let theirs = ["notes.txt", "notes.txt#2", "tiles/tile_000001.dct#1"];
    for f in theirs {
        std::fs::write(other.path().join(f), "hi").unwrap();
    }
    let e = DatasetWriter::create(other.path().to_str().unwrap(), opts(40, 100)).unwrap_err();
    assert_eq!(e.category(), Category::AlreadyExists);
    assert!(theirs.iter().all(|f| other.path().join(f).exists()), "a refused location was changed");
    // Taken over: the dataset's leftovers go, the other files stay, whatever their names.
    let w = DatasetWriter::create(other.path().to_str().unwrap(), WriterOptions { overwrite: true, ..opts(40, 100) });
    drop(w.unwrap());
    assert!(!other.path().join("tiles/tile_000001.dct#1").exists());
    assert!(other.path().join("notes.txt").exists() && other.path().join("notes.txt#2").exists());

    let small = random_truth(12, 150, 40, 0.1, false);
    let mut w = DatasetWriter::create(url, WriterOptions { overwrite: true, ..opts(40, 100) }).unwrap();
    // The old manifest is gone as soon as the new writer starts.
    assert_eq!(Dataset::open(url, ReadOptions::default()).unwrap_err().category(), Category::ManifestMissing);
    append_all(&mut w, &small, 13, 60);
    w.finish().unwrap();
    let ds = Dataset::open(url, ReadOptions::default()).unwrap();
    assert_eq!(ds.n_tiles(), 2);
    assert!(ds.var_names().unwrap().is_none());
    check_all(&ds, &small, 14);
    assert!(!dir.path().join("tiles/tile_000004.dct").exists(), "old tiles are removed");
    assert!(!dir.path().join("var_names.txt").exists(), "old side files are removed");
}

#[test]
fn temporary_files_of_a_killed_run_are_gone_when_the_dataset_is_finished() {
    // A write killed before its rename leaves a temporary file that listings do not show (`object_store`'s
    // `NAME#N`, or a hard link's `.NAME.link.PID.N`): the run that finishes the dataset removes them.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("tiles")).unwrap();
    let leftovers = ["tiles/tile_000001.dct#1", "tiles/.tile_000000.dct.link.99.0", "manifest.json#4"];
    for f in leftovers {
        std::fs::write(dir.path().join(f), b"partial").unwrap();
    }
    let url = dir.path().to_str().unwrap();
    let truth = random_truth(16, 250, 30, 0.1, false);
    let mut w = DatasetWriter::create(url, opts(30, 100)).unwrap();
    append_all(&mut w, &truth, 17, 100);
    w.finish().unwrap();
    for f in leftovers {
        assert!(!dir.path().join(f).exists(), "{f} is left");
    }
    check_all(&Dataset::open(url, ReadOptions::default()).unwrap(), &truth, 18);
}

#[test]
fn dropped_or_failed_writer_leaves_no_manifest() {
    let truth = random_truth(15, 300, 30, 0.1, false);
    let store = Store::memory("test");
    {
        let mut w = create_in(store.clone(), "dropped", opts(30, 50)).unwrap();
        append_all(&mut w, &truth, 16, 100);
    }
    let e = open_in(store.clone(), "dropped", ReadOptions::default()).unwrap_err();
    assert_eq!(e.category(), Category::ManifestMissing);

    // Invalid data: the append fails, and so does everything after it.
    let mut w = create_in(store.clone(), "bad", opts(30, 50)).unwrap();
    append_all(&mut w, &truth, 17, 100);
    let bad = CsrMatrix { n_rows: 1, n_cols: 30, indptr: &[0u32, 1], indices: &[3u32], values: &[-1i32] };
    let e = w.append(&bad).unwrap_err();
    assert!(matches!(e, DatasetError::Encode { .. }), "{e}");
    assert!(e.to_string().contains("negative"), "{e}");
    let good = CsrMatrix { n_rows: 1, n_cols: 30, indptr: &[0u32, 1], indices: &[3u32], values: &[1u32] };
    assert!(w.append(&good).is_err());
    assert!(w.finish().is_err());
    assert!(block_on_head(&store, "bad/manifest.json").is_none());

    // An encoding failure inside a background tile task surfaces later and stops the writer.
    let mut w = create_in(
        store.clone(),
        "exceptions",
        WriterOptions { exception_policy: ExceptionPolicy::AtMost(0), max_tiles_in_flight: 1, ..opts(30, 2) },
    )
    .unwrap();
    let big = CsrMatrix { n_rows: 2, n_cols: 30, indptr: &[0u32, 1, 1], indices: &[0u32], values: &[70_000u32] };
    let first = w.append(&big);
    let e = match first {
        Err(e) => e,
        Ok(()) => w.finish().unwrap_err(),
    };
    assert!(e.to_string().contains("tile 0"), "{e}");
    assert!(block_on_head(&store, "exceptions/manifest.json").is_none());
}

#[test]
fn a_dropped_or_failed_writer_has_stopped_writing_when_it_returns() {
    // Whatever the writer still had in flight is stored or given up before `drop` or the failing call returns,
    // so the output a caller then lists (to clear or resume it) does not change under it. The store's PUTs take
    // 100 ms and land even if the writer stops waiting for them, as a server's or a local file's do.
    let truth = random_truth(21, 400, 50, 0.2, false);
    let bad = CsrMatrix { n_rows: 1, n_cols: 50, indptr: &[0u32, 1], indices: &[3u32], values: &[-1i32] };
    let slow = Throttle { latency: std::time::Duration::from_millis(100), ..Throttle::default() };
    for fails in [false, true] {
        let store = throttled(&Store::memory("slow"), slow);
        let mut w = create_in(store.clone(), "ds", WriterOptions { max_tiles_in_flight: 8, ..opts(50, 50) }).unwrap();
        append_all(&mut w, &truth, 22, 400);
        if fails {
            assert!(w.append(&bad).is_err());
        }
        drop(w);
        let left = list_all(&store);
        assert_eq!(left.iter().filter(|f| f.starts_with("ds/tiles/")).count(), 8, "fails: {fails}: {left:?}");
        std::thread::sleep(std::time::Duration::from_millis(250));
        assert_eq!(list_all(&store), left, "fails: {fails}: the output changed after the writer was gone");
    }
}

fn list_all(store: &Store) -> Vec<String> {
    let store = store.clone();
    let listed = dct_store::runtime::block_on(async move { store.list("").await }).unwrap().unwrap();
    let mut names: Vec<String> = listed.into_iter().map(|o| o.path).collect();
    names.sort();
    names
}

fn block_on_head(store: &Store, path: &str) -> Option<u64> {
    let (store, path) = (store.clone(), path.to_string());
    dct_store::runtime::block_on(async move { store.size(&path).await }).unwrap().ok()
}

#[test]
fn writer_refuses_bad_side_data_but_keeps_going() {
    let store = Store::memory("test");
    let mut w = create_in(store.clone(), "", opts(3, 10)).unwrap();
    assert!(w.set_var_names(vec!["a".into(), "b\nc".into(), "d".into()]).is_err());
    assert!(w.set_var_names(vec!["a".into()]).is_err());
    assert!(w.set_gene_order(vec![0, 0, 1]).is_err());
    assert!(w.set_gene_order(vec![0, 1, 3]).is_err());
    assert!(w.put_file("tiles/tile_000000.dct", bytes::Bytes::new()).is_err());
    assert!(w.put_file("manifest.json", bytes::Bytes::new()).is_err());
    assert!(w.put_file("../x", bytes::Bytes::new()).is_err());
    let wrong = CsrMatrix { n_rows: 1, n_cols: 4, indptr: &[0u32, 0], indices: &[] as &[u32], values: &[] as &[u32] };
    assert_eq!(w.append(&wrong).unwrap_err().category(), Category::InvalidArgument);
    // Still usable.
    w.set_gene_order(vec![2, 0, 1]).unwrap();
    let m = CsrMatrix { n_rows: 1, n_cols: 3, indptr: &[0u32, 1], indices: &[2u32], values: &[9u32] };
    w.append(&m).unwrap();
    w.finish().unwrap();
    let ds = open_in(store, "", ReadOptions::default()).unwrap();
    assert_eq!(*ds.gene_order().unwrap().unwrap(), vec![2, 0, 1]);
    assert_eq!(ds.get_batch(&[0]).unwrap().row(0), (&[2][..], &[9.0][..]));
}

#[test]
fn empty_dataset() {
    let store = Store::memory("test");
    let w = create_in(store.clone(), "", opts(10, 10)).unwrap();
    let m = w.finish().unwrap();
    assert_eq!(m.n_tiles(), 0);
    let ds = open_in(store, "", ReadOptions::default()).unwrap();
    assert_eq!(ds.n_cells(), 0);
    assert_eq!(ds.get_batch(&[]).unwrap().n_rows(), 0);
    assert!(ds.get_batch(&[0]).is_err());
    assert!(ds.verify(&VerifyOptions::default(), |_, _| {}).is_ok());
}

#[test]
fn invalid_writer_options() {
    let store = Store::memory("test");
    for o in [
        opts(0, 10),
        opts(10, 0),
        WriterOptions { n_chunks: 0, ..opts(10, 10) },
        WriterOptions { zstd_level: 99, ..opts(10, 10) },
    ] {
        let e = create_in(store.clone(), "", o).unwrap_err();
        assert_eq!(e.category(), Category::InvalidArgument, "{e}");
    }
}

#[test]
fn map_rows_into_hands_each_row_as_stored_with_its_room_and_keeps_the_counts_written() {
    let truth = random_truth(21, 1500, 300, 0.05, true);
    let dir = tempfile::tempdir().unwrap();
    let url = dir.path().join("ds");
    let url = url.to_str().unwrap();
    let mut w = DatasetWriter::create(url, opts(300, 200)).unwrap();
    append_all(&mut w, &truth, 22, 300);
    w.finish().unwrap();
    // The transform of a corpus in small: odd genes dropped, the rest moved down and their counts doubled.
    let map = |indices: &[i32], values: &[u32], out_i: &mut [i32], out_v: &mut [u32]| {
        let mut k = 0;
        for (&g, &v) in indices.iter().zip(values).filter(|(g, _)| **g % 2 == 0) {
            (out_i[k], out_v[k]) = (g / 2, v.wrapping_mul(2));
            k += 1;
        }
        k
    };
    for threads in [1, 2] {
        let ds = Dataset::open(url, ReadOptions { decode_threads: threads, ..ReadOptions::default() }).unwrap();
        let mut out = Batch::<u32>::default();
        // Batches of more rows than one thread takes, so that the rows are split between threads too.
        for cells in random_batches(23, truth.n_cells(), 12, 900) {
            let written = ds.map_rows_into(&cells, &mut out, map).unwrap();
            assert_eq!(written.len(), cells.len());
            assert_eq!(out.indptr.len(), cells.len() + 1);
            assert_eq!(*out.indptr.last().unwrap() as u64, truth.nnz_of(&cells), "rooms are the stored rows");
            for (j, &c) in cells.iter().enumerate() {
                let want: Vec<(i32, u32)> = truth.rows[c as usize]
                    .iter()
                    .filter(|(g, _)| g % 2 == 0)
                    .map(|&(g, v)| (g / 2, v.wrapping_mul(2)))
                    .collect();
                let room = out.indptr[j] as usize;
                assert_eq!(out.indptr[j + 1] as usize - room, truth.rows[c as usize].len(), "cell {c}'s room");
                let got: Vec<(i32, u32)> = (room..room + written[j]).map(|e| (out.indices[e], out.values[e])).collect();
                assert_eq!(got, want, "cell {c} (row {j}), {threads} threads");
            }
        }
        // Out of range: an error naming the cell, and the scratch left empty.
        let err = ds.map_rows_into(&[0, truth.n_cells()], &mut out, map).unwrap_err();
        assert!(err.to_string().contains(&truth.n_cells().to_string()), "{err}");
        assert_eq!((out.indptr.as_slice(), out.indices.len()), (&[0i64][..], 0));
    }
    // A damaged tile is an error naming it, as a batch read's is.
    let tile = dir.path().join("ds/tiles/tile_000003.dct");
    let mut bytes = std::fs::read(&tile).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x40;
    std::fs::write(&tile, bytes).unwrap();
    let ds = Dataset::open(url, ReadOptions::default()).unwrap();
    let err = ds.map_rows_into(&[650], &mut Batch::<u32>::default(), map).unwrap_err();
    assert!(err.to_string().contains("tile_000003"), "{err}");
}

/// A dataset written again at its location after a reader opened it: side files, read when first asked for, would
/// name other genes than the tiles the reader reads, and its tiles hold other cells; both are refused as a changed
/// dataset, never read as the opened one's.
#[test]
fn side_files_and_tiles_read_after_the_dataset_was_written_again_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, seed: u64, cells: usize, prefix: &str| {
        let truth = random_truth(seed, cells, 80, 0.05, false);
        let url = dir.path().join(name).to_str().unwrap().to_string();
        let mut w = DatasetWriter::create(&url, opts(80, 100)).unwrap();
        append_all(&mut w, &truth, 1, 100);
        w.set_var_names((0..80).map(|g| format!("{prefix}{g}")).collect()).unwrap();
        w.set_gene_order((0..80).rev().collect()).unwrap();
        w.finish().unwrap();
        url
    };
    let url = write("ds", 1, 300, "A");
    let other = write("other", 2, 350, "B");
    let ds = Dataset::open(&url, ReadOptions::default()).unwrap();
    let unread_names = Dataset::open(&url, ReadOptions::default()).unwrap();
    std::fs::rename(&url, dir.path().join("old")).unwrap();
    std::fs::rename(&other, &url).unwrap();
    for got in [unread_names.var_names().map(|_| ()), ds.gene_order().map(|_| ())] {
        let e = got.unwrap_err();
        assert!(matches!(&e, DatasetError::FileChanged { .. }), "{e:?}");
        assert_eq!(e.category(), Category::DatasetChanged);
        let msg = e.to_string();
        assert!(msg.contains("it was written again: it now holds 350 cells in 4 tiles, 300 in 3"), "{msg}");
    }
    let e = ds.get_batch_as::<u32>(&[0]).unwrap_err();
    assert!(matches!(&e, DatasetError::Changed { tile: 0, .. }), "{e:?}");
    assert!(e.to_string().contains("it was written again"), "{e}");
    // Opened anew, it is the new dataset, names and all.
    assert_eq!(Dataset::open(&url, ReadOptions::default()).unwrap().var_names().unwrap().unwrap()[0], "B0");
}
