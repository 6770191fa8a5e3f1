//! Verifying a dataset's obs against its manifest: every problem, not only the first.

use std::fmt;
use std::sync::Arc;

use dct_store::{Store, StoreError};
use futures::StreamExt;

use crate::error::ObsError;
use crate::fingerprint::{obs_fingerprint, sha256_hex};
use crate::manifest::{ObsManifest, shard_name};
use crate::reader::read_schema;
use crate::schema::ObsSchema;
use crate::shard::{MAX_FOOTER_BYTES, check_layout, decode_metadata, has_leading_magic, metadata_length};

/// What kind of problem was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ObsProblemKind {
    /// The manifest's obs fields are inconsistent.
    Manifest,
    /// `obs/schema.json` is missing or invalid.
    Schema,
    /// A shard is missing.
    ShardMissing,
    /// A shard's size differs from `obs_shard_bytes`.
    ShardSize,
    /// A shard's SHA-256 differs from `obs_shard_sha256`.
    ShardSha256,
    /// A shard is not a valid parquet file or its layout (row groups, rows, columns, types) disagrees with the
    /// manifest or the schema.
    ShardLayout,
    /// The recomputed fingerprint differs from `obs_fingerprint`.
    Fingerprint,
    /// A request failed.
    Io,
}

/// One problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObsProblem {
    /// Its kind.
    pub kind: ObsProblemKind,
    /// The shard concerned, if any.
    pub shard: Option<usize>,
    /// The tile concerned, if any.
    pub tile: Option<usize>,
    /// The column concerned, if any.
    pub column: Option<String>,
    /// What is wrong (names the file).
    pub message: String,
}

impl fmt::Display for ObsProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.message)?;
        if let Some(t) = self.tile {
            write!(f, " (tile {t})")?;
        }
        if let Some(c) = &self.column {
            write!(f, " (column {c:?})")?;
        }
        Ok(())
    }
}

fn problem(kind: ObsProblemKind, shard: Option<usize>, message: String) -> ObsProblem {
    ObsProblem { kind, shard, tile: None, column: None, message }
}

/// The result of [`verify_obs`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObsVerifyReport {
    /// Every problem found (empty when the obs is intact).
    pub problems: Vec<ObsProblem>,
    /// Shard bytes read.
    pub bytes_checked: u64,
    /// The SHA-256 of each shard that could be read.
    pub shard_sha256: Vec<Option<String>>,
}

impl ObsVerifyReport {
    /// Whether no problem was found.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Checks one whole shard (`bytes`, shard `s`, named `url`): size and SHA-256 against the manifest, then, if a schema
/// is given, its layout (one row group per tile with `tile_cells[t]` rows; the schema's columns in order with the
/// named types; column chunks inside the file). Returns the problems and the shard's SHA-256.
pub fn check_shard_bytes(
    s: usize,
    bytes: &[u8],
    url: &str,
    manifest: &ObsManifest,
    schema: Option<&ObsSchema>,
) -> (Vec<ObsProblem>, String) {
    let mut problems = Vec::new();
    let sha = sha256_hex(bytes);
    let size = bytes.len() as u64;
    if let Some(&expected) = manifest.fields.shard_bytes.get(s)
        && size != expected
    {
        problems.push(problem(
            ObsProblemKind::ShardSize,
            Some(s),
            format!("{url} is {size} bytes but obs_shard_bytes[{s}] is {expected}"),
        ));
    }
    if let Some(expected) = manifest.fields.shard_sha256.get(s)
        && !sha.eq_ignore_ascii_case(expected)
    {
        problems.push(problem(
            ObsProblemKind::ShardSha256,
            Some(s),
            format!("{url} has SHA-256 {sha} but obs_shard_sha256[{s}] is {expected}"),
        ));
    }
    let Some(schema) = schema else { return (problems, sha) };
    match check_shard_tail(s, bytes, bytes, size, url, manifest, schema) {
        Ok(found) => problems.extend(found),
        // The whole file holds its footer, so this cannot happen; report it rather than trust that.
        Err(needed) => problems.push(problem(
            ObsProblemKind::ShardLayout,
            Some(s),
            format!("{url}: the footer needs {needed} bytes but the file has {size}"),
        )),
    }
    (problems, sha)
}

/// Checks the layout of shard `s` (named `url`, `size` bytes long) from its first bytes `head` (at least 4) and its
/// last bytes `tail` (which must end at the end of the file): the parquet magic, the footer, one row group per tile
/// with `tile_cells[t]` rows, the schema's columns in order with the named Arrow types, and column chunks inside the
/// file. Lets a caller that streams a shard (to hash it) keep only its ends.
///
/// Returns the problems found, or `Err(n)` when `tail` is shorter than the `n` bytes the footer occupies: fetch the
/// last `n` bytes and call again. `n` is at most [`MAX_FOOTER_BYTES`](crate::MAX_FOOTER_BYTES) + 8; a longer footer is
/// reported as a problem instead.
pub fn check_shard_tail(
    s: usize,
    head: &[u8],
    tail: &[u8],
    size: u64,
    url: &str,
    manifest: &ObsManifest,
    schema: &ObsSchema,
) -> Result<Vec<ObsProblem>, u64> {
    let layout = |m: String| problem(ObsProblemKind::ShardLayout, Some(s), format!("{url}: {m}"));
    if !has_leading_magic(head) {
        return Ok(vec![layout("no parquet magic at the start".into())]);
    }
    let len = match metadata_length(tail, size) {
        Ok(l) => l,
        Err(m) => return Ok(vec![layout(m)]),
    };
    if len > MAX_FOOTER_BYTES {
        return Ok(vec![layout(format!("its footer claims {len} bytes, more than the {MAX_FOOTER_BYTES} accepted"))]);
    }
    let needed = len + 8;
    if needed > tail.len() as u64 {
        return Err(needed);
    }
    let end = tail.len() - 8;
    let md = match decode_metadata(&tail[end - len as usize..end]) {
        Ok(md) => Arc::new(md),
        Err(e) => return Ok(vec![layout(format!("invalid parquet metadata: {e}"))]),
    };
    let tiles = manifest.shard_tiles(s);
    let (found, _) = check_layout(&md, size, tiles, &manifest.tile_cells, schema);
    Ok(found
        .into_iter()
        .map(|(tile, column, message)| ObsProblem {
            kind: ObsProblemKind::ShardLayout,
            shard: Some(s),
            tile,
            column,
            message: format!("{url}: {message}"),
        })
        .collect())
}

/// Recomputes the fingerprint from the schema text, `tile_cells` and the shards' actual SHA-256 and compares it with
/// the manifest's.
pub fn check_fingerprint(schema_text: &str, manifest: &ObsManifest, shard_sha256: &[String]) -> Option<ObsProblem> {
    let fp = obs_fingerprint(schema_text, &manifest.tile_cells, shard_sha256);
    if fp.eq_ignore_ascii_case(&manifest.fields.fingerprint) {
        return None;
    }
    Some(problem(
        ObsProblemKind::Fingerprint,
        None,
        format!(
            "obs_fingerprint is {} but obs/schema.json, tile_cells and the shards give {fp}: the obs changed after \
             the manifest was written",
            manifest.fields.fingerprint
        ),
    ))
}

/// Verifies the obs of the dataset at `store`: the manifest fields, `obs/schema.json`, every shard (size, SHA-256,
/// layout; `concurrency` shards at a time) and the fingerprint. Every problem is reported.
pub async fn verify_obs(store: &Store, manifest: &ObsManifest, concurrency: usize) -> ObsVerifyReport {
    let mut report = ObsVerifyReport::default();
    let mut m = manifest.clone();
    if let Err(e) = m.validate() {
        report.problems.push(problem(ObsProblemKind::Manifest, None, e.to_string()));
        // Check what can be checked with the shard count the manifest implies.
        if m.fields.tiles_per_file == 0 {
            return report;
        }
    }
    let schema = match read_schema(store).await {
        Ok(s) => Some(s),
        Err(e) => {
            let kind = if matches!(e, ObsError::Store { .. }) { ObsProblemKind::Io } else { ObsProblemKind::Schema };
            let msg = match e {
                ObsError::NotFound { url } => format!("{url}: the obs schema is missing"),
                e => e.to_string(),
            };
            report.problems.push(problem(kind, None, msg));
            None
        }
    };
    let n = m.n_shards();
    let schema_ref = schema.as_ref().map(|(s, _)| s);
    let mut results = futures::stream::iter(0..n)
        .map(|s| {
            let m = &m;
            async move {
                let rel = shard_name(s);
                let url = store.url(&rel);
                let expected = m.fields.shard_bytes.get(s).copied().unwrap_or(0);
                let bytes = match store.get_exact(&rel, expected).await {
                    Ok(b) => b,
                    Err(StoreError::NotFound { .. }) => {
                        let p = problem(ObsProblemKind::ShardMissing, Some(s), format!("{url} is missing"));
                        return (s, vec![p], None, 0);
                    }
                    Err(StoreError::WrongSize { size, .. }) => {
                        let msg = format!("{url} is {size} bytes but obs_shard_bytes[{s}] is {expected}");
                        return (s, vec![problem(ObsProblemKind::ShardSize, Some(s), msg)], None, 0);
                    }
                    Err(e) => return (s, vec![problem(ObsProblemKind::Io, Some(s), e.to_string())], None, 0),
                };
                let (problems, sha) = check_shard_bytes(s, &bytes, &url, m, schema_ref);
                (s, problems, Some(sha), bytes.len() as u64)
            }
        })
        .buffered(concurrency.max(1));
    report.shard_sha256 = vec![None; n];
    while let Some((s, problems, sha, nbytes)) = results.next().await {
        report.problems.extend(problems);
        report.shard_sha256[s] = sha;
        report.bytes_checked += nbytes;
    }
    drop(results);
    if let Some((_, text)) = &schema
        && let Some(hashes) = report.shard_sha256.iter().cloned().collect::<Option<Vec<String>>>()
    {
        report.problems.extend(check_fingerprint(text, &m, &hashes));
    }
    report
}

/// [`verify_obs`] from synchronous code.
pub fn verify_obs_blocking(store: &Store, manifest: &ObsManifest, concurrency: usize) -> ObsVerifyReport {
    let (store, manifest) = (store.clone(), manifest.clone());
    dct_store::runtime::block_on(async move { verify_obs(&store, &manifest, concurrency).await }).unwrap_or_else(|e| {
        ObsVerifyReport { problems: vec![problem(ObsProblemKind::Io, None, e.to_string())], ..Default::default() }
    })
}
