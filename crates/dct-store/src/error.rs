//! The error of every store request.

/// Why a request of a [`Store`](crate::Store) failed. Every variant names the object (its URL); the message says
/// its cause once (the backend's own message is part of [`StoreError::Request`], not a separate source).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The object does not exist.
    #[error("{url} does not exist")]
    NotFound {
        /// The object's URL.
        url: String,
    },
    /// The object is larger than the caller accepts for its kind; nothing of it was read.
    #[error("{url} is {size} bytes, more than the {limit} accepted for it")]
    TooLarge {
        /// The object's URL.
        url: String,
        /// Its size, as the store reports it.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// The object's size differs from the size the caller expects (from a manifest); nothing of it was read.
    #[error("{url} is {size} bytes where {expected} were expected")]
    WrongSize {
        /// The object's URL.
        url: String,
        /// Its size, as the store reports it.
        size: u64,
        /// The size expected.
        expected: u64,
    },
    /// The request failed: the network, the service, permissions, or a body of the wrong length.
    #[error("{op} {url} failed{}: {message}{}", attempts_note(*attempts), advice(*transient))]
    Request {
        /// The request: `GET`, `GET range`, `HEAD`, `PUT`, `LIST`, `DELETE`.
        op: &'static str,
        /// The object's (or prefix's) URL.
        url: String,
        /// What the backend said.
        message: String,
        /// Whether the failure was of a kind that may pass (network, throttling, server errors): it was retried
        /// and a later attempt may still succeed. Permission, authentication and configuration errors are not.
        transient: bool,
        /// Attempts made, including the first.
        attempts: u32,
    },
    /// A URL or path that cannot be opened (unknown scheme, backend not compiled in, bad option).
    #[error("cannot use {url}: {message}")]
    Url {
        /// The URL as given.
        url: String,
        /// Why not, and what to do.
        message: String,
    },
    /// The I/O threads could not be started.
    #[error("cannot start the storage I/O threads: {0}")]
    Runtime(String),
    /// The caller asked to stop (Ctrl-C) while waiting for storage; what was waited for was abandoned.
    #[error("interrupted while waiting for storage")]
    Interrupted,
}

fn attempts_note(attempts: u32) -> String {
    if attempts > 1 { format!(" after {attempts} attempts") } else { String::new() }
}

fn advice(transient: bool) -> &'static str {
    if transient {
        "; check the network and the service, or allow more retries"
    } else {
        "; check the URL, the credentials and the permissions"
    }
}

impl StoreError {
    /// The URL the error is about.
    pub fn url(&self) -> &str {
        match self {
            StoreError::NotFound { url }
            | StoreError::TooLarge { url, .. }
            | StoreError::WrongSize { url, .. }
            | StoreError::Request { url, .. }
            | StoreError::Url { url, .. } => url,
            StoreError::Runtime(_) | StoreError::Interrupted => "",
        }
    }

    /// Whether a later attempt may succeed (a transient request failure, or the I/O threads).
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Request { transient: true, .. } | StoreError::Runtime(_))
    }

    /// Whether the object does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, StoreError::NotFound { .. })
    }
}

/// Whether another attempt of the request that failed with `e` may succeed: generic errors, the variant every
/// backend uses for network failures, timeouts, throttling and server errors, and the one a body stream that
/// breaks off gives. Missing objects, failed preconditions, permission, authentication and configuration errors
/// are final.
pub(crate) fn is_transient(e: &object_store::Error) -> bool {
    matches!(e, object_store::Error::Generic { .. })
        && !http_status(e).is_some_and(|s| (400..500).contains(&s) && s != 408 && s != 429)
        && !is_final_file_error(e)
        // The HTTP client refused to build the request (a plain http:// endpoint without allow_http, say).
        && !backend_message_raw(e).contains("builder error")
}

/// Whether `e` comes from a file system error that another attempt meets again: a path through a file, a
/// directory where a file belongs, permissions, a read-only or full file system (local paths).
fn is_final_file_error(e: &object_store::Error) -> bool {
    use std::io::ErrorKind as K;
    let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                K::NotADirectory
                    | K::IsADirectory
                    | K::PermissionDenied
                    | K::ReadOnlyFilesystem
                    | K::StorageFull
                    | K::InvalidFilename
                    | K::InvalidInput
            );
        }
        cause = c.source();
    }
    false
}

/// The HTTP status of a failed response as `object_store` reports it in its message ("... status code: 405 Method
/// Not Allowed: ..."; its error type is not public). A client error other than a timeout or throttling is final:
/// a server that refuses a method (WebDAV's PROPFIND, say) refuses it again.
pub(crate) fn http_status(e: &object_store::Error) -> Option<u16> {
    let message = backend_message_raw(e);
    // Azure's bulk delete reports each object's refusal as "... (code: 403)".
    ["status code: ", "(code: "].iter().find_map(|marker| {
        let at = message.find(marker)? + marker.len();
        message.get(at..at + 3)?.parse().ok()
    })
}

/// Whether an error is the service saying the bucket (container) itself does not exist.
fn is_missing_bucket(e: &object_store::Error) -> bool {
    let message = backend_message_raw(e);
    ["NoSuchBucket", "ContainerNotFound", "The specified bucket does not exist"].iter().any(|m| message.contains(m))
}

/// Whether `e` says the server does not offer the operation at all (405 Method Not Allowed, 501 Not Implemented,
/// or `object_store`'s own "not supported" / "not implemented").
pub(crate) fn is_unsupported(e: &object_store::Error) -> bool {
    matches!(e, object_store::Error::NotSupported { .. } | object_store::Error::NotImplemented { .. })
        || matches!(http_status(e), Some(405 | 501))
}

/// The (transient) error for a body of `got` bytes where `expected` were announced: the transfer went wrong, and
/// another attempt may get the right bytes.
pub(crate) fn short_or_long_body(expected: u64, got: u64) -> object_store::Error {
    object_store::Error::Generic {
        store: "deltacells",
        source: format!("the response body held {got} bytes where {expected} were announced").into(),
    }
}

/// The [`StoreError`] for `e`, the last error of `attempts` attempts of `op` on `url`.
pub(crate) fn request_error(op: &'static str, url: String, e: object_store::Error, attempts: u32) -> StoreError {
    match e {
        // A missing bucket is a 404 on reads and on writes alike (S3's PUT says NoSuchBucket in its error page).
        e if is_missing_bucket(&e) => StoreError::Request {
            op,
            message: format!("its bucket (container) {} does not exist", bucket_of(&url)),
            url,
            transient: false,
            attempts,
        },
        // A write cannot miss its object: a 404 to a PUT is the bucket's (services that say no more than 404).
        object_store::Error::NotFound { .. }
            if op == "PUT" && ["s3://", "gs://", "az://", "abfs://", "abfss://"].iter().any(|s| url.starts_with(s)) =>
        {
            StoreError::Request {
                op,
                message: format!(
                    "its bucket (container) {} does not exist (the service answered 404)",
                    bucket_of(&url)
                ),
                url,
                transient: false,
                attempts,
            }
        }
        object_store::Error::NotFound { .. } => StoreError::NotFound { url },
        e => StoreError::Request { op, url, transient: is_transient(&e), message: backend_message(&e), attempts },
    }
}

/// The bucket (container) part of an object URL: `s3://b/x/y` gives `s3://b`.
fn bucket_of(url: &str) -> &str {
    let after = url.find("://").map_or(0, |i| i + 3);
    url[after..].find('/').map_or(url, |i| &url[..after + i])
}

/// The backend's message without `object_store`'s wrapping ("Generic X error: ..."), which names the store type
/// rather than the object.
fn backend_message(e: &object_store::Error) -> String {
    let message = backend_message_raw(e);
    if ["169.254.169.254", "metadata.google.internal", "169.254.170.2"].iter().any(|host| message.contains(host)) {
        // No credentials given, so the client asked the cloud's metadata server (an instance's credentials) for a
        // token, and there is none here.
        return format!(
            "{message}; no credentials could be found: give the store a key (GCS: a service-account JSON file, \
             option google_service_account or GOOGLE_APPLICATION_CREDENTIALS; S3: aws_access_key_id and \
             aws_secret_access_key or the AWS_* variables; Azure: azure_storage_account_key or a SAS token)"
        );
    }
    // A web server's error page is HTML: its markup says nothing the status does not.
    let lower = message.to_ascii_lowercase();
    match ["<html", "<!doctype", "<?xml version"].iter().filter_map(|m| lower.find(m)).min() {
        Some(at) if at > 0 => format!("{} (and an error page)", message[..at].trim_end_matches([' ', ':'])),
        _ => message,
    }
}

/// The backend's message for `e`: without the retry layer's wrapping ("Error performing PUT <url> in 102ms, after
/// 1 retries, max_retries: 1, retry_timeout: 30s - ", whose URL and attempts the [`StoreError`] says itself), and
/// with the innermost cause of its chain when the message leaves it out ("error sending request" says nothing of a
/// refused connection).
fn backend_message_raw(e: &object_store::Error) -> String {
    let (text, mut cause) = match e {
        object_store::Error::Generic { source, .. } => (source.to_string(), source.source()),
        other => (other.to_string(), std::error::Error::source(other)),
    };
    // Only a request's wrapping (a method, then its URL): "Error performing token request: ..." says what failed.
    let request = |rest: &str| rest.split_once(' ').is_some_and(|(m, _)| m.bytes().all(|b| b.is_ascii_uppercase()));
    let text = match text.strip_prefix("Error performing ").filter(|rest| request(rest)) {
        Some(rest) => rest.split_once(" - ").map_or_else(|| text.clone(), |(_, inner)| inner.to_string()),
        None => text,
    };
    let mut innermost = None;
    while let Some(c) = cause {
        innermost = Some(c.to_string());
        cause = c.source();
    }
    match innermost {
        Some(inner) if !inner.is_empty() && !text.contains(&inner) => format!("{text} ({inner})"),
        _ => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_system_errors_that_recur_are_final() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("afile"), b"x").unwrap();
        let store = crate::Store::from_url(dir.path().join("afile/ds").to_str().unwrap(), &Default::default()).unwrap();
        let got = crate::runtime::block_on(async move { store.put("manifest.json", "{}".into()).await }).unwrap();
        let e = got.unwrap_err();
        assert!(!e.is_transient(), "{e}");
        assert!(!e.to_string().contains("attempts") && !e.to_string().contains("network"), "{e}");
        let reset = Box::new(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        let io = object_store::Error::Generic { store: "LocalFileSystem", source: reset };
        assert!(is_transient(&io), "other failures are retried");
    }

    #[test]
    fn a_refused_method_is_final_and_its_error_page_left_out() {
        let page = "Server returned non-2xx status code: 405 Method Not Allowed: <html>\r\n<head><title>405 Not \
                    Allowed</title></head>\r\n<body><center><h1>405 Not Allowed</h1></center></body></html>";
        let e = object_store::Error::Generic { store: "HTTP", source: page.into() };
        assert_eq!(http_status(&e), Some(405));
        assert!(!is_transient(&e) && is_unsupported(&e));
        let text = request_error("LIST", "http://h/ds".into(), e, 1).to_string();
        assert!(text.contains("405 Method Not Allowed (and an error page)") && !text.contains("<html"), "{text}");
        for (status, transient) in [(500, true), (503, true), (429, true), (408, true), (400, false)] {
            let e = object_store::Error::Generic {
                store: "HTTP",
                source: format!("Server returned non-2xx status code: {status} Reason: body").into(),
            };
            assert_eq!(is_transient(&e), transient, "{status}");
        }
    }

    #[test]
    fn messages_name_the_object_and_say_the_cause_once() {
        let e = request_error(
            "GET",
            "s3://b/ds/tiles/tile_000001.dct".into(),
            object_store::Error::Generic { store: "S3", source: "connection reset by peer".into() },
            4,
        );
        assert!(e.is_transient());
        let text = e.to_string();
        assert_eq!(
            text,
            "GET s3://b/ds/tiles/tile_000001.dct failed after 4 attempts: connection reset by peer; check the \
             network and the service, or allow more retries"
        );
        assert_eq!(text.matches("connection reset").count(), 1);
        let missing = request_error(
            "GET",
            "gs://b/x".into(),
            object_store::Error::NotFound { path: "x".into(), source: "404".into() },
            1,
        );
        assert_eq!(missing, StoreError::NotFound { url: "gs://b/x".into() });
        assert!(missing.is_not_found() && !missing.is_transient());
        let denied = request_error(
            "PUT",
            "az://c/x".into(),
            object_store::Error::PermissionDenied { path: "x".into(), source: "403 Forbidden".into() },
            1,
        );
        assert!(!denied.is_transient());
        assert!(denied.to_string().contains("check the URL, the credentials"), "{denied}");
        assert_eq!(denied.url(), "az://c/x");
    }

    #[test]
    fn refusals_in_other_words_are_final_too() {
        // Azure's bulk delete, refused for lack of the delete permission.
        let bulk = "Bulk delete request failed for key ds/convert-plan.json: This request is not authorized to \
                    perform this operation using this permission. (code: 403)";
        let e = object_store::Error::Generic { store: "MicrosoftAzure", source: bulk.into() };
        assert_eq!(http_status(&e), Some(403));
        assert!(!is_transient(&e));
        // The HTTP client refusing to build a request (a plain http:// endpoint without allow_http).
        let built = "Error performing GET http://127.0.0.1:9/b/x in 0ms - HTTP error: builder error";
        assert!(!is_transient(&object_store::Error::Generic { store: "S3", source: built.into() }));
        let bucket = object_store::Error::NotFound {
            path: "x/convert-plan.json".into(),
            source: "Client error with status 404 Not Found: <Error><Code>NoSuchBucket</Code></Error>".into(),
        };
        let e = request_error("PUT", "s3://nosuch/x/convert-plan.json".into(), bucket, 1);
        assert!(!e.is_not_found() && !e.is_transient(), "{e:?}");
        assert_eq!(
            e.to_string(),
            "PUT s3://nosuch/x/convert-plan.json failed: its bucket (container) s3://nosuch does not exist; check \
             the URL, the credentials and the permissions"
        );
        // A bare 404 to a write (an emulator's) is the bucket's too; to a read, the object's.
        let bare = || object_store::Error::NotFound { path: "x/p".into(), source: "404 Not Found".into() };
        let e = request_error("PUT", "gs://nosuch/x/p".into(), bare(), 1);
        assert!(e.to_string().contains("its bucket (container) gs://nosuch does not exist"), "{e}");
        assert!(request_error("GET", "gs://nosuch/x/p".into(), bare(), 1).is_not_found());
    }

    /// An error the retry layer wraps is said without its wrapping, with its innermost cause.
    #[derive(Debug)]
    struct Wrapped(&'static str, std::io::Error);
    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }
    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.1)
        }
    }

    #[test]
    fn a_refused_connection_is_named_and_the_retry_layer_s_counts_left_out() {
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused (os error 111)");
        let wrapped = Wrapped(
            "Error performing PUT http://127.0.0.1:4543/upload in 102ms, after 1 retries, max_retries: 1, \
             retry_timeout: 30s - HTTP error: error sending request",
            refused,
        );
        let e = object_store::Error::Generic { store: "GCS", source: Box::new(wrapped) };
        let text = request_error("PUT", "gs://b/k/tiles/tile_000001.dct".into(), e, 4).to_string();
        assert!(
            text.contains("failed after 4 attempts: HTTP error: error sending request (Connection refused"),
            "{text}"
        );
        assert!(!text.contains("max_retries") && !text.contains("after 1 retries"), "{text}");
        // No credentials: the token request to the metadata server fails, and the message says what to give.
        let token = "Error performing token request: Error performing POST http://169.254.169.254/token in 2ms - \
                     Server returned non-2xx status code: 403 Forbidden";
        let e = object_store::Error::Generic { store: "GCS", source: token.into() };
        let text = request_error("GET", "gs://b/ds/manifest.json".into(), e, 1).to_string();
        assert!(text.contains("no credentials could be found") && text.contains("google_service_account"), "{text}");
    }
}
