//! Member batches that a corpus's reads give back and take again, bounded in number and bytes.

use dct_dataset::{Batch, CountValue};

/// Batches of any count type that reads give back and take again: at most [`SpareBatches::MAX`] of them, holding
/// at most [`SpareBatches::MAX_BYTES`] together, so that one large read does not keep its memory for the corpus's
/// life.
#[derive(Debug, Default)]
pub(crate) struct SpareBatches {
    /// Each batch with the bytes it holds.
    batches: std::sync::Mutex<Vec<(usize, Box<dyn std::any::Any + Send>)>>,
}

impl SpareBatches {
    const MAX: usize = 16;
    const MAX_BYTES: usize = 256 << 20;

    pub(crate) fn take<V: CountValue>(&self) -> Batch<V> {
        let mut batches = self.batches.lock().unwrap_or_else(|e| e.into_inner());
        match batches.iter().position(|(_, b)| b.is::<Batch<V>>()) {
            Some(i) => *batches.swap_remove(i).1.downcast::<Batch<V>>().expect("checked above"),
            None => Batch::default(),
        }
    }

    pub(crate) fn give<V: CountValue>(&self, batch: Batch<V>) {
        let bytes = batch.indptr.capacity() * 8
            + batch.indices.capacity() * 4
            + batch.values.capacity() * std::mem::size_of::<V>();
        let mut batches = self.batches.lock().unwrap_or_else(|e| e.into_inner());
        let held: usize = batches.iter().map(|(b, _)| b).sum();
        if batches.len() < Self::MAX && held + bytes <= Self::MAX_BYTES {
            batches.push((bytes, Box::new(batch)));
        }
    }

    #[cfg(test)]
    fn held(&self) -> (usize, usize) {
        let batches = self.batches.lock().unwrap_or_else(|e| e.into_inner());
        (batches.len(), batches.iter().map(|(b, _)| b).sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(nnz: usize) -> Batch<f32> {
        Batch { indptr: vec![0, nnz as i64], indices: vec![0; nnz], values: vec![0.0; nnz], ..Batch::default() }
    }

    #[test]
    fn spare_batches_keep_a_bounded_number_and_size() {
        let spare = SpareBatches::default();
        // Larger than all the room: not kept.
        spare.give(batch(SpareBatches::MAX_BYTES / 8 + 1));
        assert_eq!(spare.held().0, 0);
        for _ in 0..SpareBatches::MAX + 3 {
            spare.give(batch(1000));
        }
        assert_eq!(spare.held().0, SpareBatches::MAX);
        // Taken and given back: kept again.
        let b = spare.take::<f32>();
        assert_eq!(b.indices.len(), 1000);
        spare.give(b);
        let (n, bytes) = spare.held();
        assert_eq!(n, SpareBatches::MAX);
        assert!(bytes <= SpareBatches::MAX_BYTES);
    }
}
