//! Cloud backends, each behind its cargo feature, configured from the environment, the URL and the caller's
//! options (in that order).

use std::sync::Arc;

use object_store::ObjectStore;
use object_store::path::Path;

#[allow(unused_imports)]
use object_store::ObjectStoreScheme;

/// The retries of `object_store`'s HTTP client, under this crate's own ([`crate::RetryPolicy`], 3 by default): one,
/// within 30 s of the first attempt. Its default (10 within 3 minutes) multiplied by ours kept a read of an object
/// whose server stopped answering going for 12 minutes in 44 requests; now it is at most 4 x 2 attempts.
#[cfg(any(feature = "aws", feature = "gcp", feature = "azure", feature = "http"))]
fn client_retries() -> object_store::RetryConfig {
    object_store::RetryConfig {
        max_retries: 1,
        retry_timeout: std::time::Duration::from_secs(30),
        ..object_store::RetryConfig::default()
    }
}

/// An option this backend does not know: left out if another backend knows it (the options of a corpus, or of a
/// command, reach members on every store: `aws_endpoint` is for the S3 members, not an HTTP one), refused
/// otherwise (a misspelling).
#[allow(dead_code)]
fn skip_other_backends_option(key: &str, backend: &str) -> Result<(), String> {
    #[cfg(feature = "aws")]
    let aws = key.parse::<object_store::aws::AmazonS3ConfigKey>().is_ok();
    #[cfg(not(feature = "aws"))]
    let aws = false;
    #[cfg(feature = "gcp")]
    let gcp = key.parse::<object_store::gcp::GoogleConfigKey>().is_ok();
    #[cfg(not(feature = "gcp"))]
    let gcp = false;
    #[cfg(feature = "azure")]
    let azure = key.parse::<object_store::azure::AzureConfigKey>().is_ok();
    #[cfg(not(feature = "azure"))]
    let azure = false;
    let known = aws || gcp || azure;
    if known { Ok(()) } else { Err(format!("unknown {backend} option {key:?}")) }
}

// With no cloud feature every arm returns early, hence the allows.
#[allow(unreachable_code, unused_variables)]
pub(crate) fn open(url: &url::Url, config: &[(String, String)]) -> Result<(Arc<dyn ObjectStore>, Path), String> {
    if url.query().is_some() || url.fragment().is_some() {
        // Objects are requested by their paths under the URL's: a query (a signature, a version) would not go
        // with them.
        return Err("the URL has a query or fragment (?... or #...), which the requests for the dataset's objects \
                    would not carry: give the dataset's location without it (credentials go in store options)"
            .into());
    }
    if url.path().contains("//") {
        return Err("its path has an empty segment (//): remove the extra slash".into());
    }
    let (scheme, path) = ObjectStoreScheme::parse(url).map_err(|e| {
        format!(
            "{e}: use a local path, file://, s3://, gs://, az:// (or abfs://), http:// or https:// \
             (memory:// is not a dataset location)"
        )
    })?;
    let store: Arc<dyn ObjectStore> = match scheme {
        #[cfg(feature = "aws")]
        ObjectStoreScheme::AmazonS3 => {
            use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
            let mut b = AmazonS3Builder::from_env().with_url(url.as_str());
            let mut http_said = std::env::var_os("AWS_ALLOW_HTTP").is_some();
            for (k, v) in config {
                let Ok(key) = k.parse::<AmazonS3ConfigKey>() else {
                    skip_other_backends_option(k, "S3")?;
                    continue;
                };
                http_said |= key == AmazonS3ConfigKey::Client(object_store::ClientConfigKey::AllowHttp);
                b = b.with_config(key, v.clone());
            }
            // An endpoint given as http:// (MinIO, a local server) is plain HTTP by the caller's own choice: allowed,
            // unless allow_http is set either way. Otherwise every request would fail with the client's "builder
            // error", which says nothing of the cause.
            // (The S3-only endpoint variable counts too: object_store may take it over the others.)
            let plain = |e: &str| e.starts_with("http://");
            let endpoint = b.get_config_value(&AmazonS3ConfigKey::Endpoint);
            if !http_said
                && (endpoint.is_some_and(|e| plain(&e))
                    || std::env::var("AWS_ENDPOINT_URL_S3").is_ok_and(|e| plain(&e)))
            {
                b = b.with_allow_http(true);
            }
            Arc::new(b.with_retry(client_retries()).build().map_err(|e| format!("S3 configuration: {e}"))?)
        }
        #[cfg(feature = "gcp")]
        ObjectStoreScheme::GoogleCloudStorage => {
            use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
            let mut b = GoogleCloudStorageBuilder::from_env().with_url(url.as_str());
            for (k, v) in config {
                let Ok(key) = k.parse::<GoogleConfigKey>() else {
                    skip_other_backends_option(k, "GCS")?;
                    continue;
                };
                b = b.with_config(key, v.clone());
            }
            let key = b.get_config_value(&GoogleConfigKey::ServiceAccount);
            Arc::new(b.with_retry(client_retries()).build().map_err(|e| {
                match key {
                    // A key file that is not a service account's JSON key (no private key, say) fails the build.
                    Some(path)
                        if ["credential", "service account", "pem", "private"]
                            .iter()
                            .any(|w| e.to_string().to_ascii_lowercase().contains(w)) =>
                    {
                        format!(
                            "GCS configuration: {e}; the service-account key {path:?} (google_service_account or \
                     GOOGLE_SERVICE_ACCOUNT) must be a service account's JSON key file with its private_key"
                        )
                    }
                    _ => format!("GCS configuration: {e}"),
                }
            })?)
        }
        #[cfg(feature = "azure")]
        ObjectStoreScheme::MicrosoftAzure => {
            use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
            let mut b = MicrosoftAzureBuilder::from_env().with_url(url.as_str());
            for (k, v) in config {
                let Ok(key) = k.parse::<AzureConfigKey>() else {
                    skip_other_backends_option(k, "Azure")?;
                    continue;
                };
                b = b.with_config(key, v.clone());
            }
            Arc::new(b.with_retry(client_retries()).build().map_err(|e| format!("Azure configuration: {e}"))?)
        }
        #[cfg(feature = "http")]
        ObjectStoreScheme::Http => {
            use object_store::ClientConfigKey;
            use object_store::http::HttpBuilder;
            let base = &url[..url::Position::BeforePath];
            let mut b = HttpBuilder::new().with_url(base);
            if url.scheme() == "http" {
                b = b.with_config(ClientConfigKey::AllowHttp, "true");
            }
            for (k, v) in config {
                let Ok(key) = k.parse::<ClientConfigKey>() else {
                    skip_other_backends_option(k, "HTTP client")?;
                    continue;
                };
                b = b.with_config(key, v.clone());
            }
            Arc::new(b.with_retry(client_retries()).build().map_err(|e| format!("HTTP configuration: {e}"))?)
        }
        ObjectStoreScheme::Local | ObjectStoreScheme::Memory => {
            return Err("not a dataset location (use a local path or file:// URL)".into());
        }
        #[allow(unreachable_patterns)]
        other => {
            let feature = match other {
                ObjectStoreScheme::AmazonS3 => "aws",
                ObjectStoreScheme::GoogleCloudStorage => "gcp",
                ObjectStoreScheme::MicrosoftAzure => "azure",
                _ => "http",
            };
            return Err(format!(
                "this build has no {other:?} backend: enable the `{feature}` feature of dct-store \
                 (the deltacells CLI enables every backend)"
            ));
        }
    };
    Ok((store, path))
}
