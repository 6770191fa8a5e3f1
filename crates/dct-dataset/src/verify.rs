//! Full verification of a dataset: every tile, every side file, every obs shard; every problem reported.

use std::fmt;
use std::sync::Arc;

use futures::StreamExt;
use object_store::ObjectStoreExt;
use sha2::{Digest, Sha256};

use crate::error::{Category, DatasetError};
use crate::manifest::{GENE_ORDER_NAME, OBS_SCHEMA_NAME, VAR_NAMES_NAME, VAR_TABLE_NAME, obs_shard_path};
use crate::reader::{
    Core, Dataset, ReadOptions, gene_order_limit, parse_gene_order, parse_var_names, side_file_result,
};
use crate::rt::on_pool;
use crate::store::{GetError, Store};

/// Settings of [`verify`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyOptions {
    /// Tiles and shards checked at the same time (default 0 = twice the dataset's decode threads).
    pub parallel: usize,
    /// Check obs shards (size, SHA-256) and the obs fingerprint (default `true`).
    pub check_obs: bool,
    /// Check the side files `gene_order.npy`, `var_names.txt`, `var.parquet` (default `true`).
    pub check_side_files: bool,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        VerifyOptions { parallel: 0, check_obs: true, check_side_files: true }
    }
}

/// One problem found by [`verify`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// What kind of problem.
    pub category: Category,
    /// The tile concerned, if one is.
    pub tile: Option<usize>,
    /// What is wrong and where (file or object URL, field).
    pub message: String,
}

impl Problem {
    fn from_error(e: &DatasetError) -> Self {
        Problem { category: e.category(), tile: e.tile(), message: e.to_string() }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}", self.category, self.message)
    }
}

/// What [`verify`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Every problem, tiles first (in tile order), then side files, then obs.
    pub problems: Vec<Problem>,
    /// Tiles fetched and checked (including those found broken).
    pub tiles_checked: usize,
    /// Tile and obs shard bytes read.
    pub bytes_checked: u64,
}

impl VerifyReport {
    /// Whether no problem was found.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }

    /// Whether some problem has category `category`.
    pub fn has(&self, category: Category) -> bool {
        self.problems.iter().any(|p| p.category == category)
    }
}

enum Job {
    Tile(usize),
    Shard(usize),
}

struct JobResult {
    bytes: u64,
    problems: Vec<Problem>,
    shard_hash: Option<(usize, String)>,
}

/// Verifies `ds` completely: each tile's size and header against the manifest, its CRC and a full decode (tiles
/// in parallel); `gene_order.npy` (a permutation of `0..n_genes`), `var_names.txt` (one name per gene) and
/// `var.parquet` (present) when the manifest says they exist; each obs shard's size and SHA-256 and the obs
/// fingerprint (recomputed from `obs/schema.json`, `tile_cells` and the shards' actual hashes).
///
/// `progress(done, total)` is called on the calling thread after each tile and obs shard (`total` = tiles +
/// shards). Tiles are fetched afresh (the cache is neither used nor filled) and decoded with CRC checks
/// whatever [`ReadOptions::verify_crc`] says.
pub fn verify(ds: &Dataset, options: &VerifyOptions, mut progress: impl FnMut(u64, u64)) -> VerifyReport {
    let core = ds.core().clone();
    let m = &core.manifest;
    let n_shards = if options.check_obs { m.n_obs_shards() as usize } else { 0 };
    let total = (m.n_tiles() + n_shards) as u64;
    let parallel = if options.parallel == 0 { 2 * core.decode_threads } else { options.parallel };
    let handle = ds.rt().handle().clone();
    let jobs = (0..m.n_tiles()).map(Job::Tile).chain((0..n_shards).map(Job::Shard));
    let spawner = core.clone();
    let mut results = futures::stream::iter(jobs)
        .map(move |job| {
            let core = spawner.clone();
            handle.spawn(async move {
                match job {
                    Job::Tile(t) => check_tile(core, t).await,
                    Job::Shard(s) => check_shard(core, s).await,
                }
            })
        })
        .buffer_unordered(parallel.max(1));
    let mut report = VerifyReport::default();
    let mut shard_hashes: Vec<Option<String>> = vec![None; n_shards];
    let mut done = 0u64;
    progress(0, total);
    futures::executor::block_on(async {
        while let Some(r) = results.next().await {
            let r = r.unwrap_or_else(|e| JobResult {
                bytes: 0,
                problems: vec![Problem {
                    category: Category::Io,
                    tile: None,
                    message: format!("a verification task failed: {e}"),
                }],
                shard_hash: None,
            });
            report.bytes_checked += r.bytes;
            report.problems.extend(r.problems);
            if let Some((s, h)) = r.shard_hash {
                shard_hashes[s] = Some(h);
            }
            done += 1;
            progress(done, total);
        }
    });
    report.tiles_checked = m.n_tiles();
    report.problems.sort_by_key(|p| (p.tile.is_none(), p.tile));
    let rt = ds.rt();
    if options.check_side_files {
        let c = core.clone();
        report.problems.extend(rt.block_on(async move { check_side_files(&c).await }));
    }
    if options.check_obs && m.has_obs {
        let c = core.clone();
        report.problems.extend(rt.block_on(async move { check_fingerprint(&c, shard_hashes).await }));
    }
    report
}

/// Opens `url` and [verifies](verify) it; a dataset that cannot be opened (missing or invalid manifest)
/// gives a report with that one problem.
pub fn verify_url(
    url: &str,
    read_options: ReadOptions,
    options: &VerifyOptions,
    progress: impl FnMut(u64, u64),
) -> VerifyReport {
    match Dataset::open(url, read_options) {
        Ok(ds) => verify(&ds, options, progress),
        Err(e) => VerifyReport { problems: vec![Problem::from_error(&e)], ..VerifyReport::default() },
    }
}

impl Dataset {
    /// [Verifies](verify) this dataset.
    pub fn verify(&self, options: &VerifyOptions, progress: impl FnMut(u64, u64)) -> VerifyReport {
        verify(self, options, progress)
    }
}

async fn check_tile(core: Arc<Core>, t: usize) -> JobResult {
    let mut out = JobResult { bytes: 0, problems: Vec::new(), shard_hash: None };
    let blob = match core.fetch_checked_size(t).await {
        Ok(b) => b,
        Err(e) => {
            out.problems.push(Problem::from_error(&e));
            return out;
        }
    };
    out.bytes = blob.len() as u64;
    if let Err(e) = core.check_header(t, &blob) {
        out.problems.push(Problem::from_error(&e));
    }
    let c = core.clone();
    let decoded = on_pool(&core.pool, move || c.decode_blob(t, &blob, true).map(|_| ())).await;
    match decoded {
        Ok(Ok(())) => {}
        Ok(Err(e)) => out.problems.push(Problem::from_error(&e)),
        Err(m) => out.problems.push(Problem { category: Category::TileDecode, tile: Some(t), message: m }),
    }
    out
}

async fn check_shard(core: Arc<Core>, s: usize) -> JobResult {
    let mut out = JobResult { bytes: 0, problems: Vec::new(), shard_hash: None };
    let m = &core.manifest;
    let rel = obs_shard_path(s);
    let url = core.store.url(&rel);
    let expected = m.obs_shard_bytes[s];
    let problem = |category, message: String| Problem { category, tile: None, message: format!("{url}: {message}") };
    match sha256_of(&core.store, &rel, expected).await {
        Err(GetError::NotFound) => out.problems.push(problem(Category::ObsShard, "the obs shard is missing".into())),
        Err(GetError::Store(e)) => out.problems.push(Problem::from_error(&core.store.store_error("GET", &rel, e))),
        Err(GetError::TooLarge(size)) => out.problems.push(problem(
            Category::ObsShard,
            format!("the obs shard is {size} bytes but obs_shard_bytes[{s}] is {expected}"),
        )),
        Ok(hash) => {
            out.bytes = expected;
            if !hash.eq_ignore_ascii_case(&m.obs_shard_sha256[s]) {
                out.problems.push(problem(
                    Category::ObsSha256,
                    format!(
                        "SHA-256 is {hash} but obs_shard_sha256[{s}] is {}: the shard or the manifest was changed",
                        m.obs_shard_sha256[s]
                    ),
                ));
            }
            out.shard_hash = Some((s, hash));
        }
    }
    out
}

/// SHA-256 (lowercase hex) of an object that must be `expected` bytes, streamed (never held whole in memory).
/// `TooLarge(size)` reports a size other than `expected`.
async fn sha256_of(store: &Store, rel: &str, expected: u64) -> Result<String, GetError> {
    let result = match store.object_store().get(&store.path(rel)).await {
        Ok(r) => r,
        Err(object_store::Error::NotFound { .. }) => return Err(GetError::NotFound),
        Err(e) => return Err(GetError::Store(e)),
    };
    if result.meta.size != expected {
        return Err(GetError::TooLarge(result.meta.size));
    }
    let mut stream = result.into_stream();
    let mut hasher = Sha256::new();
    let mut seen = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(GetError::Store)?;
        seen += chunk.len() as u64;
        if seen > expected {
            return Err(GetError::TooLarge(seen));
        }
        hasher.update(&chunk);
    }
    if seen != expected {
        return Err(GetError::TooLarge(seen));
    }
    Ok(hex(hasher.finalize().as_slice()))
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(2 * bytes.len());
    for &b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

async fn check_side_files(core: &Core) -> Vec<Problem> {
    let m = &core.manifest;
    let store = &core.store;
    let mut problems = Vec::new();
    let mut side = |result: Result<(), DatasetError>| {
        if let Err(e) = result {
            problems.push(Problem::from_error(&e));
        }
    };
    if m.has_gene_order {
        let limit = gene_order_limit(m.n_genes);
        let got = side_file_result(store, GENE_ORDER_NAME, limit, store.get_limited(GENE_ORDER_NAME, limit).await);
        side(got.and_then(|b| {
            parse_gene_order(&b, m.n_genes)
                .map(|_| ())
                .map_err(|message| DatasetError::SideFile { url: store.url(GENE_ORDER_NAME), message })
        }));
    }
    if m.has_var_names {
        let limit = core.max_side_file_bytes;
        let got = side_file_result(store, VAR_NAMES_NAME, limit, store.get_limited(VAR_NAMES_NAME, limit).await);
        side(got.and_then(|b| {
            parse_var_names(&b, m.n_genes)
                .map(|_| ())
                .map_err(|message| DatasetError::SideFile { url: store.url(VAR_NAMES_NAME), message })
        }));
    }
    if m.has_var_table {
        let r = match store.object_store().head(&store.path(VAR_TABLE_NAME)).await {
            Ok(_) => Ok(()),
            Err(object_store::Error::NotFound { .. }) => {
                side_file_result(store, VAR_TABLE_NAME, 0, Err(GetError::NotFound)).map(|_| ())
            }
            Err(e) => Err(store.store_error("HEAD", VAR_TABLE_NAME, e)),
        };
        side(r);
    }
    problems
}

/// Largest `obs/schema.json` read (16 MiB; a schema with 20,000 categories per column is well below).
const MAX_SCHEMA_BYTES: u64 = 16 << 20;

async fn check_fingerprint(core: &Core, shard_hashes: Vec<Option<String>>) -> Vec<Problem> {
    let m = &core.manifest;
    let store = &core.store;
    let url = store.url(OBS_SCHEMA_NAME);
    let schema = match store.get_limited(OBS_SCHEMA_NAME, MAX_SCHEMA_BYTES).await {
        Ok(b) => b,
        Err(GetError::NotFound) => {
            return vec![Problem {
                category: Category::ObsShard,
                tile: None,
                message: format!("{url}: has_obs is true but the obs schema is missing"),
            }];
        }
        Err(GetError::TooLarge(n)) => {
            return vec![Problem {
                category: Category::ObsShard,
                tile: None,
                message: format!("{url}: the obs schema is {n} bytes, more than {MAX_SCHEMA_BYTES} accepted"),
            }];
        }
        Err(GetError::Store(e)) => return vec![Problem::from_error(&store.store_error("GET", OBS_SCHEMA_NAME, e))],
    };
    let Ok(schema) = std::str::from_utf8(&schema) else {
        return vec![Problem {
            category: Category::ObsShard,
            tile: None,
            message: format!("{url}: the obs schema is not UTF-8 text"),
        }];
    };
    // Shards that could not be hashed were reported already; the fingerprint needs all of them.
    let Some(hashes) = shard_hashes.into_iter().collect::<Option<Vec<String>>>() else {
        return Vec::new();
    };
    let fingerprint = obs_fingerprint(schema, &m.tile_cells, &hashes);
    if fingerprint.eq_ignore_ascii_case(&m.obs_fingerprint) {
        return Vec::new();
    }
    vec![Problem {
        category: Category::ObsSha256,
        tile: None,
        message: format!(
            "{}: obs_fingerprint is {} but the schema, tile_cells and shards give {fingerprint}: the obs content \
             changed after the manifest was written",
            store.url("manifest.json"),
            m.obs_fingerprint
        ),
    }]
}

/// The obs fingerprint (FORMAT-v2.md, "Obs"): the first 24 hex characters of the SHA-256 of
/// `{"schema": <schema.json text>, "shards": [<sha256 of each shard>], "tile_cells": [...]}` serialized as
/// Python's `json.dumps(..., sort_keys=True)` does (separators `", "` and `": "`, non-ASCII escaped as `\uXXXX`).
pub fn obs_fingerprint(schema_text: &str, tile_cells: &[u64], shard_sha256: &[String]) -> String {
    let mut s = String::from("{\"schema\": ");
    push_py_json_string(&mut s, schema_text);
    s.push_str(", \"shards\": [");
    for (i, h) in shard_sha256.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        push_py_json_string(&mut s, h);
    }
    s.push_str("], \"tile_cells\": [");
    for (i, c) in tile_cells.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        s.push_str(&c.to_string());
    }
    s.push_str("]}");
    let mut h = hex(Sha256::digest(s.as_bytes()).as_slice());
    h.truncate(24);
    h
}

/// Appends `text` as a JSON string the way Python's `json.dumps` (with `ensure_ascii=True`) writes it.
fn push_py_json_string(out: &mut String, text: &str) {
    out.push('"');
    for ch in text.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (c as u32) > 0x7e && (c as u32) != 0x7f => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_json_strings() {
        let mut s = String::new();
        push_py_json_string(&mut s, "a\"b\\c\nd\te\u{1}f\u{7f}g\u{e9}h\u{1F600}");
        assert_eq!(s, r#""a\"b\\c\nd\te\u0001f"#.to_string() + "\u{7f}" + r#"g\u00e9h\ud83d\ude00""#);
    }

    #[test]
    fn hex_encoding() {
        assert_eq!(hex(&[0x00, 0xab, 0x10, 0xff]), "00ab10ff");
        assert_eq!(
            hex(Sha256::digest(b"abc").as_slice()),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
