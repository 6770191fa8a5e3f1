//! A layer that delays requests as a distant object store would: a latency per request and a bandwidth per body.
//! Unlike `object_store`'s `ThrottledStore` it also wraps local directories (whose bodies are files).

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    GetOptions, GetResult, GetResultPayload, ListResult, ObjectMeta, ObjectStore, PutOptions, PutPayload, PutResult,
};

use super::Throttle;

#[derive(Debug)]
pub(crate) struct ThrottleStore {
    pub(crate) inner: Arc<dyn ObjectStore>,
    pub(crate) throttle: Throttle,
}

async fn sleep(d: Duration) {
    if !d.is_zero() {
        tokio::time::sleep(d).await;
    }
}

/// The time `n` body bytes take at `bytes_per_second`.
fn transfer(bytes_per_second: Option<std::num::NonZeroU32>, n: usize) -> Duration {
    match bytes_per_second {
        Some(bps) => Duration::from_secs_f64(n as f64 / f64::from(bps.get())),
        None => Duration::ZERO,
    }
}

object_store_layer!(ThrottleStore, forward: [put_multipart_opts, delete_stream, copy_opts, rename_opts], {
    async fn put_opts(&self, location: &Path, payload: PutPayload, opts: PutOptions) -> object_store::Result<PutResult> {
        // A PUT once sent lands even if its caller stops waiting (a server commits the body it received; a local
        // write runs on a blocking thread), so it runs as a task of its own that dropping this future leaves be.
        let (inner, location, latency) = (self.inner.clone(), location.clone(), self.throttle.latency);
        let put = tokio::spawn(async move {
            sleep(latency).await;
            inner.put_opts(&location, payload, opts).await
        });
        put.await.map_err(|e| object_store::Error::Generic { store: "throttle", source: Box::new(e) })?
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> object_store::Result<GetResult> {
        sleep(self.throttle.latency).await;
        let got = self.inner.get_opts(location, options).await?;
        if self.throttle.bytes_per_second.is_none() {
            return Ok(got);
        }
        let (meta, range, attributes) = (got.meta.clone(), got.range.clone(), got.attributes.clone());
        let bps = self.throttle.bytes_per_second;
        let body = got.into_stream().then(move |chunk| async move {
            if let Ok(bytes) = &chunk {
                sleep(transfer(bps, bytes.len())).await;
            }
            chunk
        });
        let payload = GetResultPayload::Stream(body.boxed());
        Ok(GetResult { payload, meta, range, attributes, extensions: Default::default() })
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> object_store::Result<Vec<Bytes>> {
        sleep(self.throttle.latency).await;
        let got = self.inner.get_ranges(location, ranges).await?;
        sleep(transfer(self.throttle.bytes_per_second, got.iter().map(Bytes::len).sum())).await;
        Ok(got)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let latency = self.throttle.latency;
        let listed = self.inner.list(prefix);
        futures::stream::once(async move {
            sleep(latency).await;
            listed
        })
        .flatten()
        .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        sleep(self.throttle.latency).await;
        self.inner.list_with_delimiter(prefix).await
    }
});
