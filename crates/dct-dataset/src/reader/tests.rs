//! The reader against its inputs: batches across tiles, released and dropped tiles' buffers.

use super::*;

/// A dataset of `n_rows` cells in tiles of 3, cell `r` holding genes `r % (n_genes - 2)` and `n_genes - 1`
/// with counts `2r + 1` and `2r + 2`; its rows' indices and counts as written.
pub(in crate::reader) fn small_dataset(
    dir: &std::path::Path,
    n_rows: usize,
    n_genes: u64,
) -> (Dataset, Vec<i32>, Vec<u32>) {
    let path = dir.join("d");
    let indptr: Vec<i64> = (0..=n_rows as i64).map(|r| 2 * r).collect();
    let last = n_genes as i32 - 1;
    let indices: Vec<i32> = (0..n_rows).flat_map(|r| [(r % (n_genes as usize - 2)) as i32, last]).collect();
    let values: Vec<u32> = (0..2 * n_rows as u32).map(|v| v + 1).collect();
    let options =
        crate::WriterOptions { tile_size: 3, n_chunks: 1, zstd_level: 3, ..crate::WriterOptions::new(n_genes) };
    let mut w = crate::DatasetWriter::create(path.to_str().unwrap(), options).unwrap();
    w.append(&crate::CsrMatrix { n_rows, n_cols: n_genes, indptr: &indptr, indices: &indices, values: &values })
        .unwrap();
    w.finish().unwrap();
    (Dataset::open(path.to_str().unwrap(), ReadOptions::default()).unwrap(), indices, values)
}

#[test]
fn dropped_tiles_leave_no_spare_buffers_where_released_ones_do() {
    let dir = tempfile::tempdir().unwrap();
    let (ds, _, _) = small_dataset(dir.path(), 12, 5);
    let spare = |ds: &Dataset| ds.core.scratch.spare.lock().unwrap().len();
    let every_tile = [0u64, 3, 6, 9];
    ds.get_batch(&every_tile).unwrap();
    let before = spare(&ds);
    assert_eq!(ds.drop_tiles_except(&[1]), 3);
    assert_eq!(spare(&ds), before);
    ds.get_batch(&every_tile).unwrap();
    assert_eq!(ds.release_tiles_except(&[]), 4);
    assert!(spare(&ds) > before, "released tiles' buffers are kept for the next decodes");
    assert_eq!(spare(&ds), open::MAX_SPARE, "at most 2 unless more are asked for");
    ds.keep_spare_tiles(3);
    ds.get_batch(&every_tile).unwrap();
    assert_eq!(spare(&ds), 0, "the decodes took the spare buffers");
    assert_eq!(ds.release_tiles_except(&[2]), 3);
    assert_eq!(spare(&ds), 3, "the three tiles given back leave their buffers");
}

#[test]
fn batches_over_few_and_many_tiles_hold_each_cell_s_own_row() {
    // 40 tiles of 3 cells: batches within a few tiles (the scan) and across all of them (past SCANNED_TILES,
    // the map), with repeats, against each cell read alone.
    let dir = tempfile::tempdir().unwrap();
    let n_rows = 120usize;
    let (ds, indices, values) = small_dataset(dir.path(), n_rows, 7);
    assert_eq!(ds.n_tiles(), 40);
    let alone: Vec<Batch> = (0..n_rows as u64).map(|c| ds.get_batch(&[c]).unwrap()).collect();
    let few: Vec<u64> = [7u64, 3, 8, 4, 7, 30, 31, 5, 3].to_vec();
    let many: Vec<u64> = (0..n_rows as u64).map(|c| (c * 37 + 11) % n_rows as u64).chain([0, 119, 0]).collect();
    for cells in [few, many] {
        let batch = ds.get_batch(&cells).unwrap();
        for (j, &c) in cells.iter().enumerate() {
            let (a, b) = (batch.indptr[j] as usize, batch.indptr[j + 1] as usize);
            let one = &alone[c as usize];
            assert_eq!(&batch.indices[a..b], &one.indices[..], "cell {c}");
            assert_eq!(&batch.values[a..b], &one.values[..], "cell {c}");
            assert_eq!(&one.indices[..], &indices[2 * c as usize..2 * c as usize + 2], "cell {c}");
            let stored: Vec<f32> = values[2 * c as usize..2 * c as usize + 2].iter().map(|&v| v as f32).collect();
            assert_eq!(one.values, stored, "cell {c}");
        }
        assert_eq!(ds.batch_nnz(&cells).unwrap(), 2 * cells.len() as u64);
    }
}

#[test]
fn dataset_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Dataset>();
    check::<Batch<f32>>();
}

#[test]
fn rows_decoded_in_place_are_the_batch_s_rows_and_a_place_of_another_length_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (ds, _, _) = small_dataset(dir.path(), 30, 7);
    let cells: Vec<u64> = vec![29, 3, 3, 17, 0, 8, 21];
    let batch = ds.get_batch(&cells).unwrap();
    let mut lengths = Vec::new();
    ds.row_nnz_into(&cells, &mut lengths).unwrap();
    let want: Vec<u64> = batch.indptr.windows(2).map(|w| (w[1] - w[0]) as u64).collect();
    assert_eq!(lengths, want);
    // Places laid out in reverse request order, each row changed in place by the map.
    let total = batch.indices.len();
    let (mut indices, mut values) = (vec![-1i32; total], vec![0f32; total]);
    let mut places: Vec<(&mut [i32], &mut [f32])> = Vec::new();
    let (mut rest_i, mut rest_v) = (&mut indices[..], &mut values[..]);
    for &n in lengths.iter().rev() {
        let (hi, ti) = std::mem::take(&mut rest_i).split_at_mut(n as usize);
        let (hv, tv) = std::mem::take(&mut rest_v).split_at_mut(n as usize);
        places.push((hi, hv));
        (rest_i, rest_v) = (ti, tv);
    }
    places.reverse();
    ds.map_rows_in_place(&cells, &mut places, |i, v| {
        i.iter_mut().for_each(|g| *g += 100);
        v.iter_mut().for_each(|x| *x *= 2.0);
    })
    .unwrap();
    for (j, (pi, pv)) in places.iter().enumerate() {
        let (a, b) = (batch.indptr[j] as usize, batch.indptr[j + 1] as usize);
        assert_eq!(pi.iter().map(|g| g - 100).collect::<Vec<_>>(), batch.indices[a..b], "row {j}");
        assert_eq!(pv.iter().map(|x| x / 2.0).collect::<Vec<_>>(), batch.values[a..b], "row {j}");
    }
    let (mut short_i, mut short_v) = (vec![0i32; 1], vec![0f32; 1]);
    let mut wrong: Vec<(&mut [i32], &mut [f32])> = vec![(&mut short_i[..], &mut short_v[..])];
    let e = ds.map_rows_in_place(&cells[..1], &mut wrong, |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("a place of 1 entries"), "{e}");
    assert!(ds.map_rows_in_place(&cells, &mut wrong, |_, _| {}).is_err(), "one place for 7 cells");
}
