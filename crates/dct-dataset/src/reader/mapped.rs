//! Rows handed to the caller as they are decoded ([`Dataset::map_rows_into`]), for a caller that transforms each
//! row on its way out (a corpus moving rows to its vocabulary's columns): the row is read back from the decoding
//! thread's cache, where a batch of stored rows would be written to memory and read back from it.

use std::sync::Arc;

use dct_codec::{CountValue, DecodeError, TilePlanes, WriteMode};

use rayon::prelude::*;

use super::cache::TileData;
use super::load::Keep;
use super::{Batch, Dataset, RowFailure, stored_offsets};
use crate::error::DatasetError;

impl Dataset {
    /// Decodes the rows of `cells` (global indices, any order, repeats allowed) one at a time into a buffer of the
    /// decoding thread and hands each to `map` with the room it has in `out`: row `j`'s room is
    /// `out.indices[out.indptr[j]..out.indptr[j + 1]]` (and the same range of `out.values`), as many entries as it
    /// stores, rooms laid end to end from 0 as [`Dataset::get_batch_into`] lays the rows themselves.
    /// `map(indices, values, room_indices, room_values)` gets the row (gene indices strictly increasing, in stored
    /// column order) and returns how many entries it wrote at the start of its room. Returns those counts, in
    /// request order. `out` is scratch: entries of a room past its count are unspecified, and its allocations are
    /// reused. Rows are checked as [`Dataset::get_batch`] checks them, and split between the decode threads.
    pub fn map_rows_into<V, F>(&self, cells: &[u64], out: &mut Batch<V>, map: F) -> Result<Vec<usize>, DatasetError>
    where
        V: CountValue,
        F: Fn(&[i32], &[V], &mut [i32], &mut [V]) -> usize + Sync,
    {
        out.n_genes = self.core.manifest.n_genes;
        let result = self.with_decoded_rows(cells, |decoded, rows| {
            let total = stored_offsets(decoded, rows, &mut out.indptr);
            dct_codec::resize_for_overwrite(&mut out.indices, total, 0);
            dct_codec::resize_for_overwrite(&mut out.values, total, V::default());
            let mut written = vec![0usize; rows.len()];
            let (indptr, indices, values) = (&out.indptr, &mut out.indices[..], &mut out.values[..]);
            self.core
                .on_decode_threads(|parallel| {
                    map_rows(decoded, rows, indptr, indices, values, &mut written, &map, parallel)
                })
                .map_err(|(s, e)| RowFailure::Row(s, e))?;
            Ok(written)
        });
        if result.is_err() {
            out.indptr.truncate(1);
            out.indices.clear();
            out.values.clear();
        }
        result
    }
}

impl Dataset {
    /// The stored nonzeros of each row of `cells` (global indices, any order, repeats allowed) into `out`, in request
    /// order, from the tiles' row offsets: tiles not yet loaded are fetched (and kept in the cache) but not decoded.
    pub fn row_nnz_into(&self, cells: &[u64], out: &mut Vec<u64>) -> Result<(), DatasetError> {
        let (tiles, rows) = self.plan(cells)?;
        let loaded = self.core.wait_tiles(&tiles, Keep::Raw)?;
        out.clear();
        out.resize(rows.len(), 0);
        // Each tile's rows (their places in the request), then one tile locked at a time (never two: concurrent
        // calls could otherwise lock them in opposite orders).
        let mut rows_of: Vec<Vec<(usize, u64)>> = vec![Vec::new(); tiles.len()];
        for (j, &(s, r)) in rows.iter().enumerate() {
            rows_of[s as usize].push((j, r));
        }
        for (tile, tile_rows) in loaded.iter().zip(&rows_of) {
            let data = tile.lock();
            let ip = match &*data {
                TileData::Raw { indptr, .. } => indptr.as_slice(),
                TileData::Decoded(d) => d.indptr(),
            };
            for &(j, r) in tile_rows {
                out[j] = (ip[r as usize + 1] - ip[r as usize]) as u64;
            }
        }
        Ok(())
    }

    /// Decodes the row of `cells[j]` straight into `places[j]` (each exactly as long as the row stores: see
    /// [`Dataset::row_nnz_into`]) and hands it to `map` there, to change in place: for a caller that lays out rows
    /// of several readers in one output and changes them without changing their lengths (a corpus renumbering an
    /// aligned member's genes), with no copy between. A place of another length is an error. Rows are checked as
    /// [`Dataset::get_batch`] checks them, and split between the decode threads.
    pub fn map_rows_in_place<V, F>(
        &self,
        cells: &[u64],
        places: &mut [(&mut [i32], &mut [V])],
        map: F,
    ) -> Result<(), DatasetError>
    where
        V: CountValue,
        F: Fn(&mut [i32], &mut [V]) + Sync,
    {
        if places.len() != cells.len() {
            return Err(DatasetError::InvalidArgument(format!("{} places for {} cells", places.len(), cells.len())));
        }
        let bytes: usize = places.iter().map(|(i, v)| i.len() * 4 + std::mem::size_of_val(*v)).sum();
        let mode = WriteMode::for_output_bytes(bytes as u64);
        self.with_decoded_rows(cells, |decoded, rows| {
            let fill = |rows: &[(u32, u64)], places: &mut [(&mut [i32], &mut [V])]| -> Result<(), RowFailure> {
                for (j, (&(s, r), (pi, pv))) in rows.iter().zip(places.iter_mut()).enumerate() {
                    if let Some(&(s, r)) = rows.get(j + 1) {
                        decoded[s as usize].prefetch_row(r as usize);
                    }
                    let planes = &decoded[s as usize];
                    let stored = planes.row_nnz(r as usize);
                    if pi.len() != stored || pv.len() != stored {
                        return Err(RowFailure::Read(DatasetError::InvalidArgument(format!(
                            "a place of {} entries for a row of {stored}",
                            pi.len()
                        ))));
                    }
                    planes.row_to_with(r as usize, pi, pv, mode).map_err(|e| RowFailure::Row(s as usize, e))?;
                    map(pi, pv);
                }
                Ok(())
            };
            const ROWS: usize = 64;
            self.core.on_decode_threads(|parallel| {
                if parallel {
                    rows.par_chunks(ROWS).zip(places.par_chunks_mut(ROWS)).try_for_each(|(r, p)| fill(r, p))
                } else {
                    fill(rows, places)
                }
            })
        })
    }
}

/// [`Dataset::map_rows_into`]'s rows (`(index in decoded, local row)`) with their rooms at the offsets of `indptr`
/// (one more entry than rows, starting at the first row's offset) and their counts in `written`; `parallel`:
/// splitting the rows in halves with `rayon::join` down to a few hundred rows each. The error names the tile
/// (index in `decoded`) of a bad row.
#[allow(clippy::too_many_arguments)]
fn map_rows<V, F>(
    decoded: &[Arc<TilePlanes>],
    rows: &[(u32, u64)],
    indptr: &[i64],
    indices: &mut [i32],
    values: &mut [V],
    written: &mut [usize],
    map: &F,
    parallel: bool,
) -> Result<(), (usize, DecodeError)>
where
    V: CountValue,
    F: Fn(&[i32], &[V], &mut [i32], &mut [V]) -> usize + Sync,
{
    const MIN_ROWS: usize = 256;
    if !parallel || rows.len() <= MIN_ROWS {
        let base = indptr[0];
        // The decoding thread's buffer: a row is decoded into it and read back while still in cache.
        let (mut row_i, mut row_v) = (Vec::new(), Vec::new());
        for (j, &(s, r)) in rows.iter().enumerate() {
            if let Some(&(s, r)) = rows.get(j + 1) {
                decoded[s as usize].prefetch_row(r as usize);
            }
            let (a, b) = ((indptr[j] - base) as usize, (indptr[j + 1] - base) as usize);
            dct_codec::resize_for_overwrite(&mut row_i, b - a, 0);
            dct_codec::resize_for_overwrite(&mut row_v, b - a, V::default());
            decoded[s as usize]
                .row_to_with(r as usize, &mut row_i, &mut row_v, WriteMode::Cached)
                .map_err(|e| (s as usize, e))?;
            written[j] = map(&row_i, &row_v, &mut indices[a..b], &mut values[a..b]).min(b - a);
        }
        return Ok(());
    }
    let mid = rows.len() / 2;
    let cut = (indptr[mid] - indptr[0]) as usize;
    let (li, ri) = indices.split_at_mut(cut);
    let (lv, rv) = values.split_at_mut(cut);
    let (lw, rw) = written.split_at_mut(mid);
    let (a, b) = rayon::join(
        || map_rows(decoded, &rows[..mid], &indptr[..=mid], li, lv, lw, map, true),
        || map_rows(decoded, &rows[mid..], &indptr[mid..], ri, rv, rw, map, true),
    );
    a.and(b)
}
