//! Helpers shared by the converter's integration tests (`mod support;` in each).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use dct_input::CountSource;

/// A path under the repository's `testdata/`.
pub fn testdata(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata").join(rel)
}

/// Every file under `dir`, relative path → bytes.
pub fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.strip_prefix(dir).unwrap().display().to_string(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// Writes `rows` (cells of `(gene, count)`) as a plain 10x Matrix Market folder (genes x cells) with the genes of
/// `source` and barcodes `cell<first_barcode + i>`.
pub fn write_mtx(dir: &Path, source: &dyn CountSource, rows: &[Vec<(u32, u32)>], first_barcode: usize) {
    std::fs::create_dir_all(dir).unwrap();
    let nnz: usize = rows.iter().map(Vec::len).sum();
    let mut m = std::io::BufWriter::new(std::fs::File::create(dir.join("matrix.mtx")).unwrap());
    writeln!(m, "%%MatrixMarket matrix coordinate integer general").unwrap();
    writeln!(m, "{} {} {nnz}", source.n_genes(), rows.len()).unwrap();
    for (c, row) in rows.iter().enumerate() {
        for &(g, v) in row {
            writeln!(m, "{} {} {v}", g + 1, c + 1).unwrap();
        }
    }
    let genes = source.genes();
    let mut f = std::fs::File::create(dir.join("features.tsv")).unwrap();
    for i in 0..genes.names.len() {
        writeln!(f, "{}\t{}\tGene Expression", genes.ids[i], genes.names[i]).unwrap();
    }
    let mut b = std::fs::File::create(dir.join("barcodes.tsv")).unwrap();
    for c in 0..rows.len() {
        writeln!(b, "cell{}", first_barcode + c).unwrap();
    }
}

/// [`write_mtx`] of cells `cells` of `source`, with barcodes `cell<index>`.
pub fn write_mtx_cells(dir: &Path, source: &mut dyn CountSource, cells: std::ops::Range<u64>) {
    let block = source.read_rows(cells.clone()).unwrap();
    let rows: Vec<Vec<(u32, u32)>> = (0..block.n_rows())
        .map(|r| {
            let (g, v) = block.row(r);
            g.iter().copied().zip(v.iter().copied()).collect()
        })
        .collect();
    write_mtx(dir, source, &rows, cells.start as usize);
}
