//! Store layers for tests and benchmarks (feature `testing`): one documented set instead of a copy per crate.
//!
//! Each function wraps a [`Store`]'s backend and returns the wrapped store (same location, names, retries and
//! request cap size) and, where there is one, a handle to inspect or steer the layer. Layers stack: the last one
//! applied sees requests first. A layered local store reads its tiles through the backend instead of memory
//! maps, so the layer sees every read.
//!
//! ```
//! use dct_store::Store;
//! use dct_store::testing::{counted, faulty, Fault};
//! # dct_store::runtime::block_on(async {
//! let (store, faults) = faulty(&Store::memory("demo"), 7);
//! let (store, counter) = counted(&store);
//! store.put("tiles/t0.dct", bytes::Bytes::from_static(b"tile bytes")).await.unwrap();
//! faults.set_first_gets(2, &[Fault::Error], "tiles/");
//! // Two injected failures, then the real bytes: the store retried.
//! assert_eq!(&store.get_exact("tiles/t0.dct", 10).await.unwrap()[..], b"tile bytes");
//! assert_eq!(counter.counts().gets_of("tiles/t0.dct"), 3);
//! assert_eq!(faults.take_log().len(), 2);
//! # }).unwrap();
//! ```

mod counting;
mod faults;

use std::sync::Arc;

use object_store::ObjectStore;

use crate::Store;
pub use crate::throttle::{Throttle, throttled};
pub use counting::{Counter, Request, RequestCounts};
pub use faults::{ALL_FAULTS, Fault, Faults, SLOW_START, TIMEOUT_SLEEP, TRANSPORT_FAULTS};

/// `store` with every request counted and every read recorded (see [`Counter`]), objects named by their paths
/// relative to `store`.
pub fn counted(store: &Store) -> (Store, Arc<Counter>) {
    let counter = Arc::new(Counter::default());
    let (c, prefix) = (counter.clone(), store.prefix.clone());
    let layered =
        store.layered(|inner| Arc::new(counting::CountingStore { inner, counter: c, prefix }) as Arc<dyn ObjectStore>);
    (layered, counter)
}

/// `store` with faults injected on a schedule seeded by `seed` (see [`Faults`]; none until one is set).
pub fn faulty(store: &Store, seed: u64) -> (Store, Arc<Faults>) {
    let faults = Faults::new(seed);
    let f = faults.clone();
    let layered = store.layered(|inner| Arc::new(faults::FaultStore { inner, faults: f }) as Arc<dyn ObjectStore>);
    (layered, faults)
}
