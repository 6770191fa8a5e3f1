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

/// Implements `ObjectStore` for a layer (a struct with an `inner: Arc<dyn ObjectStore>` field) from the methods it
/// changes, plus those named in `forward`, which pass the request to `inner` unchanged; `Display` shows `inner`.
/// Each layer so says what it leaves alone, and the pass-through methods are written once. (A macro, because
/// `async_trait` must see every method of the impl at once.)
macro_rules! object_store_layer {
    ($layer:ident, forward: [$($name:ident),* $(,)?], { $($methods:tt)* }) => {
        impl std::fmt::Display for $layer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::Display::fmt(&self.inner, f)
            }
        }
        object_store_layer!(@collect $layer [$($methods)*] $($name)*);
    };
    (@collect $layer:ident [$($done:tt)*] put_multipart_opts $($rest:ident)*) => {
        object_store_layer!(@collect $layer [$($done)*
            async fn put_multipart_opts(
                &self,
                location: &object_store::path::Path,
                opts: object_store::PutMultipartOptions,
            ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
                self.inner.put_multipart_opts(location, opts).await
            }
        ] $($rest)*);
    };
    (@collect $layer:ident [$($done:tt)*] delete_stream $($rest:ident)*) => {
        object_store_layer!(@collect $layer [$($done)*
            fn delete_stream(
                &self,
                locations: futures::stream::BoxStream<'static, object_store::Result<object_store::path::Path>>,
            ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::path::Path>> {
                self.inner.delete_stream(locations)
            }
        ] $($rest)*);
    };
    (@collect $layer:ident [$($done:tt)*] list $($rest:ident)*) => {
        object_store_layer!(@collect $layer [$($done)*
            fn list(
                &self,
                prefix: Option<&object_store::path::Path>,
            ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
                self.inner.list(prefix)
            }
        ] $($rest)*);
    };
    (@collect $layer:ident [$($done:tt)*] list_with_delimiter $($rest:ident)*) => {
        object_store_layer!(@collect $layer [$($done)*
            async fn list_with_delimiter(
                &self,
                prefix: Option<&object_store::path::Path>,
            ) -> object_store::Result<object_store::ListResult> {
                self.inner.list_with_delimiter(prefix).await
            }
        ] $($rest)*);
    };
    (@collect $layer:ident [$($done:tt)*] copy_opts $($rest:ident)*) => {
        object_store_layer!(@collect $layer [$($done)*
            async fn copy_opts(
                &self,
                from: &object_store::path::Path,
                to: &object_store::path::Path,
                options: object_store::CopyOptions,
            ) -> object_store::Result<()> {
                self.inner.copy_opts(from, to, options).await
            }
        ] $($rest)*);
    };
    (@collect $layer:ident [$($done:tt)*] rename_opts $($rest:ident)*) => {
        object_store_layer!(@collect $layer [$($done)*
            async fn rename_opts(
                &self,
                from: &object_store::path::Path,
                to: &object_store::path::Path,
                options: object_store::RenameOptions,
            ) -> object_store::Result<()> {
                self.inner.rename_opts(from, to, options).await
            }
        ] $($rest)*);
    };
    (@collect $layer:ident [$($done:tt)*]) => {
        #[async_trait::async_trait]
        impl object_store::ObjectStore for $layer {
            $($done)*
        }
    };
}

mod counting;
mod faults;
mod throttle;

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use object_store::ObjectStore;

use crate::Store;
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

/// How a [`throttled`] store delays requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Throttle {
    /// Time to first byte of every GET (and the time of every PUT and LIST).
    pub latency: Duration,
    /// Bandwidth of each GET body, in bytes per second (`None`: unlimited).
    pub bytes_per_second: Option<NonZeroU32>,
}

/// `store` with every request delayed as `throttle` says (an object store seen over a network). Works over
/// every backend, local directories included. A PUT, once sent, lands even if its caller stops waiting for it.
pub fn throttled(store: &Store, throttle: Throttle) -> Store {
    store.layered(|inner| Arc::new(throttle::ThrottleStore { inner, throttle }) as Arc<dyn ObjectStore>)
}
