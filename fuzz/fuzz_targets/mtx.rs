//! `dct_input::parse_mtx_text` (dct-input, the Matrix Market banner, size-line and entry parser behind
//! `MtxSource`) on arbitrary bytes. Built only with the `inputs` feature.
//!
//! * Never panics, and never allocates for the sizes a text merely declares (libFuzzer's malloc limit).
//! * An error is a `Text` error whose line lies inside the input (line 0 only for empty input), or a
//!   `NotACount` error located at such a line.
//! * An accepted text agrees with an independent reading of it: line 1 is a `coordinate ... general` banner
//!   of the declared field, the first other line that is neither blank nor a `%` comment is the size line,
//!   and the remaining such lines are exactly `n_entries` entries, each three tokens whose numbers are the
//!   entry's 1-based row and column (inside the declared shape) and its count (in `0 ..= 2^31 - 1`).
//! * Parsing is deterministic, and the entries survive a round trip through canonical text and through a
//!   noisy spelling of it (CRLF, comments, tabs, mixed-case banner, counts written as reals).
//! * The declared entry count is enforced: dropping the last entry or adding one is an error.
//!
//! Finding (fixed in dct-input): a line starting with a vertical tab, a no-break space or another space
//! character outside ASCII whitespace was read as an entry with that character trimmed, although the same
//! character between the numbers is no separator. Input kept in `fuzz/regressions/mtx/leading_vertical_tab.mtx`.

#![no_main]

use std::fmt::Write as _;
use std::path::Path;

use dct_input::{InputError, MtxField, MtxHeader, MtxText, parse_mtx_text};
use libfuzzer_sys::fuzz_target;

/// Largest count, restated rather than imported so the check is independent.
const MAX_COUNT: u32 = (1 << 31) - 1;

const PATH: &str = "fuzz.mtx";

fn parse(text: &[u8]) -> Result<MtxText, InputError> {
    parse_mtx_text(text, Path::new(PATH))
}

/// The lines of `data` as the format defines them: split at `\n`, one `\r` before the `\n` removed.
fn lines(data: &[u8]) -> Vec<&[u8]> {
    let mut out: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
    if data.ends_with(b"\n") {
        out.pop();
    }
    let n = out.len();
    for (i, l) in out.iter_mut().enumerate() {
        if (i + 1 < n || data.ends_with(b"\n")) && l.ends_with(b"\r") {
            *l = &l[..l.len() - 1];
        }
    }
    out
}

/// Whether a line is skipped: nothing but ASCII whitespace (space, tab, CR, LF, form feed), or `%` as its first
/// other byte. Other space characters (vertical tab, no-break space, ...) are not whitespace in the format.
fn skipped(l: &str) -> bool {
    matches!(l.bytes().find(|&b| !matches!(b, b' ' | b'\t' | b'\r' | b'\n' | b'\x0c')), None | Some(b'%'))
}

/// Text for `m`: banner, size line and one `row column count` line per entry, 1-based.
fn canonical(h: &MtxHeader, entries: &[dct_input::MtxEntry]) -> Vec<u8> {
    let field = match h.field {
        MtxField::Integer => "integer",
        MtxField::Real => "real",
    };
    let mut s =
        format!("%%MatrixMarket matrix coordinate {field} general\n{} {} {}\n", h.n_rows, h.n_cols, h.n_entries);
    for e in entries {
        writeln!(s, "{} {} {}", e.row + 1, e.col + 1, e.count).unwrap();
    }
    s.into_bytes()
}

/// The same matrix spelled differently: CRLF endings, comments and blank lines, tabs and leading blanks, a
/// mixed-case banner, and counts written as `N.0` in a real file or `+N` in an integer file.
fn noisy(h: &MtxHeader, entries: &[dct_input::MtxEntry]) -> Vec<u8> {
    let field = match h.field {
        MtxField::Integer => "Integer",
        MtxField::Real => "DOUBLE",
    };
    let mut s = format!(
        "%%MatrixMarket MATRIX Coordinate {field} General\r\n% comment\r\n\r\n  {}\t{} {}  \r\n",
        h.n_rows, h.n_cols, h.n_entries
    );
    for (i, e) in entries.iter().enumerate() {
        if i % 3 == 1 {
            s.push_str("\t% between entries\r\n\r\n");
        }
        match h.field {
            MtxField::Integer => write!(s, " {}\t{}  +{}\r\n", e.row + 1, e.col + 1, e.count).unwrap(),
            MtxField::Real => write!(s, "{} {} {}.0\r\n", e.row + 1, e.col + 1, e.count).unwrap(),
        }
    }
    s.push_str("% end");
    s.into_bytes()
}

/// Checks an accepted text against an independent reading of it.
fn check_accepted(data: &[u8], m: &MtxText) {
    let h = &m.header;
    assert_eq!(m.entries.len() as u64, h.n_entries, "entries != declared nnz");
    let text: Vec<&str> =
        lines(data).into_iter().map(|l| std::str::from_utf8(l).expect("accepted text is UTF-8")).collect();
    let banner: Vec<String> = text[0].split_ascii_whitespace().map(str::to_ascii_lowercase).collect();
    let field = match banner.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["%%matrixmarket", "matrix", "coordinate", "integer", "general"] => MtxField::Integer,
        ["%%matrixmarket", "matrix", "coordinate", "real" | "double", "general"] => MtxField::Real,
        other => panic!("accepted banner {other:?}"),
    };
    assert_eq!(field, h.field);
    let mut rest = text[1..].iter().filter(|l| !skipped(l));
    let size: Vec<u64> =
        rest.next().expect("size line").split_ascii_whitespace().map(|t| t.parse().expect("size")).collect();
    assert_eq!(size, [h.n_rows, h.n_cols, h.n_entries]);
    let data_lines: Vec<&&str> = rest.collect();
    assert_eq!(data_lines.len(), m.entries.len(), "entry lines != entries");
    for (l, e) in data_lines.iter().zip(&m.entries) {
        let t: Vec<&str> = l.split_ascii_whitespace().collect();
        assert_eq!(t.len(), 3, "entry line {l:?}");
        assert!(e.row < h.n_rows && e.col < h.n_cols, "entry {e:?} outside {} x {}", h.n_rows, h.n_cols);
        assert_eq!(t[0].parse::<u64>().ok(), Some(e.row + 1), "row of {l:?}");
        assert_eq!(t[1].parse::<u64>().ok(), Some(e.col + 1), "column of {l:?}");
        assert!(e.count <= MAX_COUNT, "count {} above 2^31 - 1", e.count);
        assert_eq!(t[2].parse::<f64>().ok(), Some(f64::from(e.count)), "value of {l:?}");
    }

    // Round trips: the canonical text and a noisy spelling read back to the same header and entries.
    let canon = canonical(h, &m.entries);
    assert_eq!(parse(&canon).as_ref().ok(), Some(m), "canonical text does not read back");
    assert_eq!(parse(&noisy(h, &m.entries)).as_ref().ok(), Some(m), "noisy text does not read back");

    // The declared count is enforced both ways.
    if let Some((_, fewer)) = m.entries.split_last() {
        match parse(&canonical(h, fewer)) {
            Err(InputError::Text { detail, .. }) => assert!(detail.contains("ends after"), "{detail}"),
            other => panic!("a missing entry was not detected: {other:?}"),
        }
    }
    if h.n_rows > 0 && h.n_cols > 0 {
        let mut more = canon;
        more.extend_from_slice(b"1 1 1\n");
        match parse(&more) {
            Err(InputError::Text { detail, .. }) => assert!(detail.contains("more entries"), "{detail}"),
            other => panic!("an extra entry was not detected: {other:?}"),
        }
    }
}

/// Checks a refusal: a typed error located inside the input.
fn check_refused(data: &[u8], e: &InputError) {
    let n_lines = lines(data).len() as u64;
    match e {
        InputError::Text { path, line, detail } => {
            assert_eq!(path, Path::new(PATH));
            assert!(*line <= n_lines, "line {line} of {n_lines}: {detail}");
            assert!(*line >= 1 || data.is_empty(), "line 0 for non-empty input: {detail}");
        }
        InputError::NotACount(b) => {
            assert_eq!(b.path, Path::new(PATH));
            let line: u64 = b.object.strip_prefix("line ").and_then(|n| n.parse().ok()).expect("object 'line N'");
            assert!((2..=n_lines).contains(&line), "count error at line {line} of {n_lines}");
            assert!(!b.reason.is_empty());
        }
        other => panic!("unexpected error kind: {other:?}"),
    }
    // The message renders.
    assert!(!e.to_string().is_empty());
}

fuzz_target!(|data: &[u8]| {
    let first = parse(data);
    match &first {
        Ok(m) => check_accepted(data, m),
        Err(e) => check_refused(data, e),
    }
    // Deterministic: the same bytes give the same result.
    let again = parse(data);
    assert_eq!(format!("{first:?}"), format!("{again:?}"), "two parses differ");
});
