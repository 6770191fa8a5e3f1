//! The local column cache: `<cache>/<fingerprint>/obs/<url-quoted column>.arrow`, uncompressed Arrow IPC files
//! with one record batch per tile, memory-mapped and validated against the manifest before use.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow_array::{ArrayRef, RecordBatch};
use arrow_buffer::Buffer;
use arrow_ipc::reader::FileDecoder;
use arrow_ipc::writer::FileWriter;
use arrow_schema::{Schema, SchemaRef};

use crate::error::{ObsError, Result};
use crate::schema::ObsColumn;

/// Footer metadata key of a cache file's checksum: `"<covered length>:<crc32 hex>"` of the file's first bytes
/// (everything the record batches occupy).
const CHECKSUM_KEY: &str = "deltacells:crc32";

/// Environment variable naming the cache directory.
pub const CACHE_ENV: &str = "DELTACELLS_CACHE";

/// The cache directory: `explicit` if given, else `$DELTACELLS_CACHE`, else `$XDG_CACHE_HOME/deltacells`, else
/// `$HOME/.cache/deltacells` (empty variables are ignored).
pub fn cache_root(explicit: Option<&Path>) -> Result<PathBuf> {
    resolve_cache_root(explicit, |k| std::env::var_os(k))
}

/// [`cache_root`] with the environment given as a function (for tests and embedding).
pub fn resolve_cache_root(explicit: Option<&Path>, env: impl Fn(&str) -> Option<OsString>) -> Result<PathBuf> {
    if let Some(p) = explicit {
        return Ok(p.to_path_buf());
    }
    let var = |k: &str| env(k).filter(|v| !v.is_empty());
    if let Some(p) = var(CACHE_ENV) {
        return Ok(PathBuf::from(p));
    }
    if let Some(p) = var("XDG_CACHE_HOME") {
        return Ok(PathBuf::from(p).join("deltacells"));
    }
    if let Some(p) = var("HOME") {
        return Ok(PathBuf::from(p).join(".cache").join("deltacells"));
    }
    Err(ObsError::NoCacheDir)
}

/// A column name quoted like Python's `urllib.parse.quote(name, safe="")`: ASCII letters, digits and `_.-~` stay,
/// every other byte of the UTF-8 text becomes `%XX` (uppercase hex).
pub fn quote_column_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for &b in name.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Longest quoted column name a cache file name holds whole: with `.arrow`, the lock's `.lock` and a temporary
/// file's suffix, names stay well within the 255 bytes a file name may take.
const MAX_QUOTED_NAME: usize = 200;

/// The cache file name of a column: `<quoted name>.arrow`. A name whose quoted form is longer than 200 bytes is
/// cut to whole characters and followed by `~` and 32 hex digits of its SHA-256 (`<prefix>~<digest>.arrow`), so
/// that every column, whatever the length of its name, has a file of its own.
pub fn column_file_name(name: &str) -> String {
    let quoted = quote_column_name(name);
    if quoted.len() <= MAX_QUOTED_NAME {
        return format!("{quoted}.arrow");
    }
    let digest = crate::fingerprint::sha256_hex(name.as_bytes());
    let mut prefix = String::new();
    for ch in name.chars() {
        let q = quote_column_name(ch.encode_utf8(&mut [0; 4]));
        if prefix.len() + q.len() + 1 + 32 > MAX_QUOTED_NAME {
            break;
        }
        prefix.push_str(&q);
    }
    format!("{prefix}~{}.arrow", &digest[..32])
}

/// A validated, memory-mapped cached column: one array per tile, pointing into the mapping.
#[derive(Debug, Clone)]
pub(crate) struct CachedColumn {
    pub(crate) arrays: Vec<ArrayRef>,
    /// Whether some cell's value is missing (read once, not at every take).
    pub(crate) has_nulls: bool,
}

/// What was found at a cache path.
#[derive(Debug)]
pub(crate) enum Cached {
    /// No file.
    Missing,
    /// A file that cannot be used (truncated, corrupt, wrong layout); the reason.
    Invalid(String),
    /// A valid file.
    Valid(CachedColumn),
}

/// Opens and validates a cached column file: an Arrow IPC file whose single field is `column` with its type, and
/// which holds one record batch per tile with `tile_cells[t]` rows. The arrays are zero-copy views of the mapping.
///
/// Cache files are replaced by rename and never modified in place, so a mapping stays valid while it is in use.
pub(crate) fn open_cached(path: &Path, column: &ObsColumn, tile_cells: &[u64]) -> Result<Cached> {
    // A FIFO would block the open; a directory cannot be mapped (nor replaced by the rebuilt file).
    match dct_store::check_regular_file(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Cached::Missing),
        Err(_) => {
            let message = "it is not a regular file (a directory, a FIFO or a device)".into();
            return Err(ObsError::CacheCorrupt { path: path.to_path_buf(), message });
        }
        Ok(()) => {}
    }
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Cached::Missing),
        Err(e) => return Err(ObsError::cache(path, "cannot open the cached column", e)),
    };
    let len = file.metadata().map_err(|e| ObsError::cache(path, "cannot stat the cached column", e))?.len();
    if len < 8 + 10 {
        return Ok(Cached::Invalid(format!("{len} bytes is too short for an Arrow file")));
    }
    let mmap = map_file(&file).map_err(|e| ObsError::cache(path, "cannot memory-map", e))?;
    let buffer = Buffer::from(bytes::Bytes::from_owner(mmap));
    let decoded = std::panic::catch_unwind(AssertUnwindSafe(|| decode_file(&buffer, column, tile_cells)));
    Ok(match decoded {
        Ok(Ok(arrays)) => {
            let has_nulls = arrays.iter().any(|a| a.null_count() > 0);
            Cached::Valid(CachedColumn { arrays, has_nulls })
        }
        Ok(Err(msg)) => Cached::Invalid(msg),
        Err(_) => Cached::Invalid("the Arrow decoder failed on it".into()),
    })
}

fn decode_file(buf: &Buffer, column: &ObsColumn, tile_cells: &[u64]) -> std::result::Result<Vec<ArrayRef>, String> {
    let bytes: &[u8] = buf.as_slice();
    let len = bytes.len();
    if &bytes[..6] != b"ARROW1" || &bytes[len - 6..] != b"ARROW1" {
        return Err("the Arrow file magic is missing (truncated or not an Arrow file)".into());
    }
    let tail: [u8; 10] = bytes[len - 10..].try_into().expect("10 bytes");
    let footer_len = arrow_ipc::reader::read_footer_length(tail).map_err(|e| e.to_string())?;
    if footer_len > len - 10 - 8 {
        return Err(format!("the footer claims {footer_len} bytes in a {len}-byte file"));
    }
    let footer_bytes = &bytes[len - 10 - footer_len..len - 10];
    let footer = arrow_ipc::root_as_footer(footer_bytes).map_err(|e| format!("invalid footer: {e}"))?;
    let fb_schema = footer.schema().ok_or("the footer has no schema")?;
    let schema = arrow_ipc::convert::try_fb_to_schema(fb_schema).map_err(|e| format!("invalid schema: {e}"))?;
    let field = column.field();
    if schema.fields().len() != 1
        || schema.field(0).name() != field.name()
        || schema.field(0).data_type() != field.data_type()
    {
        return Err(format!(
            "it holds {:?}, not the single column {:?} of type {}",
            schema,
            field.name(),
            field.data_type()
        ));
    }
    check_checksum(&footer, &bytes[..len - 10 - footer_len])?;
    if footer.dictionaries().is_some_and(|d| !d.is_empty()) {
        return Err("it has dictionary batches, which cache files never have".into());
    }
    let blocks = footer.recordBatches().ok_or("the footer lists no record batches")?;
    if blocks.len() != tile_cells.len() {
        return Err(format!("{} record batches for {} tiles", blocks.len(), tile_cells.len()));
    }
    let schema: SchemaRef = Arc::new(schema);
    let decoder = FileDecoder::new(schema, footer.version()).with_require_alignment(true);
    let data_end = len - 10 - footer_len;
    let mut arrays = Vec::with_capacity(blocks.len());
    for (t, block) in blocks.iter().enumerate() {
        let rows = tile_cells[t];
        let (Ok(offset), Ok(meta_len), Ok(body_len)) = (
            usize::try_from(block.offset()),
            usize::try_from(block.metaDataLength()),
            usize::try_from(block.bodyLength()),
        ) else {
            return Err(format!("record batch {t} has a negative offset or length"));
        };
        let end = offset.checked_add(meta_len).and_then(|e| e.checked_add(body_len));
        if offset < 8 || meta_len < 8 || end.is_none_or(|e| e > data_end) {
            return Err(format!("record batch {t} lies outside the file's data"));
        }
        check_message(&bytes[offset..offset + meta_len], body_len, rows)
            .map_err(|m| format!("record batch {t}: {m}"))?;
        let block_buf = buf.slice_with_length(offset, meta_len + body_len);
        let batch: RecordBatch = decoder
            .read_record_batch(block, &block_buf)
            .map_err(|e| format!("record batch {t}: {e}"))?
            .ok_or_else(|| format!("record batch {t} is empty"))?;
        if batch.num_rows() as u64 != rows || batch.num_columns() != 1 {
            return Err(format!("record batch {t} has {} rows but tile {t} has {rows} cells", batch.num_rows()));
        }
        arrays.push(batch.column(0).clone());
    }
    Ok(arrays)
}

/// Verifies the checksum the writer put in the footer over the file's data part.
fn check_checksum(footer: &arrow_ipc::Footer<'_>, data: &[u8]) -> std::result::Result<(), String> {
    let value = footer
        .custom_metadata()
        .and_then(|kvs| kvs.iter().find(|kv| kv.key() == Some(CHECKSUM_KEY)).and_then(|kv| kv.value()))
        .ok_or("it has no checksum (not written by this cache)")?;
    let (covered, crc) = value.split_once(':').ok_or("its checksum is malformed")?;
    let covered: usize = covered.parse().map_err(|_| "its checksum is malformed")?;
    let crc = u32::from_str_radix(crc, 16).map_err(|_| "its checksum is malformed")?;
    if covered > data.len() {
        return Err("its checksum covers more than the file holds (truncated)".into());
    }
    if crc32fast::hash(&data[..covered]) != crc {
        return Err("its checksum does not match (corrupt)".into());
    }
    Ok(())
}

/// A writer that checksums and counts what passes through it.
struct CrcWriter<W> {
    inner: W,
    hasher: crc32fast::Hasher,
    written: u64,
}

impl<W: Write> Write for CrcWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Checks an encapsulated record batch message before the Arrow decoder sees it: a valid flatbuffer, one field node
/// of `rows` rows, no compression, and every buffer inside the `body_len`-byte body.
fn check_message(meta: &[u8], body_len: usize, rows: u64) -> std::result::Result<(), String> {
    let fb = if meta[..4] == [0xff; 4] { &meta[8..] } else { &meta[4..] };
    let msg = arrow_ipc::root_as_message(fb).map_err(|e| format!("invalid message: {e}"))?;
    let rb = msg.header_as_record_batch().ok_or("not a record batch message")?;
    if rb.compression().is_some() {
        return Err("compressed, which cache files never are".into());
    }
    if u64::try_from(rb.length()).ok() != Some(rows) {
        return Err(format!("{} rows, expected {rows}", rb.length()));
    }
    let nodes = rb.nodes().ok_or("no field nodes")?;
    if nodes.len() != 1 || u64::try_from(nodes.get(0).length()).ok() != Some(rows) {
        return Err("field nodes do not match one column".into());
    }
    let buffers = rb.buffers().ok_or("no buffers")?;
    for b in buffers.iter() {
        let ok = usize::try_from(b.offset())
            .ok()
            .zip(usize::try_from(b.length()).ok())
            .and_then(|(o, l)| o.checked_add(l))
            .is_some_and(|end| end <= body_len);
        if !ok {
            return Err("a buffer lies outside the message body".into());
        }
    }
    Ok(())
}

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The temporary-file prefix of a column's cache file (`.<file>.tmp.`), for writing and for removing leftovers.
fn tmp_prefix(file_name: &str) -> String {
    format!(".{file_name}.tmp.")
}

/// Writes a cached column to a temporary file in the cache directory, then renames it into place.
pub(crate) struct CacheFileWriter {
    tmp: PathBuf,
    dest: PathBuf,
    schema: SchemaRef,
    writer: Option<FileWriter<CrcWriter<BufWriter<File>>>>,
    /// Whether the file was moved into place (else dropping the writer removes the temporary file).
    committed: bool,
}

/// A write of the cache file failing: the file system's error as such (a full disk is an `OSError` naming the file,
/// with what to do), Arrow's own as Arrow's.
fn write_error(tmp: &std::path::Path, doing: &str, e: arrow_schema::ArrowError) -> ObsError {
    match e {
        arrow_schema::ArrowError::IoError(_, cause) => ObsError::cache(tmp, "cannot write", cause),
        other => ObsError::arrow(format!("{doing} {}", tmp.display()), other),
    }
}

impl CacheFileWriter {
    /// Starts `dir/file_name` for `column`, removing temporary files that earlier, interrupted writers left.
    /// The caller holds the column's lock.
    pub(crate) fn create(dir: &Path, file_name: &str, column: &ObsColumn) -> Result<Self> {
        let prefix = tmp_prefix(file_name);
        if let Ok(entries) = std::fs::read_dir(dir) {
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().starts_with(&prefix) {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        let n = TMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!("{prefix}{}.{n}", std::process::id()));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| ObsError::cache(&tmp, "cannot create a temporary cache file", e))?;
        let schema: SchemaRef = Arc::new(Schema::new(vec![column.field()]));
        let out =
            CrcWriter { inner: BufWriter::with_capacity(1 << 20, file), hasher: crc32fast::Hasher::new(), written: 0 };
        let writer = match FileWriter::try_new(out, &schema) {
            Ok(w) => w,
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                return Err(write_error(&tmp, "writing", e));
            }
        };
        Ok(CacheFileWriter { tmp, dest: dir.join(file_name), schema, writer: Some(writer), committed: false })
    }

    /// Appends one tile.
    pub(crate) fn write(&mut self, array: ArrayRef) -> Result<()> {
        let batch = RecordBatch::try_new(self.schema.clone(), vec![array])
            .map_err(|e| ObsError::arrow(format!("writing {}", self.tmp.display()), e))?;
        let w = self.writer.as_mut().expect("writer open until commit");
        w.write(&batch).map_err(|e| write_error(&self.tmp, "writing", e))
    }

    /// Finishes the file, syncs it and renames it into place.
    pub(crate) fn commit(mut self) -> Result<()> {
        let mut w = self.writer.take().expect("writer open until commit");
        let out = w.get_ref();
        let checksum = format!("{}:{:08x}", out.written, out.hasher.clone().finalize());
        w.write_metadata(CHECKSUM_KEY, checksum);
        w.finish().map_err(|e| write_error(&self.tmp, "finishing", e))?;
        let mut buf = w.into_inner().map_err(|e| write_error(&self.tmp, "finishing", e))?.inner;
        buf.flush().map_err(|e| ObsError::cache(&self.tmp, "cannot write", e))?;
        let file = buf.into_inner().map_err(|e| ObsError::cache(&self.tmp, "cannot write", e.into_error()))?;
        file.sync_all().map_err(|e| ObsError::cache(&self.tmp, "cannot sync", e))?;
        drop(file);
        std::fs::rename(&self.tmp, &self.dest)
            .map_err(|e| ObsError::cache(&self.dest, "cannot move the new cache file into place", e))?;
        self.committed = true;
        if let Some(dir) = self.dest.parent()
            && let Ok(d) = File::open(dir)
        {
            let _ = d.sync_all();
        }
        Ok(())
    }
}

impl Drop for CacheFileWriter {
    fn drop(&mut self) {
        if !self.committed {
            self.writer = None;
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// An exclusive lock on a lock file, held by a helper thread until dropped (so async code never blocks on it).
#[derive(Debug)]
pub(crate) struct FileLock {
    _release: std::sync::mpsc::Sender<()>,
}

impl FileLock {
    /// Waits for the exclusive lock on `path` (created if needed). Locks are per open file, so two threads of one
    /// process exclude each other just like two processes do.
    pub(crate) async fn acquire(path: PathBuf) -> Result<FileLock> {
        let (locked_tx, locked_rx) = tokio::sync::oneshot::channel::<std::io::Result<()>>();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let p = path.clone();
        std::thread::Builder::new()
            .name("dct-obs-lock".into())
            .spawn(move || {
                let file = match OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&p) {
                    Ok(f) => f,
                    Err(e) => {
                        let _ = locked_tx.send(Err(e));
                        return;
                    }
                };
                let mut lock = fd_lock::RwLock::new(file);
                match lock.write() {
                    Ok(_guard) => {
                        if locked_tx.send(Ok(())).is_ok() {
                            // Held until the FileLock (the sender) is dropped.
                            let _ = release_rx.recv();
                        }
                    }
                    Err(e) => {
                        let _ = locked_tx.send(Err(e));
                    }
                }
            })
            .map_err(|e| ObsError::cache(&path, "cannot start the lock thread", e))?;
        match locked_rx.await {
            Ok(Ok(())) => Ok(FileLock { _release: release_tx }),
            Ok(Err(e)) => Err(ObsError::cache(&path, "cannot lock", e)),
            Err(_) => Err(ObsError::Internal(format!("the lock thread for {} stopped", path.display()))),
        }
    }
}

/// A cached column file mapped into memory, read-only.
#[allow(unsafe_code)] // the one memory map of this crate
fn map_file(file: &std::fs::File) -> std::io::Result<memmap2::Mmap> {
    // SAFETY: the file is mapped read-only. Cache files are only ever replaced by rename or unlinked, never
    // truncated or written in place, so the mapped pages stay valid for the mapping's lifetime.
    unsafe { memmap2::Mmap::map(file) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cache file that cannot be finished (here: its place is taken by a folder) leaves no temporary file, and
    /// a file system's error on writing is the cache's I/O error (an `OSError` in Python), not Arrow's.
    #[test]
    fn a_cache_file_that_fails_leaves_nothing_and_says_what_the_file_system_said() {
        let dir = tempfile::tempdir().unwrap();
        let column = crate::ObsColumn::plain("n", crate::ArrowType::Int64);
        std::fs::create_dir_all(dir.path().join("n.arrow/in-the-way")).unwrap();
        let mut w = CacheFileWriter::create(dir.path(), "n.arrow", &column).unwrap();
        w.write(Arc::new(arrow_array::Int64Array::from(vec![1, 2, 3]))).unwrap();
        let e = w.commit().unwrap_err();
        assert!(matches!(e, ObsError::Cache { .. }), "{e:?}");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, ["n.arrow"], "the temporary file is gone");
        let full = arrow_schema::ArrowError::IoError(
            "No space left on device".into(),
            std::io::Error::from(std::io::ErrorKind::StorageFull),
        );
        let e = write_error(Path::new("/c/.n.arrow.tmp.1.0"), "finishing", full);
        assert!(
            matches!(&e, ObsError::Cache { cause, .. } if cause.kind() == std::io::ErrorKind::StorageFull),
            "{e:?}"
        );
    }

    #[test]
    fn quotes_like_python() {
        // urllib.parse.quote(s, safe="") in CPython 3.11.
        assert_eq!(quote_column_name("cell_type"), "cell_type");
        assert_eq!(quote_column_name("a b/c%"), "a%20b%2Fc%25");
        assert_eq!(quote_column_name("na\u{ef}ve~.-"), "na%C3%AFve~.-");
        assert_eq!(quote_column_name(".."), "..");
    }

    #[test]
    fn long_column_names_get_short_distinct_file_names() {
        assert_eq!(column_file_name("cell type"), "cell%20type.arrow");
        let (a, b) = ("\u{e9}".repeat(100), format!("{}x", "\u{e9}".repeat(100)));
        let (fa, fb) = (column_file_name(&a), column_file_name(&b));
        assert!(fa.len() <= 206 && fb.len() <= 206, "{fa}");
        assert_ne!(fa, fb);
        let prefix = fa.split('~').next().unwrap();
        assert!(prefix.starts_with("%C3%A9") && prefix.len() % 6 == 0, "whole characters: {fa}");
        assert_eq!(column_file_name(&a), fa, "the same name, the same file");
    }

    #[test]
    fn cache_root_precedence() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| OsString::from(v))
        };
        let all: &[(&str, &str)] = &[(CACHE_ENV, "/c"), ("XDG_CACHE_HOME", "/x"), ("HOME", "/h")];
        assert_eq!(resolve_cache_root(Some(Path::new("/arg")), env(all)).unwrap(), PathBuf::from("/arg"));
        assert_eq!(resolve_cache_root(None, env(all)).unwrap(), PathBuf::from("/c"));
        let no_env: &[(&str, &str)] = &[(CACHE_ENV, ""), ("XDG_CACHE_HOME", "/x"), ("HOME", "/h")];
        assert_eq!(resolve_cache_root(None, env(no_env)).unwrap(), PathBuf::from("/x/deltacells"));
        let home: &[(&str, &str)] = &[("HOME", "/h")];
        assert_eq!(resolve_cache_root(None, env(home)).unwrap(), PathBuf::from("/h/.cache/deltacells"));
        assert!(matches!(resolve_cache_root(None, env(&[])), Err(ObsError::NoCacheDir)));
    }
}
