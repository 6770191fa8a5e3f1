//! Full verification of a dataset: every tile, every side file, every obs shard; every problem reported.

use std::fmt;
use std::sync::Arc;

use futures::StreamExt;
use sha2::{Digest, Sha256};

use crate::error::{Category, DatasetError};
use crate::manifest::{APPEND_JOURNAL_NAME, GENE_ORDER_NAME, VAR_NAMES_NAME, VAR_TABLE_NAME, obs_shard_path};
use crate::reader::{Core, Dataset, ReadOptions};
use crate::rt::on_pool;
use crate::side_files::{checked_side_file, gene_order_limit, parse_gene_order, parse_var_names};
use dct_store::{Store, StoreError};

/// Settings of [`verify`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyOptions {
    /// Tiles and shards checked at the same time (default 0 = twice the dataset's decode threads).
    pub parallel: usize,
    /// Check the obs (default `true`): each shard's size and SHA-256 and, with the `obs` feature, `obs/schema.json`,
    /// each shard's layout against the manifest and the schema, and the obs fingerprint.
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

    /// A wait for the store that failed (the caller asked to stop): the verification is incomplete.
    fn from_store(e: StoreError) -> Self {
        Problem::from_error(&DatasetError::from(e))
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
/// `var.parquet` (with the `obs` feature: decoded, one row per gene; else present) when the manifest says they
/// exist; and the obs when it has some: each shard's size and SHA-256 (streamed, never held whole) and, with the
/// `obs` feature (on by default), `obs/schema.json`, each shard's layout (parquet footer: one row group per tile
/// with `tile_cells[t]` rows, the schema's columns in order with their Arrow types, column chunks inside the file)
/// and the obs fingerprint (recomputed from the schema text, `tile_cells` and the shards' actual hashes), all
/// through `dct-obs`.
///
/// `progress(done, total)` is called on the calling thread after each tile and obs shard (`total` = tiles +
/// shards). Tiles are fetched afresh (the cache is neither used nor filled) and decoded with CRC checks
/// whatever [`ReadOptions::verify_crc`] says.
pub fn verify(ds: &Dataset, options: &VerifyOptions, mut progress: impl FnMut(u64, u64)) -> VerifyReport {
    let core = ds.core().clone();
    let m = &core.manifest;
    let check_obs = options.check_obs && m.has_obs;
    let n_shards = if check_obs { m.n_obs_shards() as usize } else { 0 };
    let total = (m.n_tiles() + n_shards) as u64;
    let parallel = if options.parallel == 0 { 2 * core.decode_threads } else { options.parallel };
    let rt = ds.rt();
    let mut report = VerifyReport::default();
    // The obs schema first: shard layouts are checked against it.
    let obs = if check_obs {
        let c = core.clone();
        let (schema, problems) = rt
            .block_on(async move { obs::read_schema(&c).await })
            .unwrap_or_else(|e| (None, vec![Problem::from_store(e)]));
        report.problems.extend(problems);
        schema
    } else {
        None
    };
    let handle = rt.handle().clone();
    let jobs = (0..m.n_tiles()).map(Job::Tile).chain((0..n_shards).map(Job::Shard));
    let spawner = core.clone();
    let shard_schema = obs.clone();
    let mut results = futures::stream::iter(jobs)
        .map(move |job| {
            let core = spawner.clone();
            let schema = shard_schema.clone();
            handle.spawn(async move {
                match job {
                    Job::Tile(t) => check_tile(core, t).await,
                    Job::Shard(s) => check_shard(core, s, schema).await,
                }
            })
        })
        .buffer_unordered(parallel.max(1));
    let mut shard_hashes: Vec<Option<String>> = vec![None; n_shards];
    let mut found = Vec::new();
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
            found.extend(r.problems);
            if let Some((s, h)) = r.shard_hash {
                shard_hashes[s] = Some(h);
            }
            done += 1;
            progress(done, total);
        }
    });
    report.tiles_checked = m.n_tiles();
    // Tiles first, in tile order; then the obs shards in the order they finished.
    found.sort_by_key(|p| (p.tile.is_none(), p.tile));
    let schema_problems = std::mem::replace(&mut report.problems, found);
    if options.check_side_files {
        let c = core.clone();
        report.problems.extend(
            rt.block_on(async move { check_side_files(&c).await }).unwrap_or_else(|e| vec![Problem::from_store(e)]),
        );
    }
    report.problems.extend(schema_problems);
    if check_obs {
        report.problems.extend(obs::check_fingerprint(&core, obs.as_deref(), shard_hashes));
    }
    if !report.problems.is_empty() {
        // An append rewrites the last tile and obs shard before its manifest: one that stopped there (or is
        // running) explains such problems, and running it again completes the dataset.
        let c = core.clone();
        if let Ok(Ok(true)) = rt.block_on(async move { c.store.exists(APPEND_JOURNAL_NAME).await }) {
            report.problems.push(Problem {
                category: Category::DatasetChanged,
                tile: None,
                message: format!(
                    "an append is under way, or stopped before its manifest ({}): the problems above may be the \
                     tiles it rewrote rather than damage; if no append is running, run the same append again to \
                     complete it before re-creating anything",
                    core.store.url(APPEND_JOURNAL_NAME)
                ),
            });
        }
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

async fn check_shard(core: Arc<Core>, s: usize, schema: Option<obs::Schema>) -> JobResult {
    let mut out = JobResult { bytes: 0, problems: Vec::new(), shard_hash: None };
    let m = &core.manifest;
    let rel = obs_shard_path(s);
    let url = core.store.url(&rel);
    let expected = m.obs.shard_bytes[s];
    let problem = |category, message: String| Problem { category, tile: None, message: format!("{url}: {message}") };
    match stream_shard(&core.store, &rel, expected, SHARD_TAIL_KEEP).await {
        Err(StoreError::NotFound { .. }) => {
            out.problems.push(problem(Category::ObsShard, "the obs shard is missing".into()))
        }
        Err(StoreError::TooLarge { size, .. } | StoreError::WrongSize { size, .. }) => out.problems.push(problem(
            Category::ObsShard,
            format!("the obs shard is {size} bytes but obs_shard_bytes[{s}] is {expected}"),
        )),
        Err(e) => out.problems.push(Problem::from_error(&e.into())),
        Ok(shard) => {
            out.bytes = expected;
            if !shard.sha256.eq_ignore_ascii_case(&m.obs.shard_sha256[s]) {
                out.problems.push(problem(
                    Category::ObsSha256,
                    format!(
                        "SHA-256 is {} but obs_shard_sha256[{s}] is {}: the shard or the manifest was changed",
                        shard.sha256, m.obs.shard_sha256[s]
                    ),
                ));
            }
            if let Some(schema) = &schema {
                out.problems.extend(obs::check_layout(&core, s, &url, &shard, schema).await);
            }
            out.shard_hash = Some((s, shard.sha256));
        }
    }
    out
}

/// Bytes kept from the end of a shard while streaming it: enough for the footer of most shards (a longer footer is
/// fetched with one more ranged request).
const SHARD_TAIL_KEEP: usize = 1 << 20;

/// What streaming a shard gives: its SHA-256 and its two ends (for the layout check).
#[cfg_attr(not(feature = "obs"), allow(dead_code))]
struct StreamedShard {
    sha256: String,
    head: Vec<u8>,
    tail: Vec<u8>,
}

/// Streams an object that must be `expected` bytes (never held whole in memory): its SHA-256 (lowercase hex), its
/// first 4 bytes and its last bytes (at least `keep` of them, or all). An object of another size is
/// [`StoreError::TooLarge`] or [`StoreError::WrongSize`].
async fn stream_shard(store: &Store, rel: &str, expected: u64, keep: usize) -> Result<StreamedShard, StoreError> {
    let init = || (Sha256::new(), Vec::with_capacity(4), Vec::new());
    let step = |(hasher, head, tail): &mut (Sha256, Vec<u8>, Vec<u8>), chunk: &[u8]| {
        hasher.update(chunk);
        let want = 4 - head.len();
        head.extend_from_slice(&chunk[..want.min(chunk.len())]);
        keep_tail(tail, chunk, keep);
    };
    let ((hasher, head, tail), size) = store.get_fold(rel, expected, init, step).await?;
    if size != expected {
        return Err(StoreError::WrongSize { url: store.url(rel), size, expected });
    }
    Ok(StreamedShard { sha256: hex(hasher.finalize().as_slice()), head, tail })
}

/// Appends `chunk` to `tail`, keeping at least the last `keep` bytes seen (and at most about twice that).
fn keep_tail(tail: &mut Vec<u8>, chunk: &[u8], keep: usize) {
    if chunk.len() >= keep {
        tail.clear();
        tail.extend_from_slice(&chunk[chunk.len() - keep..]);
        return;
    }
    tail.extend_from_slice(chunk);
    if tail.len() > 2 * keep {
        let cut = tail.len() - keep;
        tail.drain(..cut);
    }
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
        let got = checked_side_file(store, m, GENE_ORDER_NAME, limit, store.get_limited(GENE_ORDER_NAME, limit).await);
        side(got.and_then(|b| {
            parse_gene_order(&b, m.n_genes)
                .map(|_| ())
                .map_err(|message| DatasetError::SideFile { url: store.url(GENE_ORDER_NAME), message })
        }));
    }
    let mut names = None;
    if m.has_var_names {
        let limit = core.max_side_file_bytes;
        let got = checked_side_file(store, m, VAR_NAMES_NAME, limit, store.get_limited(VAR_NAMES_NAME, limit).await);
        side(got.and_then(|b| {
            names = Some(
                parse_var_names(&b, m.n_genes)
                    .map_err(|message| DatasetError::SideFile { url: store.url(VAR_NAMES_NAME), message })?,
            );
            Ok(())
        }));
    }
    if m.has_var_table {
        side(check_var_table(core, names.as_deref()).await);
    }
    problems
}

/// `var.parquet`: decodes, with one row per gene, and an index that does not hold `var_names`'s names in another
/// order (a gene table and a names file may name genes differently, symbols and IDs, but the same names in two
/// orders mean one of the files belongs to another gene order, and rows would be read under the wrong names).
#[cfg(feature = "obs")]
async fn check_var_table(core: &Core, var_names: Option<&[String]>) -> Result<(), DatasetError> {
    let (store, limit) = (&core.store, dct_obs::MAX_VAR_BYTES);
    let got = store.get_limited(VAR_TABLE_NAME, limit).await;
    let bytes = checked_side_file(store, &core.manifest, VAR_TABLE_NAME, limit, got)?;
    let url = store.url(VAR_TABLE_NAME);
    let batch = crate::reader::decode_var_table(bytes, &url, core.manifest.n_genes)?;
    let (Some(names), Ok(table)) = (var_names, dct_obs::VarTable::from_record_batch(&batch)) else { return Ok(()) };
    if let Some(j) = crate::side_files::same_genes_in_another_order(&table.index, names) {
        return Err(DatasetError::SideFile {
            url,
            message: format!(
                "its index holds the genes of {VAR_NAMES_NAME} in another order (column {j}: {:?} here, {:?} \
                 there): one of the two belongs to another gene order; write both again from one gene table",
                table.index[j], names[j]
            ),
        });
    }
    Ok(())
}

/// `var.parquet` exists (decoding it needs the `obs` feature's parquet reader).
#[cfg(not(feature = "obs"))]
async fn check_var_table(core: &Core, _var_names: Option<&[String]>) -> Result<(), DatasetError> {
    let r = core.store.size(VAR_TABLE_NAME).await;
    crate::side_files::side_file_result(&core.store, VAR_TABLE_NAME, 0, r.map(|_| bytes::Bytes::new())).map(|_| ())
}

/// The obs checks done with `dct-obs` (feature `obs`).
#[cfg(feature = "obs")]
mod obs {
    use std::sync::Arc;

    use dct_obs::{ObsError, ObsProblem, ObsProblemKind, ObsSchema, check_shard_tail};

    use super::{Category, Problem, StreamedShard};
    use crate::manifest::{MANIFEST_NAME, OBS_SCHEMA_NAME};
    use crate::reader::{Core, obs_manifest};

    /// `obs/schema.json`, parsed, and its exact text.
    pub(super) type Schema = Arc<(ObsSchema, String)>;

    fn category(kind: ObsProblemKind) -> Category {
        match kind {
            ObsProblemKind::Manifest => Category::ObsFields,
            ObsProblemKind::ShardSha256 | ObsProblemKind::Fingerprint => Category::ObsSha256,
            ObsProblemKind::Io => Category::Io,
            ObsProblemKind::Schema
            | ObsProblemKind::ShardMissing
            | ObsProblemKind::ShardSize
            | ObsProblemKind::ShardLayout => Category::ObsShard,
        }
    }

    /// An obs problem as a verification problem (its tile and column stay in the message: `tile` is for tiles).
    fn problem(p: ObsProblem) -> Problem {
        Problem { category: category(p.kind), tile: None, message: p.to_string() }
    }

    /// Reads and parses `obs/schema.json`; a missing or invalid schema is a problem (and shard layouts are then not
    /// checked).
    pub(super) async fn read_schema(core: &Core) -> (Option<Schema>, Vec<Problem>) {
        let store = &core.store;
        let url = store.url(OBS_SCHEMA_NAME);
        match dct_obs::read_schema(store).await {
            Ok(schema) => (Some(Arc::new(schema)), Vec::new()),
            Err(ObsError::NotFound { .. }) => (
                None,
                vec![Problem {
                    category: Category::ObsShard,
                    tile: None,
                    message: format!("{url}: has_obs is true but the obs schema is missing"),
                }],
            ),
            Err(ObsError::Store(e)) => (None, vec![Problem::from_error(&e.into())]),
            Err(e) => {
                (None, vec![Problem { category: Category::ObsShard, tile: None, message: format!("{url}: {e}") }])
            }
        }
    }

    /// The layout of shard `s` from its streamed ends (one more ranged request if its footer is longer than the
    /// tail kept).
    pub(super) async fn check_layout(
        core: &Core,
        s: usize,
        url: &str,
        shard: &StreamedShard,
        schema: &Schema,
    ) -> Vec<Problem> {
        let m = obs_manifest(&core.manifest);
        let size = core.manifest.obs.shard_bytes[s];
        let schema = &schema.0;
        let found = match check_shard_tail(s, &shard.head, &shard.tail, size, url, &m, schema) {
            Ok(found) => found,
            Err(needed) => {
                let rel = crate::manifest::obs_shard_path(s);
                match core.store.get_range(&rel, size - needed..size).await {
                    Ok(tail) => check_shard_tail(s, &shard.head, &tail, size, url, &m, schema).unwrap_or_else(|n| {
                        vec![ObsProblem {
                            kind: ObsProblemKind::ShardLayout,
                            shard: Some(s),
                            tile: None,
                            column: None,
                            message: format!("{url}: a {needed}-byte footer read still needs {n} bytes"),
                        }]
                    }),
                    Err(e) => return vec![Problem::from_error(&e.into())],
                }
            }
        };
        found.into_iter().map(problem).collect()
    }

    /// The fingerprint recomputed from the schema text, `tile_cells` and the shards' actual hashes (when every
    /// shard could be hashed and the schema read; those failures were reported already).
    pub(super) fn check_fingerprint(
        core: &Core,
        schema: Option<&(ObsSchema, String)>,
        shard_hashes: Vec<Option<String>>,
    ) -> Vec<Problem> {
        let Some((_, text)) = schema else { return Vec::new() };
        let Some(hashes) = shard_hashes.into_iter().collect::<Option<Vec<String>>>() else { return Vec::new() };
        let manifest_url = core.store.url(MANIFEST_NAME);
        dct_obs::check_fingerprint(text, &obs_manifest(&core.manifest), &hashes)
            .map(|p| Problem { category: category(p.kind), tile: None, message: format!("{manifest_url}: {p}") })
            .into_iter()
            .collect()
    }
}

/// Without the `obs` feature, obs shards are checked by size and SHA-256 only.
#[cfg(not(feature = "obs"))]
mod obs {
    use super::{Problem, StreamedShard};
    use crate::reader::Core;

    /// No schema is read without `dct-obs`.
    pub(super) type Schema = std::sync::Arc<()>;

    pub(super) async fn read_schema(_core: &Core) -> (Option<Schema>, Vec<Problem>) {
        (None, Vec::new())
    }

    pub(super) async fn check_layout(
        _core: &Core,
        _s: usize,
        _url: &str,
        _shard: &StreamedShard,
        _schema: &Schema,
    ) -> Vec<Problem> {
        Vec::new()
    }

    pub(super) fn check_fingerprint(_core: &Core, _schema: Option<&()>, _hashes: Vec<Option<String>>) -> Vec<Problem> {
        Vec::new()
    }
}

/// The obs fingerprint (FORMAT-v2.md, "Obs"), re-exported from `dct-obs` (where it is defined) for compatibility.
#[cfg(feature = "obs")]
pub use dct_obs::obs_fingerprint;

#[cfg(test)]
mod tests;
