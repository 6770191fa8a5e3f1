//! `manifest.json`: a typed model of every key, strict validation, and unknown keys kept for rewriting.

use dct_format::{CellIndex, Version};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::error::{Category, ManifestError};

/// The value of the manifest's `format` key.
pub const FORMAT_NAME: &str = "deltacells-dataset";
/// The manifest version this crate writes.
pub const WRITE_VERSION: u32 = 2;
/// Largest `manifest.json` [`crate::Dataset::open`] reads by default (256 MiB; a manifest is about 30 bytes per
/// tile, so this is millions of tiles).
pub const DEFAULT_MAX_MANIFEST_BYTES: u64 = 256 << 20;

/// The manifest key recording the side files' digests (an extension; see [`Manifest::side_file_sha256`]).
pub const SIDE_FILE_SHA256: &str = "side_file_sha256";

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}
// The dataset's object names are defined in `dct_format::objects`, for every layer.
pub use dct_format::objects::{
    APPEND_JOURNAL_NAME, APPEND_STAGING_DIR, GENE_ORDER_NAME, MANIFEST_NAME, OBS_SCHEMA_NAME, ObsFields,
    VAR_NAMES_NAME, VAR_TABLE_NAME, obs_shard_path, tile_path,
};

/// The contents of `manifest.json` (see FORMAT-v2.md, "manifest.json").
///
/// Parse with [`Manifest::from_json`], which also [validates](Manifest::validate); serialize with
/// [`Manifest::to_json_pretty`]. Keys this crate does not know are kept in [`Manifest::extra`] and written back
/// unchanged. Missing optional keys take their defaults (`false`, `0`, empty); `n_chunks` and `zstd_level` are
/// informational and may be absent.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// Always [`FORMAT_NAME`].
    pub format: String,
    /// Manifest (and tile) version, 1 or 2.
    pub version: u32,
    /// Total cells, the sum of `tile_cells`.
    pub n_cells: u64,
    /// Genes (columns).
    pub n_genes: u64,
    /// Cells per tile (every tile but the last holds exactly this many).
    pub tile_size: u64,
    /// Cells in each tile.
    pub tile_cells: Vec<u64>,
    /// Stored nonzeros in each tile.
    pub tile_nnz: Vec<u64>,
    /// Size in bytes of each tile object.
    pub tile_bytes: Vec<u64>,
    /// Chunks per tile requested by the writer (informational).
    pub n_chunks: Option<u64>,
    /// zstd level used by the writer (informational).
    pub zstd_level: Option<i64>,
    /// Whether `gene_order.npy` exists.
    pub has_gene_order: bool,
    /// Whether `var_names.txt` exists.
    pub has_var_names: bool,
    /// Whether `var.parquet` exists.
    pub has_var_table: bool,
    /// Free-form JSON (an object when written by this crate).
    pub metadata: Value,
    /// Whether the dataset has obs shards; if so [`Manifest::obs`] describes them.
    pub has_obs: bool,
    /// The `obs_*` keys (see [`ObsFields`]); the default when there is no obs.
    pub obs: ObsFields,
    /// Extension (`side_file_sha256`, version 2 only): the SHA-256 (hex; written lowercase) of each side file
    /// (`gene_order.npy`, `var_names.txt`, `var.parquet`) as written, so that readers and `verify` tell a damaged
    /// or replaced file (two gene names swapped, say) from the one the tiles were written with. Empty when the
    /// writer recorded none (the original package, version 1).
    pub side_file_sha256: BTreeMap<String, String>,
    /// Keys this crate does not know, preserved on rewrite.
    pub extra: Map<String, Value>,
}

/// The keys of `manifest.json` in the order they are written, borrowed from a [`Manifest`].
#[derive(Serialize)]
struct ManifestKeys<'a> {
    format: &'a str,
    version: u32,
    n_cells: u64,
    n_genes: u64,
    tile_size: u64,
    tile_cells: &'a [u64],
    tile_nnz: &'a [u64],
    tile_bytes: &'a [u64],
    #[serde(skip_serializing_if = "Option::is_none")]
    n_chunks: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    zstd_level: Option<i64>,
    has_gene_order: bool,
    has_var_names: bool,
    has_var_table: bool,
    metadata: &'a Value,
    has_obs: bool,
    obs_tiles_per_file: u64,
    obs_fingerprint: &'a str,
    obs_shard_bytes: &'a [u64],
    obs_shard_sha256: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    obs_shard_footer_crc32: Option<&'a [u32]>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    side_file_sha256: &'a BTreeMap<String, String>,
    #[serde(flatten)]
    extra: &'a Map<String, Value>,
}

impl Serialize for Manifest {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let obs = &self.obs;
        ManifestKeys {
            format: &self.format,
            version: self.version,
            n_cells: self.n_cells,
            n_genes: self.n_genes,
            tile_size: self.tile_size,
            tile_cells: &self.tile_cells,
            tile_nnz: &self.tile_nnz,
            tile_bytes: &self.tile_bytes,
            n_chunks: self.n_chunks,
            zstd_level: self.zstd_level,
            has_gene_order: self.has_gene_order,
            has_var_names: self.has_var_names,
            has_var_table: self.has_var_table,
            metadata: &self.metadata,
            has_obs: self.has_obs,
            obs_tiles_per_file: obs.tiles_per_file,
            obs_fingerprint: &obs.fingerprint,
            obs_shard_bytes: &obs.shard_bytes,
            obs_shard_sha256: &obs.shard_sha256,
            obs_shard_footer_crc32: obs.shard_footer_crc32.as_deref(),
            side_file_sha256: &self.side_file_sha256,
            extra: &self.extra,
        }
        .serialize(serializer)
    }
}

/// What a writer knows of one tile it stored, for [`Manifest::build`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileStats {
    /// Cells (`tile_cells`).
    pub cells: u64,
    /// Stored nonzeros (`tile_nnz`).
    pub nnz: u64,
    /// Size of the tile object in bytes (`tile_bytes`).
    pub bytes: u64,
}

/// The writer settings a manifest records, for [`Manifest::build`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ManifestSettings {
    /// Version of the tiles and the manifest.
    pub version: Version,
    /// Genes (columns).
    pub n_genes: u64,
    /// Cells per tile.
    pub tile_size: u64,
    /// Chunks per tile (`n_chunks`).
    pub n_chunks: u64,
    /// zstd level (`zstd_level`).
    pub zstd_level: i64,
}

fn type_name(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) if s.len() <= 40 => format!("the string {s:?}"),
        Value::String(_) => "a long string".into(),
        Value::Array(a) => format!("an array of {} items", a.len()),
        Value::Object(_) => "an object".into(),
    }
}

/// Removes `key` from `map` and converts it to `T`; `Ok(None)` if absent.
fn take<T: DeserializeOwned>(
    map: &mut Map<String, Value>,
    key: &str,
    category: Category,
    expected: &str,
) -> Result<Option<T>, ManifestError> {
    let Some(v) = map.remove(key) else { return Ok(None) };
    let found = type_name(&v);
    serde_json::from_value(v).map(Some).map_err(|_| {
        ManifestError::new(category, Some(key), format!("manifest key `{key}` must be {expected}, found {found}"))
    })
}

fn required<T: DeserializeOwned>(
    map: &mut Map<String, Value>,
    key: &str,
    category: Category,
    expected: &str,
) -> Result<T, ManifestError> {
    take(map, key, category, expected)?
        .ok_or_else(|| ManifestError::new(category, Some(key), format!("manifest key `{key}` ({expected}) is missing")))
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit())
}

impl Manifest {
    /// A manifest for a new, empty dataset of version [`WRITE_VERSION`] (no tiles yet).
    pub fn new(n_genes: u64, tile_size: u64) -> Self {
        Manifest {
            format: FORMAT_NAME.into(),
            version: WRITE_VERSION,
            n_cells: 0,
            n_genes,
            tile_size,
            tile_cells: Vec::new(),
            tile_nnz: Vec::new(),
            tile_bytes: Vec::new(),
            n_chunks: None,
            zstd_level: None,
            has_gene_order: false,
            has_var_names: false,
            has_var_table: false,
            metadata: Value::Object(Map::new()),
            has_obs: false,
            obs: ObsFields::default(),
            side_file_sha256: BTreeMap::new(),
            extra: Map::new(),
        }
    }

    /// The manifest of a dataset just written, from its settings, its tiles in order, the obs fields (if it has
    /// obs) and `metadata`: the one place manifests are assembled, for [`crate::DatasetWriter`] and the converter
    /// alike. The side files' `has_*` flags are set when they are stored ([`crate::finish_dataset`]), which also
    /// validates the result.
    ///
    /// A version-1 manifest carries only the keys the original reader knows (it refuses any other), so it leaves
    /// out `obs_shard_footer_crc32`.
    pub fn build(settings: ManifestSettings, tiles: &[TileStats], obs: Option<ObsFields>, metadata: Value) -> Self {
        let mut m = Manifest::new(settings.n_genes, settings.tile_size);
        m.version = settings.version.number();
        m.tile_cells = tiles.iter().map(|t| t.cells).collect();
        m.tile_nnz = tiles.iter().map(|t| t.nnz).collect();
        m.tile_bytes = tiles.iter().map(|t| t.bytes).collect();
        m.n_cells = m.tile_cells.iter().fold(0u64, |a, &b| a.saturating_add(b));
        m.n_chunks = Some(settings.n_chunks);
        m.zstd_level = Some(settings.zstd_level);
        m.metadata = metadata;
        if let Some(mut obs) = obs {
            if settings.version == Version::V1 {
                obs.shard_footer_crc32 = None;
            }
            m.has_obs = true;
            m.obs = obs;
        }
        m
    }

    /// Parses and [validates](Manifest::validate) the bytes of a `manifest.json`.
    ///
    /// `format` and `version` are checked first (so a file of another format is reported as such, whatever else
    /// it holds), then every known key's type; unknown keys are kept in [`Manifest::extra`].
    pub fn from_json(bytes: &[u8]) -> Result<Self, ManifestError> {
        let value: Value = serde_json::from_slice(bytes).map_err(|e| {
            ManifestError::new(Category::ManifestInvalid, None, format!("manifest.json is not valid JSON: {e}"))
        })?;
        let Value::Object(mut map) = value else {
            return Err(ManifestError::new(
                Category::ManifestInvalid,
                None,
                format!("manifest.json must hold a JSON object, found {}", type_name(&value)),
            ));
        };
        let format: String = required(&mut map, "format", Category::ManifestFormat, "a string")?;
        if format != FORMAT_NAME {
            return Err(ManifestError::new(
                Category::ManifestFormat,
                Some("format"),
                format!("manifest format is {format:?}, expected {FORMAT_NAME:?}: not a deltacells dataset"),
            ));
        }
        let version_value = map.get("version").cloned();
        let version: u64 =
            required(&mut map, "version", Category::ManifestVersion, "an integer").map_err(|mut e| {
                if let Some(v) = version_value {
                    e.message = format!("manifest version {v} is not supported (this reader knows versions 1 and 2)");
                }
                e
            })?;
        let version = u32::try_from(version).ok().and_then(Version::from_number).ok_or_else(|| {
            ManifestError::new(
                Category::ManifestVersion,
                Some("version"),
                format!(
                    "manifest version {version} is not supported (this reader knows versions 1 and 2); \
                     upgrade deltacells to read it"
                ),
            )
        })?;
        const INT: &str = "a non-negative integer";
        const LIST: &str = "a list of non-negative integers";
        const BOOL: &str = "true or false";
        let m = &mut map;
        let n_cells = required(m, "n_cells", Category::ManifestCounts, INT)?;
        let n_genes = required(m, "n_genes", Category::ManifestCounts, INT)?;
        let tile_size = required(m, "tile_size", Category::ManifestCounts, INT)?;
        let tile_cells = required(m, "tile_cells", Category::ManifestLists, LIST)?;
        let tile_nnz = required(m, "tile_nnz", Category::ManifestLists, LIST)?;
        let tile_bytes = required(m, "tile_bytes", Category::ManifestLists, LIST)?;
        let n_chunks = take(m, "n_chunks", Category::ManifestInvalid, INT)?;
        let zstd_level = take(m, "zstd_level", Category::ManifestInvalid, "an integer")?;
        let has_gene_order = take(m, "has_gene_order", Category::ManifestInvalid, BOOL)?.unwrap_or(false);
        let has_var_names = take(m, "has_var_names", Category::ManifestInvalid, BOOL)?.unwrap_or(false);
        let has_var_table = take(m, "has_var_table", Category::ManifestInvalid, BOOL)?.unwrap_or(false);
        let metadata = m.remove("metadata").unwrap_or_else(|| Value::Object(Map::new()));
        let has_obs = take(m, "has_obs", Category::ObsFields, BOOL)?.unwrap_or(false);
        // With has_obs false the obs fields are not used, so their types are not held against the manifest.
        let obs_cat = if has_obs { Category::ObsFields } else { Category::ManifestInvalid };
        let mut obs = |key: &str, expected: &str| -> Result<Option<Value>, ManifestError> {
            let v = m.remove(key);
            if !has_obs && v.is_some() {
                // Keep whatever is there; it is meaningless without has_obs.
                return Ok(v);
            }
            if let Some(v) = v {
                let found = type_name(&v);
                let ok = match expected {
                    "int" => v.as_u64().is_some(),
                    "str" => v.is_string(),
                    "ints" => v.as_array().is_some_and(|a| a.iter().all(|x| x.as_u64().is_some())),
                    _ => v.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
                };
                if !ok {
                    return Err(ManifestError::new(
                        obs_cat,
                        Some(key),
                        format!("manifest key `{key}` has the wrong type ({found})"),
                    ));
                }
                return Ok(Some(v));
            }
            Ok(None)
        };
        let tiles_per_file = obs("obs_tiles_per_file", "int")?;
        let fingerprint = obs("obs_fingerprint", "str")?;
        let shard_bytes = obs("obs_shard_bytes", "ints")?;
        let shard_sha = obs("obs_shard_sha256", "strs")?;
        let footer_crc = obs("obs_shard_footer_crc32", "ints")?;
        let footer_crc = match footer_crc {
            Some(v) if has_obs => Some(serde_json::from_value::<Vec<u32>>(v).map_err(|_| {
                ManifestError::new(
                    Category::ObsFields,
                    Some("obs_shard_footer_crc32"),
                    "obs_shard_footer_crc32 must hold integers below 2^32".to_string(),
                )
            })?),
            _ => None,
        };
        let side_file_sha256 = match m.remove(SIDE_FILE_SHA256) {
            None => BTreeMap::new(),
            Some(v) => serde_json::from_value::<BTreeMap<String, String>>(v).map_err(|_| {
                ManifestError::new(
                    Category::ManifestInvalid,
                    Some(SIDE_FILE_SHA256),
                    format!("manifest key `{SIDE_FILE_SHA256}` must map file names to SHA-256 digests (hex strings)"),
                )
            })?,
        };
        let manifest = Manifest {
            format,
            version: version.number(),
            n_cells,
            n_genes,
            tile_size,
            tile_cells,
            tile_nnz,
            tile_bytes,
            n_chunks,
            zstd_level,
            has_gene_order,
            has_var_names,
            has_var_table,
            metadata,
            has_obs,
            obs: ObsFields {
                tiles_per_file: tiles_per_file.and_then(|v| v.as_u64()).unwrap_or(0),
                fingerprint: fingerprint.and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default(),
                shard_bytes: shard_bytes.and_then(|v| serde_json::from_value(v).ok()).unwrap_or_default(),
                shard_sha256: shard_sha.and_then(|v| serde_json::from_value(v).ok()).unwrap_or_default(),
                shard_footer_crc32: footer_crc,
            },
            side_file_sha256,
            extra: map,
        };
        manifest.validate()?;
        Ok(manifest)
    }

    /// Checks every rule of the format a manifest alone can break (see [`Category`] for the kinds).
    pub fn validate(&self) -> Result<(), ManifestError> {
        let err = |c: Category, key: &str, msg: String| Err(ManifestError::new(c, Some(key), msg));
        if self.format != FORMAT_NAME {
            return err(
                Category::ManifestFormat,
                "format",
                format!("format is {:?}, not {FORMAT_NAME:?}", self.format),
            );
        }
        let Some(version) = Version::from_number(self.version) else {
            return err(Category::ManifestVersion, "version", format!("version {} is not supported", self.version));
        };
        let n_tiles = self.tile_cells.len();
        if self.tile_nnz.len() != n_tiles || self.tile_bytes.len() != n_tiles {
            return err(
                Category::ManifestLists,
                "tile_cells",
                format!(
                    "the per-tile lists differ in length: tile_cells has {}, tile_nnz {}, tile_bytes {}",
                    n_tiles,
                    self.tile_nnz.len(),
                    self.tile_bytes.len()
                ),
            );
        }
        if self.n_genes == 0 || self.n_genes > version.max_genes() {
            return err(
                Category::ManifestCounts,
                "n_genes",
                format!("n_genes is {}; version {} allows 1..={}", self.n_genes, self.version, version.max_genes()),
            );
        }
        if self.tile_size == 0 || self.tile_size > u64::from(u32::MAX) {
            return err(
                Category::ManifestCounts,
                "tile_size",
                format!(
                    "tile_size is {}; it must be in 1..=2^32-1 (a tile header counts its cells in 32 bits)",
                    self.tile_size
                ),
            );
        }
        let sum = self.tile_cells.iter().try_fold(0u64, |acc, &c| acc.checked_add(c));
        if sum != Some(self.n_cells) {
            let sum = sum.map_or_else(|| "more than 2^64".to_string(), |s| s.to_string());
            return err(
                Category::ManifestCounts,
                "n_cells",
                format!("n_cells is {} but tile_cells adds up to {sum}", self.n_cells),
            );
        }
        for (t, &c) in self.tile_cells.iter().enumerate() {
            let last = t + 1 == n_tiles;
            let ok = if last { (1..=self.tile_size).contains(&c) } else { c == self.tile_size };
            if !ok {
                let rule = if last { format!("1..={}", self.tile_size) } else { format!("exactly {}", self.tile_size) };
                return err(
                    Category::ManifestTileCells,
                    "tile_cells",
                    format!(
                        "tile_cells[{t}] is {c}, but {} must hold {rule} cells (tile_size {}): only the last \
                         tile may be short",
                        if last { "the last tile" } else { "every tile but the last" },
                        self.tile_size
                    ),
                );
            }
        }
        for (key, list) in [("tile_bytes", &self.tile_bytes), ("tile_nnz", &self.tile_nnz)] {
            if list.iter().try_fold(0u64, |a, &b| a.checked_add(b)).is_none() {
                return err(Category::ManifestLists, key, format!("{key} adds up to more than 2^64"));
            }
        }
        // A tile holds its 64-byte header and a 64-bit row offset per cell and one more: what a manifest says of
        // its cells is bounded by what it says of its bytes (which the store's sizes then confirm), so no claim of
        // cells beyond its tiles' bytes reaches the code that sizes buffers by cells.
        for (t, (&bytes, &cells)) in self.tile_bytes.iter().zip(&self.tile_cells).enumerate() {
            let least = 64 + 8 * (u128::from(cells) + 1);
            if u128::from(bytes) < least {
                return err(
                    Category::ManifestLists,
                    "tile_bytes",
                    format!(
                        "tile_bytes[{t}] is {bytes}, fewer than the {least} bytes a tile of tile_cells[{t}] = {cells} \
                         cells takes (its header and 8 bytes of row offsets per cell): the manifest does not \
                         describe its tiles"
                    ),
                );
            }
        }
        for (t, (&nnz, &cells)) in self.tile_nnz.iter().zip(&self.tile_cells).enumerate() {
            if u128::from(nnz) > u128::from(cells) * u128::from(self.n_genes) {
                return err(
                    Category::ManifestLists,
                    "tile_nnz",
                    format!("tile_nnz[{t}] is {nnz}, more than {cells} cells x {} genes", self.n_genes),
                );
            }
        }
        if self.has_obs {
            self.validate_obs()?;
        }
        self.validate_side_file_digests()
    }

    /// `side_file_sha256`'s side files exist (as the manifest says), each with a SHA-256 digest; other names (a
    /// later writer's) are kept and not checked.
    fn validate_side_file_digests(&self) -> Result<(), ManifestError> {
        for (name, digest) in &self.side_file_sha256 {
            let exists = match name.as_str() {
                GENE_ORDER_NAME => self.has_gene_order,
                VAR_NAMES_NAME => self.has_var_names,
                VAR_TABLE_NAME => self.has_var_table,
                _ => continue,
            };
            let message = if !exists {
                format!("{SIDE_FILE_SHA256} names {name:?}, which the manifest says the dataset does not have")
            } else if digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_hexdigit()) {
                format!("{SIDE_FILE_SHA256}[{name:?}] is not a SHA-256 digest (64 hex digits)")
            } else {
                continue;
            };
            return Err(ManifestError::new(Category::ManifestInvalid, Some(SIDE_FILE_SHA256), message));
        }
        Ok(())
    }

    /// Records the SHA-256 of side file `rel` as stored (`bytes`), for a version 2 manifest: the original package
    /// reads only the keys it knows in version 1, so version 1 manifests record none.
    pub fn record_side_file(&mut self, rel: &str, bytes: &[u8]) {
        if self.version >= 2 && [GENE_ORDER_NAME, VAR_NAMES_NAME, VAR_TABLE_NAME].contains(&rel) {
            self.side_file_sha256.insert(rel.to_string(), sha256_hex(bytes));
        }
    }

    /// Checks side file `rel` (read as `bytes`) against the digest the manifest records for it, if any:
    /// `Err(message)` saying how it differs and what to do.
    pub fn check_side_file(&self, rel: &str, bytes: &[u8]) -> Result<(), String> {
        let Some(want) = self.side_file_sha256.get(rel) else { return Ok(()) };
        let got = sha256_hex(bytes);
        if got.eq_ignore_ascii_case(want) {
            return Ok(());
        }
        let rewrite = if rel == VAR_TABLE_NAME {
            "restore it, write the dataset again, or write a new gene table with deltacells.obs.write_var_table \
             (which records it in the manifest)"
        } else {
            "restore it, or write the dataset again"
        };
        Err(format!(
            "its SHA-256 is {got} but the manifest records {want}: the file was changed or damaged after the \
             dataset was written, so genes could be read under other names; {rewrite}"
        ))
    }

    fn validate_obs(&self) -> Result<(), ManifestError> {
        let err = |key: &str, msg: String| Err(ManifestError::new(Category::ObsFields, Some(key), msg));
        let k = self.obs.tiles_per_file;
        if k == 0 {
            return err("obs_tiles_per_file", "has_obs is true but obs_tiles_per_file is missing or 0".into());
        }
        if !is_hex(&self.obs.fingerprint, 24) {
            return err(
                "obs_fingerprint",
                format!(
                    "has_obs is true but obs_fingerprint is {:?}; it must be 24 hex characters",
                    self.obs.fingerprint
                ),
            );
        }
        let shards = self.n_obs_shards();
        if self.obs.shard_bytes.iter().try_fold(0u64, |a, &b| a.checked_add(b)).is_none() {
            return err("obs_shard_bytes", "obs_shard_bytes adds up to more than 2^64".into());
        }
        if self.obs.shard_bytes.len() as u64 != shards {
            return err(
                "obs_shard_bytes",
                format!(
                    "obs_shard_bytes has {} entries; {} tiles in shards of {k} need {shards}",
                    self.obs.shard_bytes.len(),
                    self.n_tiles()
                ),
            );
        }
        if self.obs.shard_sha256.len() as u64 != shards {
            return err(
                "obs_shard_sha256",
                format!(
                    "obs_shard_sha256 has {} entries; {} tiles in shards of {k} need {shards}",
                    self.obs.shard_sha256.len(),
                    self.n_tiles()
                ),
            );
        }
        if let Some((s, h)) = self.obs.shard_sha256.iter().enumerate().find(|(_, h)| !is_hex(h, 64)) {
            return err("obs_shard_sha256", format!("obs_shard_sha256[{s}] is {h:?}; it must be 64 hex characters"));
        }
        if let Some(crcs) = &self.obs.shard_footer_crc32
            && crcs.len() as u64 != shards
        {
            return err(
                "obs_shard_footer_crc32",
                format!("obs_shard_footer_crc32 has {} entries; {shards} shards need one each", crcs.len()),
            );
        }
        Ok(())
    }

    /// Serializes as pretty-printed JSON (2-space indent, trailing newline), unknown keys included.
    pub fn to_json_pretty(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec_pretty(self).expect("a manifest always serializes");
        out.push(b'\n');
        out
    }

    /// Number of tiles.
    pub fn n_tiles(&self) -> usize {
        self.tile_cells.len()
    }

    /// Total stored nonzeros.
    pub fn nnz(&self) -> u64 {
        self.tile_nnz.iter().fold(0u64, |a, &b| a.saturating_add(b))
    }

    /// Number of obs shards the manifest implies (`ceil(n_tiles / obs_tiles_per_file)`; 0 without obs).
    pub fn n_obs_shards(&self) -> u64 {
        if !self.has_obs {
            return 0;
        }
        self.obs.n_shards(self.n_tiles()) as u64
    }

    /// The tile format version (valid after [`Manifest::validate`]).
    pub fn tile_version(&self) -> Version {
        Version::from_number(self.version).unwrap_or(Version::V2)
    }

    /// The cell index built from `tile_cells`.
    pub fn cell_index(&self) -> CellIndex {
        // validate() proved the sum fits in 64 bits.
        CellIndex::from_tile_cells(&self.tile_cells).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests;
