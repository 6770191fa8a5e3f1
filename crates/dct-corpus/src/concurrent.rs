//! Work on every member at once: opening a corpus makes a round trip to the store per member and per object (a
//! manifest, a gene table, an obs schema), so members are taken on up to [`OPEN_CONCURRENCY`] threads and a corpus
//! of a thousand members opens in the time of a few dozen round trips.

use crate::error::CorpusError;

/// Members whose objects are read at once when a corpus opens (and, in Python, members opened at once).
pub const OPEN_CONCURRENCY: usize = 32;

/// `f` of each of `items` (with its index), on up to [`OPEN_CONCURRENCY`] threads, results in item order; the
/// first item (in order) that fails is the error.
pub(crate) fn on_each<I: Sync, T: Send>(
    items: &[I],
    f: impl Fn(usize, &I) -> Result<T, CorpusError> + Sync,
) -> Result<Vec<T>, CorpusError> {
    let threads = OPEN_CONCURRENCY.min(items.len());
    if threads <= 1 {
        return items.iter().enumerate().map(|(i, item)| f(i, item)).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done: Vec<(usize, Result<T, CorpusError>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(item) = items.get(i) else { break mine };
                        mine.push((i, f(i, item)));
                    }
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))).collect()
    });
    let mut found: Vec<Option<Result<T, CorpusError>>> = (0..items.len()).map(|_| None).collect();
    for (i, result) in done {
        found[i] = Some(result);
    }
    found.into_iter().map(|r| r.expect("every item was taken")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_in_item_order_and_the_first_failure_in_order_is_the_error() {
        let items: Vec<usize> = (0..100).collect();
        assert_eq!(on_each(&items, |i, &x| Ok(i + x)).unwrap(), (0..100).map(|x| 2 * x).collect::<Vec<_>>());
        let e =
            on_each(
                &items,
                |_, &x| {
                    if x % 40 == 39 { Err(CorpusError::InvalidArgument(format!("item {x}"))) } else { Ok(x) }
                },
            )
            .unwrap_err();
        assert_eq!(e.to_string(), CorpusError::InvalidArgument("item 39".into()).to_string());
    }
}
