//! Bad inputs give clear errors (naming the file, line or object, and what to do) and never panic.

use crate::common;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use common::*;
use dct_input::{InputError, open_input, scan};

const FEATURES: &str = "G0\tA\tGene Expression\nG1\tB\tGene Expression\nG2\tC\tGene Expression\n";
const BARCODES: &str = "AAA-1\nCCC-1\n";

/// A Matrix Market folder with the given matrix text and the 3-gene, 2-cell tables above.
fn folder(name: &str, matrix: &str) -> PathBuf {
    let d = scratch(name);
    fs::write(d.join("matrix.mtx"), matrix).unwrap();
    fs::write(d.join("features.tsv"), FEATURES).unwrap();
    fs::write(d.join("barcodes.tsv"), BARCODES).unwrap();
    d
}

const BANNER: &str = "%%MatrixMarket matrix coordinate integer general\n";

/// Opens and reads everything; returns the first error.
fn read_all(path: &Path) -> Result<(), InputError> {
    let mut src = open_input(path)?;
    scan(src.as_mut(), 1).map(|_| ())
}

fn text_error(name: &str, matrix: &str) -> (u64, String) {
    match read_all(&folder(name, matrix)).unwrap_err() {
        e @ InputError::Text { line, .. } => (line, e.to_string()),
        other => panic!("{name}: expected a Text error, got {other:?}"),
    }
}

#[test]
fn good_small_folder_reads() {
    let d = folder("good", &format!("{BANNER}% comment\n3 2 3\n1 1 4\n3 2 1\n2 2 0\n"));
    let mut src = open_input(&d).unwrap();
    let s = scan(src.as_mut(), 1).unwrap();
    assert_eq!((s.nnz, s.total, s.cell_totals.clone()), (2, 5, vec![4, 1]));
}

#[test]
fn malformed_headers() {
    let cases = [
        ("no_banner", "3 2 1\n1 1 1\n", 1, "banner"),
        ("pattern", "%%MatrixMarket matrix coordinate pattern general\n3 2 1\n1 1\n", 1, "'pattern'"),
        ("symmetric", "%%MatrixMarket matrix coordinate integer symmetric\n3 2 0\n", 1, "symmetry"),
        ("array", "%%MatrixMarket matrix array integer general\n3 2\n", 1, "'array'"),
        ("bad_size", &format!("{BANNER}3 two 1\n"), 2, "size line"),
        ("no_size", &format!("{BANNER}% only comments\n"), 2, "size line"),
        ("empty", "", 0, "empty"),
    ];
    for (name, text, line, needle) in cases {
        let (l, msg) = text_error(name, text);
        assert_eq!(l, line, "{name}: {msg}");
        assert!(msg.contains(needle) && msg.contains("matrix.mtx"), "{name}: {msg}");
    }
}

#[test]
fn malformed_entries() {
    let cases = [
        ("row_zero", format!("{BANNER}3 2 1\n0 1 5\n"), 3, "row (gene) \"0\" is outside 1..=3"),
        ("row_big", format!("{BANNER}3 2 2\n1 1 1\n4 1 5\n"), 4, "row (gene) \"4\" is outside 1..=3"),
        ("col_big", format!("{BANNER}3 2 1\n1 3 5\n"), 3, "column (cell) \"3\" is outside 1..=2"),
        ("two_tokens", format!("{BANNER}3 2 1\n1 1\n"), 3, "expected 'row column value'"),
        ("four_tokens", format!("{BANNER}3 2 1\n1 1 1 1\n"), 3, "expected 'row column value'"),
        ("garbage_value", format!("{BANNER}3 2 1\n1 1 abc\n"), 3, "cannot parse value"),
        ("too_many", format!("{BANNER}3 2 1\n1 1 1\n2 2 2\n"), 4, "more entries than the 1 declared"),
        ("too_few", format!("{BANNER}3 2 3\n1 1 1\n2 2 2\n"), 4, "ends after 2 entries but the size line declares 3"),
    ];
    for (name, text, line, needle) in cases {
        let (l, msg) = text_error(name, &text);
        assert_eq!(l, line, "{name}: {msg}");
        assert!(msg.contains(needle), "{name}: {msg}");
    }
}

#[test]
fn non_counts_in_matrix_market() {
    let cases = [
        ("fraction_integer", format!("{BANNER}3 2 1\n2 2 2.5\n"), "not an integer"),
        (
            "fraction_real",
            "%%MatrixMarket matrix coordinate real general\n3 2 1\n2 2 0.25\n".to_string(),
            "not an integer",
        ),
        ("negative", format!("{BANNER}3 2 1\n2 2 -4\n"), "negative"),
        ("huge", format!("{BANNER}3 2 1\n2 2 3000000000\n"), "above 2^31 - 1"),
        ("nan", "%%MatrixMarket matrix coordinate real general\n3 2 1\n2 2 nan\n".to_string(), "not finite"),
    ];
    for (name, text, want) in cases {
        match read_all(&folder(name, &text)).unwrap_err() {
            InputError::NotACount(b) => {
                assert_eq!((b.object.as_str(), b.cell, b.gene, b.reason), ("line 3", 1, 1, want), "{name}");
                assert_eq!((b.cell_name.as_str(), b.gene_name.as_str()), ("CCC-1", "B"), "{name}");
                assert!(b.path.ends_with("matrix.mtx"), "{name}");
            }
            other => panic!("{name}: {other:?}"),
        }
    }
    // Whole numbers in a real file are counts.
    let d = folder("real_whole", "%%MatrixMarket matrix coordinate real general\n3 2 1\n2 2 3.0\n");
    assert!(read_all(&d).is_ok());
}

#[test]
fn repeated_entries_are_summed_and_overflow_is_reported() {
    let d = folder("repeat_ok", &format!("{BANNER}3 2 3\n2 1 5\n2 1 6\n1 1 1\n"));
    let mut src = open_input(&d).unwrap();
    let b = src.read_rows(0..2).unwrap();
    assert_eq!(b.row(0), (&[0, 1][..], &[1, 11][..]));
    let d = folder("repeat_overflow", &format!("{BANNER}3 2 2\n2 1 2147483647\n2 1 1\n"));
    match read_all(&d).unwrap_err() {
        InputError::NotACount(b) => assert_eq!((b.cell, b.gene, b.value.as_str()), (0, 1, "2147483648")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn table_sizes_must_match_the_matrix() {
    // A size line claiming a huge matrix is refused before anything is sized for it.
    let d = folder("huge_claim", &format!("{BANNER}3 4000000000000 1\n1 1 1\n"));
    let msg = read_all(&d).unwrap_err().to_string();
    assert!(msg.contains("2 barcodes listed") && msg.contains("4000000000000 columns"), "{msg}");
    let d = folder("gene_mismatch", &format!("{BANNER}4 2 1\n1 1 1\n"));
    let msg = read_all(&d).unwrap_err().to_string();
    assert!(msg.contains("features.tsv") && msg.contains("3 features listed"), "{msg}");
    let d = folder("blank_inside", &format!("{BANNER}3 2 1\n1 1 1\n"));
    fs::write(d.join("barcodes.tsv"), "AAA-1\n\nCCC-1\n").unwrap();
    match read_all(&d).unwrap_err() {
        InputError::Text { line: 2, path, .. } => assert!(path.ends_with("barcodes.tsv")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn missing_files_are_named() {
    for (file, needle) in [
        ("barcodes.tsv", "barcodes.tsv[.gz] is missing"),
        ("features.tsv", "features.tsv[.gz]"),
        ("matrix.mtx", "matrix.mtx[.gz] is missing"),
    ] {
        let d = folder(&format!("missing_{file}"), &format!("{BANNER}3 2 1\n1 1 1\n"));
        fs::remove_file(d.join(file)).unwrap();
        let err = read_all(&d).unwrap_err();
        assert!(matches!(err, InputError::MissingFile { .. }), "{err:?}");
        assert!(err.to_string().contains(needle), "{err}");
    }
    // genes.tsv (Cell Ranger 2) is accepted instead of features.tsv; two matrix files are ambiguous.
    let d = folder("genes_tsv", &format!("{BANNER}3 2 1\n1 1 1\n"));
    fs::rename(d.join("features.tsv"), d.join("genes.tsv")).unwrap();
    assert!(read_all(&d).is_ok());
    fs::write(d.join("matrix.mtx.gz"), b"").unwrap();
    let msg = read_all(&d).unwrap_err().to_string();
    assert!(msg.contains("both") && msg.contains("matrix.mtx.gz"), "{msg}");
}

fn copy_v3(name: &str) -> PathBuf {
    let d = scratch(name);
    for f in ["matrix.mtx.gz", "features.tsv.gz", "barcodes.tsv.gz"] {
        fs::copy(conformance(&format!("mtx/tenx_v3/{f}")), d.join(f)).unwrap();
    }
    d
}

#[test]
fn truncated_and_corrupt_gzip() {
    for file in ["matrix.mtx.gz", "barcodes.tsv.gz"] {
        let d = copy_v3(&format!("truncated_{file}"));
        let p = d.join(file);
        let bytes = fs::read(&p).unwrap();
        fs::write(&p, &bytes[..bytes.len() / 2]).unwrap();
        let err = read_all(&d).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, InputError::Io { .. }), "{err:?}");
        assert!(msg.contains(file) && msg.contains("truncated"), "{msg}");
    }
    // Flipped bytes inside the deflate stream (or the CRC) are an error, never wrong counts.
    let d = copy_v3("corrupt_gzip");
    let p = d.join("matrix.mtx.gz");
    let mut bytes = fs::read(&p).unwrap();
    let n = bytes.len();
    for i in (n / 3..n / 3 + 16).chain(n - 6..n - 4) {
        bytes[i] ^= 0x5a;
    }
    fs::write(&p, &bytes).unwrap();
    let err = read_all(&d).unwrap_err();
    assert!(err.to_string().contains("matrix.mtx.gz"), "{err}");
}

#[test]
fn concatenated_gzip_members_are_one_stream() {
    let d = scratch("multigz");
    let text = format!("{BANNER}3 2 2\n1 1 4\n3 2 1\n");
    let (a, b) = text.split_at(30);
    let mut out = Vec::new();
    for part in [a, b] {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(part.as_bytes()).unwrap();
        out.extend(enc.finish().unwrap());
    }
    fs::write(d.join("matrix.mtx.gz"), out).unwrap();
    fs::write(d.join("features.tsv"), FEATURES).unwrap();
    fs::write(d.join("barcodes.tsv"), BARCODES).unwrap();
    let mut src = open_input(&d).unwrap();
    assert_eq!(scan(src.as_mut(), 2).unwrap().total, 5);
}

#[test]
fn unknown_and_missing_paths() {
    let d = scratch("unknown");
    let p = d.join("counts.csv");
    fs::write(&p, "cell,gene,count\n").unwrap();
    assert!(matches!(open_input(&p).unwrap_err(), InputError::UnknownInput { .. }));
    let err = open_input(d.join("nope.h5ad")).unwrap_err();
    assert!(matches!(err, InputError::Io { .. }) && err.to_string().contains("nope.h5ad"), "{err}");
}

/// A tiny deterministic generator for corruption positions.
fn lcg(seed: &mut u64) -> u64 {
    *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    *seed >> 33
}

#[test]
fn corrupt_hdf5_files_error_without_panicking() {
    for name in ["mixed_10x.h5", "layouts.h5ad", "tenx_v2.h5"] {
        let orig = fs::read(input(name)).unwrap();
        let d = scratch(&format!("corrupt_{name}"));
        // Truncations.
        for keep in [0, 8, 100, orig.len() / 4, orig.len() / 2] {
            let p = d.join(format!("trunc_{keep}_{name}"));
            fs::write(&p, &orig[..keep]).unwrap();
            assert!(read_all(&p).is_err(), "{name} truncated to {keep} bytes was accepted");
        }
        // Random byte corruptions: any outcome but a panic is acceptable; a success must still be canonical.
        let mut seed = 42;
        for k in 0..150 {
            let mut bytes = orig.clone();
            for _ in 0..1 + k % 4 {
                let at = (lcg(&mut seed) as usize) % bytes.len();
                bytes[at] ^= 1 << (lcg(&mut seed) % 8);
            }
            let p = d.join(format!("flip_{k}_{name}"));
            fs::write(&p, &bytes).unwrap();
            if let Ok(mut src) = open_input(&p)
                && let Ok(b) = src.read_rows(0..src.n_cells())
            {
                assert_canonical(&b);
                assert_eq!(b.n_rows() as u64, src.n_cells());
            }
            let _ = fs::remove_file(&p);
        }
    }
}

#[test]
fn hdf5_claims_beyond_the_file_are_refused() {
    // mixed_10x.h5 stores matrix/shape uncompressed as int32 [60, 30]; claim 2^31 - 1 barcodes instead.
    let orig = fs::read(input("mixed_10x.h5")).unwrap();
    let needle = [60u8, 0, 0, 0, 30, 0, 0, 0];
    let at = orig.windows(8).position(|w| w == needle).expect("shape bytes");
    let mut bytes = orig.clone();
    bytes[at + 4..at + 8].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
    let d = scratch("claims");
    let p = d.join("claims.h5");
    fs::write(&p, &bytes).unwrap();
    let err = open_input(&p).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("matrix/barcodes") && msg.contains("2147483647"), "{msg}");
}

#[test]
fn a_matrix_that_changes_between_its_two_passes_is_refused() {
    // Opening counts each cell's entries; the first read places them. One entry more, or one fewer, in between
    // means the file changed: refused with what to do, never a panic or a silently different matrix.
    for (name, now) in [("one_more", "3 2 3\n1 1 1\n2 2 2\n3 2 3\n"), ("one_fewer", "3 2 1\n1 1 1\n")] {
        let d = folder(name, &format!("{BANNER}3 2 2\n1 1 1\n2 2 2\n"));
        let mut src = open_input(&d).unwrap();
        fs::write(d.join("matrix.mtx"), format!("{BANNER}{now}")).unwrap();
        let msg = src.read_rows(0..2).unwrap_err().to_string();
        assert!(msg.contains("the file changed since it was opened; open it again"), "{name}: {msg}");
    }
}

/// A Cell Ranger file missing one of its `matrix` datasets is read as the 10x file it is, and the error names the
/// missing dataset (not an AnnData `X`).
#[test]
fn a_tenx_file_missing_a_matrix_dataset_names_it() {
    let dir = scratch("tenx_missing_parts");
    for part in ["indptr", "data", "indices"] {
        let path = dir.join(format!("no_{part}.h5"));
        fs::copy(input("pbmc200/pbmc200_10x.h5"), &path).unwrap();
        let file = hdf5_pure::File::open_rw(&path).unwrap();
        file.root().delete(&format!("matrix/{part}")).unwrap();
        file.commit().unwrap();
        drop(file);
        let err = read_all(&path).unwrap_err().to_string();
        assert!(err.contains(&format!("matrix/{part}")) && err.contains("no_"), "{part}: {err}");
        assert!(!err.contains("'X'"), "{part}: {err}");
    }
}
