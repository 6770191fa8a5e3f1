//! The parser against hand-written texts and the fixtures, and the folder reader against it.

use std::collections::BTreeMap;

use super::*;

const BANNER: &str = "%%MatrixMarket matrix coordinate integer general\n";

fn parse(text: impl AsRef<[u8]>) -> Result<MtxText, InputError> {
    parse_mtx_text(text.as_ref(), Path::new("t.mtx"))
}

fn entry(row: u64, col: u64, count: u32) -> MtxEntry {
    MtxEntry { row, col, count }
}

/// The line and message of an [`InputError::Text`]; panics on success or on another error.
fn text_error(r: Result<MtxText, InputError>) -> (u64, String) {
    match r {
        Err(InputError::Text { path, line, detail }) => {
            assert_eq!(path, Path::new("t.mtx"));
            (line, detail)
        }
        other => panic!("expected a text error, got {other:?}"),
    }
}

/// The place and reason of an [`InputError::NotACount`]; panics on success or on another error.
fn count_error(r: Result<MtxText, InputError>) -> (String, u64, u64, &'static str) {
    match r {
        Err(InputError::NotACount(b)) => (b.object, b.gene, b.cell, b.reason),
        other => panic!("expected a count error, got {other:?}"),
    }
}

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(rel)
}

/// The file's bytes, gunzipped if it is gzip.
fn read_text(path: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    open_text(path).unwrap().read_to_end(&mut out).unwrap();
    out
}

#[test]
fn parses_a_hand_written_text_exactly() {
    // Upper-case banner, CRLF endings, comments and blank lines before and among the entries, leading blanks,
    // an explicit zero, a repeated coordinate, the largest count, and no final line ending.
    let text = "%%MatrixMarket Matrix Coordinate Integer General\r\n% a comment\n\n3 4 6\n1 1 7\n  3 4 0\n\
                % between entries\n2 2 2147483647\n\n1 1 1\r\n3 2 12\n\t1 4 +5";
    let m = parse(text).unwrap();
    assert_eq!(m.header, MtxHeader { field: MtxField::Integer, n_rows: 3, n_cols: 4, n_entries: 6 });
    assert_eq!(
        m.entries,
        vec![
            entry(0, 0, 7),
            entry(2, 3, 0),
            entry(1, 1, 2_147_483_647),
            entry(0, 0, 1),
            entry(2, 1, 12),
            entry(0, 3, 5)
        ]
    );
}

#[test]
fn whole_numbers_written_as_reals_are_counts() {
    for field in ["real", "double", "REAL"] {
        let text =
            format!("%%MatrixMarket matrix coordinate {field} general\n2 2 4\n1 2 3.0\n2 1 1e3\n2 2 -0.0\n1 1 7\n");
        let m = parse(text).unwrap();
        assert_eq!(m.header, MtxHeader { field: MtxField::Real, n_rows: 2, n_cols: 2, n_entries: 4 });
        assert_eq!(m.entries, vec![entry(0, 1, 3), entry(1, 0, 1000), entry(1, 1, 0), entry(0, 0, 7)]);
    }
    // An integer file may write a count with an exponent or a zero fraction, too.
    let m = parse(format!("{BANNER}1 1 2\n1 1 2e1\n1 1 4.0\n")).unwrap();
    assert_eq!(m.entries, vec![entry(0, 0, 20), entry(0, 0, 4)]);
}

#[test]
fn empty_matrices_and_zero_entries() {
    let m = parse(format!("{BANNER}0 0 0")).unwrap();
    assert_eq!(m.header, MtxHeader { field: MtxField::Integer, n_rows: 0, n_cols: 0, n_entries: 0 });
    assert!(m.entries.is_empty());
    let m = parse(format!("{BANNER}5 6 0\n% nothing\n\n")).unwrap();
    assert_eq!((m.header.n_rows, m.header.n_cols), (5, 6));
    assert!(m.entries.is_empty());
    // With no rows, every coordinate is outside the shape.
    assert_eq!(text_error(parse(format!("{BANNER}0 0 1\n1 1 1\n"))).0, 3);
}

#[test]
fn malformed_headers_are_text_errors_with_line_numbers() {
    let cases: &[(&[u8], u64, &str)] = &[
        (b"", 0, "the file is empty"),
        (b"hello\n", 1, "expected the banner"),
        (b"%%MatrixMarket matrix array integer general\n2 2\n", 1, "dense 'array'"),
        (b"%%MatrixMarket matrix coordinate integer symmetric\n1 1 1\n1 1 1\n", 1, "symmetry 'symmetric'"),
        (b"%%MatrixMarket matrix coordinate pattern general\n1 1 1\n1 1\n", 1, "value type 'pattern'"),
        (b"%%MatrixMarket matrix coordinate complex general\n", 1, "value type 'complex'"),
        (b"%%MatrixMarket vector coordinate integer general\n", 1, "unrecognized banner"),
        (b"%%MatrixMarket matrix coordinate integer general extra\n", 1, "unrecognized banner"),
        (b"%%MatrixMarket matrix coordinate integer general\n% only a comment\n\n", 3, "ends before the size line"),
        (b"%%MatrixMarket matrix coordinate integer general\n%c\n2 2\n", 3, "expected the size line"),
        (b"%%MatrixMarket matrix coordinate integer general\n2 2 1 1\n", 2, "expected the size line"),
        (b"%%MatrixMarket matrix coordinate integer general\n2 -2 1\n", 2, "expected the size line"),
        (b"%%MatrixMarket matrix coordinate integer general\n2 2 18446744073709551616\n", 2, "expected the size line"),
        (b"%%MatrixMarket matrix coordinate integer general\n2.0 2 1\n", 2, "expected the size line"),
        (b"%%MatrixMarket \xff\n", 1, "not valid UTF-8"),
        (b"%%MatrixMarket matrix coordinate integer general\n\xc3\x28 1 1\n", 2, "not valid UTF-8"),
    ];
    for &(text, line, what) in cases {
        let (l, detail) = text_error(parse(text));
        assert_eq!(l, line, "{:?}: {detail}", String::from_utf8_lossy(text));
        assert!(detail.contains(what), "{:?}: {detail:?} lacks {what:?}", String::from_utf8_lossy(text));
    }
}

#[test]
fn malformed_entries_are_errors_with_line_numbers() {
    let head = "%%MatrixMarket matrix coordinate integer general\n% c\n2 3 2\n";
    let cases: &[(&str, u64, &str)] = &[
        ("1 1\n2 2 2\n", 4, "expected 'row column value'"),
        ("1 1 1 1\n2 2 2\n", 4, "expected 'row column value'"),
        ("0 1 1\n2 2 2\n", 4, "row (gene) \"0\" is outside 1..=2"),
        ("3 1 1\n2 2 2\n", 4, "row (gene) \"3\" is outside 1..=2"),
        ("1 4 1\n2 2 2\n", 4, "column (cell) \"4\" is outside 1..=3"),
        ("-1 1 1\n2 2 2\n", 4, "outside 1..=2"),
        ("1.0 1 1\n2 2 2\n", 4, "outside 1..=2"),
        ("1 1 1\n2 2 x\n", 5, "cannot parse value \"x\""),
        ("1 1 1\n", 4, "ends after 1 entries but the size line declares 2"),
        ("1 1 1\n\n% trailing comment\n", 6, "ends after 1 entries"),
        ("1 1 1\n2 2 2\n\n1 1 1\n", 7, "more entries than the 2 declared"),
        ("1 1 1\n2 2 \u{ff}\n", 5, "cannot parse value"),
        ("1 1 1\n2\u{a0}2 2\n", 5, "expected 'row column value'"),
    ];
    for &(body, line, what) in cases {
        let (l, detail) = text_error(parse(format!("{head}{body}")));
        assert_eq!(l, line, "{body:?}: {detail}");
        assert!(detail.contains(what), "{body:?}: {detail:?} lacks {what:?}");
    }
    let mut bad_utf8 = format!("{head}1 1 1\n").into_bytes();
    bad_utf8.extend_from_slice(b"2 2 \xff\n");
    assert_eq!(text_error(parse(bad_utf8)), (5, "line is not valid UTF-8 text".into()));
}

#[test]
fn only_ascii_whitespace_separates_or_skips() {
    let head = "%%MatrixMarket matrix coordinate integer general\n% c\n2 3 1\n";
    // Leading ASCII whitespace (tab, form feed, CR) is skipped before entries, comments and the size line.
    let m = parse(format!("{BANNER}\t\x0c% c\n \r\n\t2 3 1\n\x0c\t2 3 4\n")).unwrap();
    assert_eq!(m.entries, vec![entry(1, 2, 4)]);
    // Other space characters are not whitespace, wherever they are: at the start of a line (once accepted, found
    // by the fuzz target; input kept in fuzz/regressions/mtx/leading_vertical_tab.mtx) as in the middle.
    let cases: &[(&str, u64, &str)] = &[
        ("\x0b2 1 1\n", 4, "row (gene) \"\\u{b}2\" is outside 1..=2"),
        ("2\x0b1 1\n", 4, "expected 'row column value'"),
        ("\u{a0}2 1 1\n", 4, "outside 1..=2"),
        ("\u{2028}\n2 1 1\n", 4, "expected 'row column value'"),
        ("\x0b% not a comment\n2 1 1\n", 4, "expected 'row column value'"),
    ];
    for &(body, line, what) in cases {
        let (l, detail) = text_error(parse(format!("{head}{body}")));
        assert_eq!(l, line, "{body:?}: {detail}");
        assert!(detail.contains(what), "{body:?}: {detail:?} lacks {what:?}");
    }
    let (l, detail) = text_error(parse(format!("{BANNER}\u{a0}2 3 1\n1 1 1\n")));
    assert_eq!(l, 2);
    assert!(detail.contains("expected the size line"), "{detail}");
    let regression = repo("fuzz/regressions/mtx/leading_vertical_tab.mtx");
    let (l, detail) = text_error(parse(std::fs::read(regression).unwrap()));
    assert_eq!(l, 22);
    assert!(detail.contains("row (gene) \"\\u{b}5\""), "{detail}");
}

#[test]
fn values_that_are_not_counts_are_count_errors() {
    let cases: &[(&str, &str, &str)] = &[
        ("integer", "-3", "negative"),
        ("integer", "2.5", "not an integer"),
        ("integer", "2147483648", "above 2^31 - 1"),
        ("integer", "99999999999999999999", "above 2^31 - 1"),
        ("integer", "inf", "not finite"),
        ("real", "NaN", "not finite"),
        ("real", "-1e-300", "negative"),
        ("real", "0.5", "not an integer"),
        ("real", "3e9", "above 2^31 - 1"),
    ];
    for &(field, value, reason) in cases {
        let text = format!("%%MatrixMarket matrix coordinate {field} general\n4 5 2\n1 1 1\n3 5 {value}\n");
        assert_eq!(count_error(parse(text)), ("line 4".to_string(), 2, 4, reason), "{field} {value}");
    }
}

#[test]
fn declared_sizes_do_not_drive_allocation() {
    // Sizes of 2^64 - 1: reserving for them would abort; the one listed entry parses, then the count is short.
    let max = u64::MAX;
    let m = parse(format!("{BANNER}{max} {max} {max}\n{max} 1 5\n"));
    assert_eq!(
        text_error(m),
        (3, format!("the file ends after 1 entries but the size line declares {max} (is it truncated?)"))
    );
    let m = parse(format!("{BANNER}{max} {max} 1\n{max} {max} 5\n")).unwrap();
    assert_eq!(m.entries, vec![entry(max - 1, max - 1, 5)]);
    // A line longer than the bound is refused without reading it whole.
    let mut long = format!("{BANNER}1 1 1\n").into_bytes();
    long.resize(long.len() + (1 << 20) + 10, b' ');
    let (line, detail) = text_error(parse(&long));
    assert_eq!(line, 3);
    assert!(detail.contains("longer than"), "{detail}");
}

/// `parse_mtx_text` on the folder's matrix and the folder reader give the same matrix (the parsed entries with
/// zeros dropped and repeats summed, cell-major); returns the parsed text.
fn assert_agrees_with_folder_reader(dir: &Path) -> MtxText {
    let matrix = find(dir, &["matrix.mtx"]).unwrap().unwrap();
    let m = parse_mtx_text(&read_text(&matrix), &matrix).unwrap();
    assert_eq!(m.entries.len() as u64, m.header.n_entries);
    let mut src = MtxSource::open(dir, None).unwrap();
    assert_eq!(src.header, m.header);
    assert_eq!((src.n_genes(), src.n_cells()), (m.header.n_rows, m.header.n_cols));
    let mut cells: Vec<BTreeMap<u32, u32>> = vec![BTreeMap::new(); m.header.n_cols as usize];
    for e in &m.entries {
        if e.count != 0 {
            *cells[e.col as usize].entry(e.row as u32).or_default() += e.count;
        }
    }
    let block = src.read_rows(0..src.n_cells()).unwrap();
    for (c, want) in cells.iter().enumerate() {
        let (genes, counts) = block.row(c);
        let got: BTreeMap<u32, u32> = genes.iter().copied().zip(counts.iter().copied()).collect();
        assert_eq!(&got, want, "{}: cell {c}", dir.display());
    }
    m
}

#[test]
fn pbmc200_matches_expected_totals_and_the_folder_reader() {
    let m = assert_agrees_with_folder_reader(&repo("testdata/inputs/pbmc200/mtx"));
    let exp: serde_json::Value =
        serde_json::from_slice(&std::fs::read(repo("testdata/inputs/pbmc200/expected.json")).unwrap()).unwrap();
    let u = |k: &str| exp[k].as_u64().unwrap();
    let list = |k: &str| -> Vec<u64> { exp[k].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect() };
    assert_eq!(
        m.header,
        MtxHeader { field: MtxField::Integer, n_rows: u("n_genes"), n_cols: u("n_cells"), n_entries: u("nnz") }
    );
    let (mut cell_totals, mut gene_totals) = (vec![0u64; 200], vec![0u64; 2500]);
    let mut cell_nnz = vec![0u64; 200];
    for e in &m.entries {
        assert!(e.count > 0, "the fixture lists no explicit zeros");
        cell_totals[e.col as usize] += u64::from(e.count);
        gene_totals[e.row as usize] += u64::from(e.count);
        cell_nnz[e.col as usize] += 1;
    }
    assert_eq!(cell_totals.iter().sum::<u64>(), u("total"));
    assert_eq!(cell_totals, list("cell_totals"));
    assert_eq!(gene_totals, list("gene_totals"));
    assert_eq!(cell_nnz, list("cell_nnz"));
    // The first entries, read off the file: "4 1 1", "12 1 1".
    assert_eq!(m.entries[..2], [entry(3, 0, 1), entry(11, 0, 1)]);
}

#[test]
fn the_other_fixtures_match_the_folder_reader() {
    for dir in
        ["testdata/inputs/mixed_mtx", "testdata/conformance/mtx/tenx_v3", "testdata/conformance/mtx/tenx_v2_plain"]
    {
        assert_agrees_with_folder_reader(&repo(dir));
    }
}
