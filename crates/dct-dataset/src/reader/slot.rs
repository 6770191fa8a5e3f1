//! Batches read into memory the caller reuses ("slots"): a training loader keeps a few slots, shared with another
//! process or its own, and reads each batch into one that is free and large enough, so that no batch takes memory
//! fresh from the system. The batch's size is known only once its rows are planned, so the slot is chosen then,
//! within the read ([`Dataset::get_batch_into_slot`]): one plan a batch, where sizing it first
//! ([`Dataset::batch_nnz`]) and reading it after would plan it twice.
//!
//! A slot is [`SLOT_HEADER`] bytes that belong to its owner (a state word saying whether a batch in it is still in
//! use), then the batch, laid out as [`SlotLayout`] says: the cells' indices (int64), the row offsets (int32), the
//! column indices (int32) and the counts (4 bytes each), each 8-byte aligned. The reader writes only past the
//! header.

use dct_codec::CountValue;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::Dataset;
use crate::error::DatasetError;

/// A count type a slot holds: 4 bytes, any bit pattern valid (`f32`, `i32`, `u32`).
pub trait SlotValue: CountValue + FromBytes + IntoBytes + KnownLayout + Immutable {}

impl<V: CountValue + FromBytes + IntoBytes + KnownLayout + Immutable> SlotValue for V {}

/// Bytes at the start of a slot that belong to its owner; the batch follows.
pub const SLOT_HEADER: u64 = 64;

/// Where a batch lies in a slot: byte offsets from the slot's start (header included), and the bytes it uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotLayout {
    /// The cells' indices (int64, one a row).
    pub cells: u64,
    /// The row offsets (int32, one more than the rows).
    pub crow: u64,
    /// The column indices (int32, one a nonzero).
    pub col: u64,
    /// The counts (4 bytes each, one a nonzero).
    pub val: u64,
    /// Bytes from the slot's start to the end of the counts (rounded up to 8).
    pub used: u64,
}

impl SlotLayout {
    /// The layout of a batch of `n_rows` rows and `nnz` nonzeros; `None` if it would not fit in 64-bit offsets.
    ///
    /// ```
    /// use dct_dataset::{SLOT_HEADER, SlotLayout};
    /// let l = SlotLayout::new(2, 3).unwrap();
    /// assert_eq!((l.cells, l.crow, l.col, l.val, l.used), (SLOT_HEADER, 80, 96, 112, 128));
    /// ```
    pub fn new(n_rows: u64, nnz: u64) -> Option<SlotLayout> {
        let align8 = |n: u64| n.checked_add(7).map(|n| n & !7);
        let cells = SLOT_HEADER;
        let crow = cells.checked_add(n_rows.checked_mul(8)?)?;
        let col = align8(crow.checked_add(n_rows.checked_add(1)?.checked_mul(4)?)?)?;
        let val = align8(col.checked_add(nnz.checked_mul(4)?)?)?;
        let used = align8(val.checked_add(nnz.checked_mul(4)?)?)?;
        Some(SlotLayout { cells, crow, col, val, used })
    }
}

/// What [`Dataset::get_batch_into_slot`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotFill {
    /// The batch is in slot `slot` (an index in the slots given), with `nnz` nonzeros, laid out as `layout` says.
    Filled {
        /// The slot chosen.
        slot: usize,
        /// The batch's nonzeros.
        nnz: usize,
        /// Where its parts lie.
        layout: SlotLayout,
    },
    /// No slot given holds the batch: it needs a slot of at least `used` bytes (header included). Nothing was
    /// written. The batch's tiles stay cached, so reading it again into a larger slot plans it and reads its rows
    /// again but fetches and decodes nothing (a corpus has read its members' rows before it knows the size: those
    /// are read again).
    TooSmall {
        /// The bytes the batch needs.
        used: u64,
    },
}

/// What a read into a slot ([`read_into_slot`]) calls once it knows its batch's nonzeros, to get the room to fill.
pub struct SlotChooser<'o, 's, V> {
    slots: &'o mut [&'s mut [u8]],
    n_rows: usize,
    chosen: &'o mut Option<(usize, usize, SlotLayout)>,
    needed: &'o mut Option<u64>,
    _values: std::marker::PhantomData<V>,
}

impl<'o, V> SlotChooser<'o, '_, V>
where
    V: SlotValue,
{
    /// The column indices and counts to fill for a batch of `nnz` nonzeros, in the first slot that holds the batch.
    /// An error if none does (the read stops; [`read_into_slot`] then says how large a slot it needs), if the batch
    /// cannot be laid out (row offsets are int32), or if a slot's memory is not 8-byte aligned.
    pub fn room(self, nnz: usize) -> Result<(&'o mut [i32], &'o mut [V]), DatasetError> {
        const { assert!(size_of::<V>() == 4, "slots hold 4-byte counts") };
        let n_rows = self.n_rows;
        let too_large = || {
            DatasetError::InvalidArgument(format!(
                "a batch of {n_rows} cells and {nnz} nonzeros cannot be laid out with int32 row offsets (at most \
                 2^31 - 1 nonzeros a batch): ask for fewer cells a batch"
            ))
        };
        if nnz > i32::MAX as usize {
            return Err(too_large());
        }
        let layout = SlotLayout::new(n_rows as u64, nnz as u64).ok_or_else(too_large)?;
        let Some(slot) = self.slots.iter().position(|s| s.len() as u64 >= layout.used - SLOT_HEADER) else {
            *self.needed = Some(layout.used);
            return Err(DatasetError::InvalidArgument(format!("no slot holds {} bytes", layout.used)));
        };
        let at = |off: u64| (off - SLOT_HEADER) as usize;
        let bytes = &mut self.slots[slot][at(layout.col)..at(layout.used)];
        let (col, val) = bytes.split_at_mut(at(layout.val) - at(layout.col));
        let indices = <[i32]>::mut_from_bytes(&mut col[..4 * nnz]).map_err(|_| misaligned(slot, "column indices"))?;
        let values = <[V]>::mut_from_bytes(&mut val[..4 * nnz]).map_err(|_| misaligned(slot, "counts"))?;
        *self.chosen = Some((slot, nnz, layout));
        Ok((indices, values))
    }
}

fn misaligned(slot: usize, what: &str) -> DatasetError {
    DatasetError::InvalidArgument(format!(
        "slot {slot}'s {what} are not aligned for their type: pass slots whose memory starts at an 8-byte boundary"
    ))
}

/// Writes the cells and the row offsets (`indptr`, from 0) of a batch of `nnz` nonzeros whose rows are in place in
/// `slot` (its bytes past the header). Offsets that do not describe that batch (a read that laid out one size and
/// reported another) are an error, not a panic and not a batch read wrong.
fn finish(
    slot: &mut [u8],
    k: usize,
    nnz: usize,
    layout: SlotLayout,
    cells: &[u64],
    indptr: &[i64],
) -> Result<SlotFill, DatasetError> {
    if indptr.len() != cells.len() + 1 || indptr.first() != Some(&0) || indptr.last() != Some(&(nnz as i64)) {
        return Err(DatasetError::InvalidArgument(format!(
            "the read laid out {nnz} nonzeros for {} cells but reported {} row offsets ending at {:?}",
            cells.len(),
            indptr.len(),
            indptr.last()
        )));
    }
    let at = |off: u64| (off - SLOT_HEADER) as usize;
    let (cells_bytes, rest) = slot[..at(layout.col)].split_at_mut(at(layout.crow));
    let out = <[u64]>::mut_from_bytes(&mut cells_bytes[..8 * cells.len()]).map_err(|_| misaligned(k, "cells"))?;
    out.copy_from_slice(cells);
    let crow = <[i32]>::mut_from_bytes(&mut rest[..4 * indptr.len()]).map_err(|_| misaligned(k, "row offsets"))?;
    for (c, &p) in crow.iter_mut().zip(indptr) {
        // Below 2^31: `SlotChooser::room` refused larger batches.
        *c = p as i32;
    }
    Ok(SlotFill::Filled { slot: k, nnz, layout })
}

/// Reads the batch of `cells` into the first of `slots` that holds it (each slot's bytes past its [`SLOT_HEADER`],
/// 8-byte aligned): `read(indptr, chooser)` plans the batch, calls `chooser.room(nnz)` once it knows the batch's
/// nonzeros, fills the room it gets, and leaves the row offsets (from 0) in `indptr`; then the cells and row offsets
/// are written. [`SlotFill::TooSmall`] (nothing written) if no slot holds the batch; `R` is what the read returns
/// besides (a corpus's member of each row, say). A slot that is not 8-byte aligned is an error (`slot_error` makes
/// it the read's error type). What [`Dataset::get_batch_into_slot`] is made of, for other readers of rows.
pub fn read_into_slot<'s, V, E, R>(
    cells: &[u64],
    slots: &mut [&'s mut [u8]],
    read: impl for<'o> FnOnce(&mut Vec<i64>, SlotChooser<'o, 's, V>) -> Result<R, E>,
    slot_error: impl FnOnce(DatasetError) -> E,
) -> Result<(SlotFill, Option<R>), E>
where
    V: SlotValue,
{
    let (mut chosen, mut needed) = (None, None);
    let mut indptr = Vec::new();
    let chooser = SlotChooser {
        slots: &mut *slots,
        n_rows: cells.len(),
        chosen: &mut chosen,
        needed: &mut needed,
        _values: std::marker::PhantomData,
    };
    let result = read(&mut indptr, chooser);
    match (result, needed, chosen) {
        (_, Some(used), _) => Ok((SlotFill::TooSmall { used }, None)),
        (Err(e), None, _) => Err(e),
        (Ok(r), None, Some((k, nnz, layout))) => match finish(slots[k], k, nnz, layout, cells, &indptr) {
            Ok(fill) => Ok((fill, Some(r))),
            Err(e) => Err(slot_error(e)),
        },
        (Ok(_), None, None) => Err(slot_error(DatasetError::InvalidArgument("the read asked for no room".into()))),
    }
}

impl Dataset {
    /// The rows of `cells` read into the first of `slots` that holds them: each slot is a caller's reusable memory
    /// past its [`SLOT_HEADER`] bytes (8-byte aligned), and the batch is laid out as [`SlotLayout`] says (cells,
    /// row offsets from 0, column indices, counts of type `V`). One plan: the slot is chosen once the batch's size
    /// is known, within the read. [`SlotFill::TooSmall`] (nothing written) if no slot holds it. Rows are checked as
    /// [`Dataset::get_batch`] checks them.
    pub fn get_batch_into_slot<V>(&self, cells: &[u64], slots: &mut [&mut [u8]]) -> Result<SlotFill, DatasetError>
    where
        V: SlotValue,
    {
        let read = |indptr: &mut Vec<i64>, chooser: SlotChooser<'_, '_, V>| {
            self.read_rows(cells, indptr, |nnz| chooser.room(nnz))
        };
        read_into_slot(cells, slots, read, |e| e).map(|(fill, _)| fill)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reader::tests::small_dataset;

    /// A batch read back from a slot's bytes (past its header) as `layout` says, by hand: cells, row offsets,
    /// column indices and counts (as their bits).
    fn read_back(
        body: &[u8],
        layout: SlotLayout,
        n_rows: usize,
        nnz: usize,
    ) -> (Vec<u64>, Vec<i32>, Vec<i32>, Vec<u32>) {
        let at = |off: u64| (off - SLOT_HEADER) as usize;
        let words = |from: u64, n: usize, size: usize| -> Vec<u64> {
            body[at(from)..at(from) + n * size]
                .chunks(size)
                .map(|b| {
                    if size == 8 {
                        u64::from_ne_bytes(b.try_into().unwrap())
                    } else {
                        u32::from_ne_bytes(b.try_into().unwrap()) as u64
                    }
                })
                .collect()
        };
        let as_i32 = |v: Vec<u64>| v.into_iter().map(|w| w as u32 as i32).collect::<Vec<i32>>();
        (
            words(layout.cells, n_rows, 8),
            as_i32(words(layout.crow, n_rows + 1, 4)),
            as_i32(words(layout.col, nnz, 4)),
            words(layout.val, nnz, 4).into_iter().map(|w| w as u32).collect(),
        )
    }

    /// Slots of `sizes` bytes past the header, each 8-byte aligned and filled with 0xAB.
    fn slots(sizes: &[usize]) -> Vec<Vec<u64>> {
        sizes.iter().map(|&n| vec![0xABAB_ABAB_ABAB_ABAB_u64; n.div_ceil(8)]).collect()
    }

    fn bytes_of(slots: &mut [Vec<u64>], sizes: &[usize]) -> Vec<Vec<u8>> {
        slots.iter_mut().zip(sizes).map(|(s, &n)| s.as_mut_bytes()[..n].to_vec()).collect()
    }

    #[test]
    fn a_batch_goes_to_the_first_slot_that_holds_it_as_get_batch_reads_it() {
        let dir = tempfile::tempdir().unwrap();
        let (ds, _, _) = small_dataset(dir.path(), 30, 9);
        for cells in [vec![7u64, 3, 29, 3, 0, 14, 15, 7], vec![5], (0..30).rev().collect()] {
            let want = ds.get_batch_as::<u32>(&cells).unwrap();
            let nnz = want.indices.len();
            let layout = SlotLayout::new(cells.len() as u64, nnz as u64).unwrap();
            let exact = (layout.used - SLOT_HEADER) as usize;
            let sizes = [exact - 1, exact, exact + 100];
            let mut backing = slots(&sizes);
            let mut views: Vec<&mut [u8]> =
                backing.iter_mut().zip(&sizes).map(|(s, &n)| &mut s.as_mut_bytes()[..n]).collect();
            let fill = ds.get_batch_into_slot::<u32>(&cells, &mut views).unwrap();
            assert_eq!(fill, SlotFill::Filled { slot: 1, nnz, layout }, "cells {cells:?}");
            let (c, crow, col, val) = read_back(views[1], layout, cells.len(), nnz);
            assert_eq!(c, cells);
            assert_eq!(crow, want.indptr.iter().map(|&p| p as i32).collect::<Vec<_>>());
            assert_eq!(col, want.indices);
            assert_eq!(val, want.values);
            // The other slots are untouched.
            let untouched = |v: &[u8]| v.iter().all(|&b| b == 0xAB);
            assert!(untouched(views[0]) && untouched(views[2]));
            // Counts as float32 into the same slot: the same rows.
            let fill = ds.get_batch_into_slot::<f32>(&cells, &mut views[1..]).unwrap();
            assert_eq!(fill, SlotFill::Filled { slot: 0, nnz, layout });
            let (_, _, _, bits) = read_back(views[1], layout, cells.len(), nnz);
            let floats: Vec<f32> = bits.into_iter().map(f32::from_bits).collect();
            assert_eq!(floats, want.values.iter().map(|&v| v as f32).collect::<Vec<_>>());
        }
    }

    #[test]
    fn no_slot_that_holds_the_batch_writes_nothing_and_says_what_it_needs() {
        let dir = tempfile::tempdir().unwrap();
        let (ds, _, _) = small_dataset(dir.path(), 12, 5);
        let cells = [1u64, 11, 4];
        let used = SlotLayout::new(3, 6).unwrap().used;
        let sizes = [(used - SLOT_HEADER) as usize - 8, 16];
        let mut backing = slots(&sizes);
        let before = bytes_of(&mut backing, &sizes);
        let mut views: Vec<&mut [u8]> =
            backing.iter_mut().zip(&sizes).map(|(s, &n)| &mut s.as_mut_bytes()[..n]).collect();
        assert_eq!(ds.get_batch_into_slot::<f32>(&cells, &mut views).unwrap(), SlotFill::TooSmall { used });
        assert_eq!(ds.get_batch_into_slot::<f32>(&cells, &mut []).unwrap(), SlotFill::TooSmall { used });
        drop(views);
        assert_eq!(bytes_of(&mut backing, &sizes), before);
    }

    #[test]
    fn bad_requests_and_misaligned_slots_are_errors_not_panics() {
        let dir = tempfile::tempdir().unwrap();
        let (ds, _, _) = small_dataset(dir.path(), 12, 5);
        let mut backing = slots(&[4096]);
        let body = backing[0].as_mut_bytes();
        // A cell outside the dataset: the reader's own error, nothing written.
        let err = ds.get_batch_into_slot::<f32>(&[3, 12], &mut [&mut body[..]]).unwrap_err();
        assert!(err.to_string().contains("12"), "{err}");
        assert!(body.iter().all(|&b| b == 0xAB));
        // Memory not 8-byte aligned: an error naming the slot (at 1, the column indices; at 4, the cells).
        for offset in [1, 4] {
            let err = ds.get_batch_into_slot::<f32>(&[3, 5], &mut [&mut body[offset..]]).unwrap_err();
            assert!(
                matches!(err, DatasetError::InvalidArgument(ref m) if m.contains("slot 0") && m.contains("aligned")),
                "{err}"
            );
        }
    }

    #[test]
    fn a_read_that_reports_other_offsets_than_it_laid_out_is_an_error() {
        let cells = [4u64, 9];
        let mut backing = slots(&[4096]);
        let mut views = [&mut backing[0].as_mut_bytes()[..]];
        let bad = |offsets: Vec<i64>, room: usize| {
            move |indptr: &mut Vec<i64>, chooser: SlotChooser<'_, '_, f32>| {
                chooser.room(room)?;
                *indptr = offsets;
                Ok::<_, DatasetError>(())
            }
        };
        for (offsets, room) in [(vec![0, 3, 5], 6), (vec![0, 5], 5), (vec![1, 3, 5], 5), (vec![], 0)] {
            let got = read_into_slot(&cells, &mut views, bad(offsets.clone(), room), |e| e);
            assert!(matches!(got, Err(DatasetError::InvalidArgument(_))), "{offsets:?}, room {room}: {got:?}");
        }
        let no_room = |_: &mut Vec<i64>, _: SlotChooser<'_, '_, f32>| Ok::<_, DatasetError>(());
        assert!(read_into_slot(&cells, &mut views, no_room, |e| e).is_err());
        let good = read_into_slot(&cells, &mut views, bad(vec![0, 3, 5], 5), |e| e).unwrap();
        assert_eq!(good.0, SlotFill::Filled { slot: 0, nnz: 5, layout: SlotLayout::new(2, 5).unwrap() });
    }

    #[test]
    fn an_empty_batch_is_one_row_offset() {
        let dir = tempfile::tempdir().unwrap();
        let (ds, _, _) = small_dataset(dir.path(), 6, 5);
        let mut backing = slots(&[64]);
        let layout = SlotLayout::new(0, 0).unwrap();
        let fill = ds.get_batch_into_slot::<f32>(&[], &mut [backing[0].as_mut_bytes()]).unwrap();
        assert_eq!(fill, SlotFill::Filled { slot: 0, nnz: 0, layout });
        assert_eq!(read_back(backing[0].as_mut_bytes(), layout, 0, 0).1, vec![0]);
    }

    #[test]
    fn layouts_too_large_for_64_bit_offsets_are_none() {
        assert_eq!(SlotLayout::new(u64::MAX / 8, 0), None);
        assert_eq!(SlotLayout::new(1, u64::MAX / 4), None);
        let l = SlotLayout::new(3, 5).unwrap();
        assert!([l.cells, l.crow, l.col, l.val, l.used].iter().all(|o| o.is_multiple_of(8)));
        assert_eq!(l.used, l.val + 24);
    }
}
