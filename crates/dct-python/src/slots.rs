//! Batches read into a training loader's reusable slots (`python/deltacells/_batch_slots.py` keeps them; the layout
//! is `dct_dataset::SlotLayout`'s): the slots' memory lent to the reader, and what a fill tells Python.

use dct_dataset::{SLOT_HEADER, SlotFill, SlotLayout};
use numpy::{PyArray1, PyReadwriteArray1};
use pyo3::prelude::*;

use crate::arrays::writable;
use crate::errors::value_error;

/// The slots' memory past their headers (writable contiguous uint8 arrays), borrowed for a read.
pub(crate) fn slot_arrays<'py>(slots: &'py [Bound<'py, PyAny>]) -> PyResult<Vec<PyReadwriteArray1<'py, u8>>> {
    slots
        .iter()
        .map(|s| {
            let array = s.cast::<PyArray1<u8>>().map_err(|_| value_error("a slot must be a 1-D uint8 numpy array"))?;
            writable(array, "a slot", "uint8")
        })
        .collect()
}

/// What Python gets of a fill: `(slot, nnz, used)`, `slot` -1 when no slot held the batch (nothing written; it
/// needs a slot of `used` bytes).
pub(crate) fn fill_result(fill: SlotFill) -> (i64, u64, u64) {
    match fill {
        SlotFill::Filled { slot, nnz, layout } => (slot as i64, nnz as u64, layout.used),
        SlotFill::TooSmall { used } => (-1, 0, used),
    }
}

/// Byte offsets in a slot of a batch of `n_rows` cells and `nnz` nonzeros: its cells (int64), row offsets (int32),
/// column indices (int32) and counts (4 bytes each), and the bytes it uses (`dct_dataset::SlotLayout`).
#[pyfunction]
pub(crate) fn slot_layout(n_rows: u64, nnz: u64) -> PyResult<(u64, u64, u64, u64, u64)> {
    let l = SlotLayout::new(n_rows, nnz)
        .ok_or_else(|| value_error(format!("a batch of {n_rows} cells and {nnz} nonzeros is too large to lay out")))?;
    Ok((l.cells, l.crow, l.col, l.val, l.used))
}

/// Bytes at the start of a slot that are its owner's (its state word); the batch follows.
pub(crate) const HEADER: u64 = SLOT_HEADER;
