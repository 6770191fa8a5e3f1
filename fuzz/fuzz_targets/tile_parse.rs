//! `TileLayout::parse` on arbitrary bytes: never panics, and when it accepts a blob every promise it documents
//! holds (frames inside the blob, 8-aligned and after the indptr; chunks tiling the cells and nonzeros; the
//! indptr from 0 to nnz, non-decreasing, agreeing with every chunk boundary).

#![no_main]

use dct_format::{FrameKind, HEADER_LEN, TileHeader, TileLayout, compute_crc};
use libfuzzer_sys::fuzz_target;

thread_local! {
    static REUSED: std::cell::RefCell<TileLayout> = std::cell::RefCell::new(TileLayout::default());
}

fuzz_target!(|data: &[u8]| {
    let header = TileHeader::parse(data);
    let parsed = TileLayout::parse(data);
    // `inspect` reads frame headers too; it must agree with the structural verdict.
    let summary = dct_codec::inspect(data);
    if parsed.is_err() {
        assert!(summary.is_err(), "inspect accepted a tile TileLayout::parse rejects");
    }
    // Reusing a layout after whatever the previous input left in it must give the same verdict.
    REUSED.with_borrow_mut(|reused| assert_eq!(reused.parse_from(data).is_ok(), parsed.is_ok()));
    let Ok(layout) = parsed else { return };

    let h = *layout.header();
    assert_eq!(Ok(h), header, "layout header differs from TileHeader::parse");
    assert_eq!(h.total_size, data.len() as u64);
    assert!(h.n_genes >= 1 && u64::from(h.n_genes) <= h.version.max_genes());
    let table_end = HEADER_LEN as u64 + u64::from(h.n_chunks) * h.version.entry_size() as u64;
    assert!(h.indptr_off.is_multiple_of(8) && h.indptr_off >= table_end);
    assert_eq!(layout.chunks().len() as u64, u64::from(h.n_chunks));
    assert_eq!(h.n_cells == 0, h.n_chunks == 0);

    let indptr = layout.indptr(data);
    assert_eq!(indptr.len() as u64, h.n_cells + 1);
    let indptr_end = h.indptr_off + 8 * (h.n_cells + 1);
    assert_eq!(indptr.get(0), 0);
    assert_eq!(indptr.get(h.n_cells as usize), h.nnz);
    for i in 1..indptr.len() {
        assert!(indptr.get(i - 1) <= indptr.get(i), "indptr decreases at {i}");
    }
    let mut copied = Vec::new();
    indptr.copy_range_into(0, h.n_cells as usize, &mut copied);
    assert_eq!(copied.len(), indptr.len());

    let (mut cell, mut nz) = (0u64, 0u64);
    for (c, e) in layout.chunks().iter().enumerate() {
        assert_eq!((e.cell_lo, e.nnz_lo), (cell, nz), "chunk {c} does not start where the previous ends");
        assert!(e.cell_lo <= e.cell_hi && e.nnz_lo <= e.nnz_hi);
        assert!(e.nnz() <= u64::from(u32::MAX));
        assert_eq!(indptr.get(e.cell_lo as usize), e.nnz_lo);
        assert_eq!(indptr.get(e.cell_hi as usize), e.nnz_hi);
        if !h.version.has_exceptions() {
            assert!(!e.vexc.is_present() && !e.gexc.is_present(), "v1 chunk with exception frames");
        }
        for kind in [FrameKind::Gaps, FrameKind::Vals, FrameKind::ValueExceptions, FrameKind::GapExceptions] {
            let f = e.frame(kind);
            if !f.is_present() {
                assert!(matches!(kind, FrameKind::ValueExceptions | FrameKind::GapExceptions));
                continue;
            }
            assert!(f.offset.is_multiple_of(8) && f.offset >= indptr_end);
            assert!(f.offset.checked_add(f.len).is_some_and(|end| end <= h.total_size));
            assert_eq!(layout.frame(data, f).len() as u64, f.len);
        }
        if e.n_cells() > 0 {
            for row in [e.cell_lo, e.cell_hi - 1, e.cell_lo + e.n_cells() / 2] {
                assert_eq!(layout.chunk_of_row(row), Some(c), "row {row} not found in chunk {c}");
            }
        }
        (cell, nz) = (e.cell_hi, e.nnz_hi);
    }
    assert_eq!((cell, nz), (h.n_cells, h.nnz));
    assert_eq!(layout.chunk_of_row(h.n_cells), None);

    if let Ok(s) = summary {
        assert_eq!(s.header, h);
        assert_eq!(s.chunks.len(), layout.chunks().len());
        for (cs, e) in s.chunks.iter().zip(layout.chunks()) {
            assert_eq!(cs.entry, *e);
            assert!(cs.value_exceptions <= e.nnz() && cs.gap_exceptions <= e.nnz());
        }
    }
    // The CRC check is a pure function of the bytes.
    assert_eq!(dct_format::verify_crc(data, &h).is_ok(), compute_crc(data) == h.crc32);
});
