//! The one way a store layer is written: [`object_store_layer!`] implements `ObjectStore` for a wrapper from the
//! methods it changes (used by the simulated latency of [`crate::Throttle`] and by the `testing` layers).

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
