//! Thin, defensive wrapper over `hdf5-pure`: every call names the file and object in its error, library panics
//! become errors, and whole-dataset reads are bounded by what the file could possibly hold.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use hdf5_pure::{AttrValue, DType, Dataset, File, Group, VlenStringReadOptions};

use crate::error::InputError;

/// Deflate cannot expand data by more than about 1032:1, and LZF far less. A dataset that claims more decompressed
/// bytes than `file size * MAX_EXPANSION + SLACK` cannot be backed by real data (it could only be unwritten fill), so
/// it is refused before any buffer is sized for it.
const MAX_EXPANSION: u64 = 1100;
const SLACK: u64 = 1 << 20;

/// Elements per HDF5 read call when streaming a range of a 1-D dataset: bounds the temporary buffers of one read.
pub(crate) const READ_STEP: u64 = 1 << 20;

/// Bytes per cached block of [`BlockSource`].
const BLOCK_BYTES: usize = 64 * 1024;
/// Blocks kept by one [`BlockSource`] (2 MiB per open file).
const CACHED_BLOCKS: usize = 32;

/// The file as `hdf5-pure` reads it: positioned reads (no seek, no lock on unix) through a small LRU cache of
/// 64 KiB blocks.
///
/// `hdf5-pure` reads metadata, chunk-index nodes and every variable-length string (a gene or cell name) with one
/// read call each; without a cache, opening an h5ad with 30k genes costs hundreds of thousands of system calls.
/// Reads of a block or more bypass the cache (they are chunk payloads, read once).
struct BlockSource {
    file: std::fs::File,
    len: u64,
    /// Most recently used last: (block index, bytes).
    cache: std::sync::Mutex<Vec<(u64, Box<[u8]>)>>,
    /// Serializes seek + read where positioned reads are not available.
    #[cfg(not(unix))]
    seek_lock: std::sync::Mutex<()>,
}

impl BlockSource {
    fn new(file: std::fs::File, len: u64) -> Self {
        BlockSource {
            file,
            len,
            cache: std::sync::Mutex::new(Vec::with_capacity(CACHED_BLOCKS)),
            #[cfg(not(unix))]
            seek_lock: std::sync::Mutex::new(()),
        }
    }

    #[cfg(unix)]
    fn pread(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(&self.file, buf, offset)
    }

    #[cfg(not(unix))]
    fn pread(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        use std::io::{Read, Seek, SeekFrom};
        let _held = self.seek_lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut f = &self.file;
        f.seek(SeekFrom::Start(offset))?;
        f.read_exact(buf)
    }
}

impl hdf5_pure::Source for BlockSource {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), hdf5_pure::FormatError> {
        let end = offset
            .checked_add(buf.len() as u64)
            .ok_or(hdf5_pure::FormatError::OffsetOverflow { offset, length: buf.len() as u64 })?;
        if end > self.len {
            return Err(hdf5_pure::FormatError::UnexpectedEof {
                expected: usize::try_from(end).unwrap_or(usize::MAX),
                available: usize::try_from(self.len).unwrap_or(usize::MAX),
            });
        }
        let io = |e: std::io::Error| hdf5_pure::FormatError::Source(e.to_string());
        if buf.len() >= BLOCK_BYTES {
            return self.pread(offset, buf).map_err(io);
        }
        let mut cache = self.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Fast path: consecutive small reads (one per variable-length string) mostly hit the last block used.
        let within = (offset % BLOCK_BYTES as u64) as usize;
        if let Some((b, bytes)) = cache.last()
            && *b == offset / BLOCK_BYTES as u64
            && within + buf.len() <= BLOCK_BYTES
        {
            buf.copy_from_slice(&bytes[within..within + buf.len()]);
            return Ok(());
        }
        let mut done = 0usize;
        while done < buf.len() {
            let at = offset + done as u64;
            let block = at / BLOCK_BYTES as u64;
            let pos = match cache.iter().position(|(b, _)| *b == block) {
                Some(p) => {
                    let hit = cache.remove(p);
                    cache.push(hit);
                    cache.len() - 1
                }
                None => {
                    let start = block * BLOCK_BYTES as u64;
                    let n = (self.len - start).min(BLOCK_BYTES as u64) as usize;
                    let mut bytes = if cache.len() >= CACHED_BLOCKS {
                        let (_, old) = cache.remove(0);
                        old
                    } else {
                        vec![0u8; BLOCK_BYTES].into_boxed_slice()
                    };
                    if let Err(e) = self.pread(start, &mut bytes[..n]) {
                        return Err(io(e));
                    }
                    cache.push((block, bytes));
                    cache.len() - 1
                }
            };
            let within = (at % BLOCK_BYTES as u64) as usize;
            let take = (BLOCK_BYTES - within).min(buf.len() - done);
            buf[done..done + take].copy_from_slice(&cache[pos].1[within..within + take]);
            done += take;
        }
        Ok(())
    }
}

/// What an HDF5 path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Node {
    Group,
    Dataset,
    Absent,
}

/// The numeric class of a dataset, which decides how its values are decoded without loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ElemKind {
    Float,
    Signed,
    Unsigned,
}

/// Values decoded losslessly from a numeric dataset.
#[derive(Debug, Clone)]
pub(crate) enum Values {
    Float(Vec<f64>),
    Signed(Vec<i64>),
    Unsigned(Vec<u64>),
}

impl Values {
    pub(crate) fn new(kind: ElemKind) -> Self {
        match kind {
            ElemKind::Float => Values::Float(Vec::new()),
            ElemKind::Signed => Values::Signed(Vec::new()),
            ElemKind::Unsigned => Values::Unsigned(Vec::new()),
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            Values::Float(v) => v.len(),
            Values::Signed(v) => v.len(),
            Values::Unsigned(v) => v.len(),
        }
    }

    pub(crate) fn clear(&mut self) {
        match self {
            Values::Float(v) => v.clear(),
            Values::Signed(v) => v.clear(),
            Values::Unsigned(v) => v.clear(),
        }
    }

    /// The `k`-th value as a count, or the value formatted and why it is not one.
    pub(crate) fn count(&self, k: usize) -> Result<u32, (String, &'static str)> {
        match self {
            Values::Float(v) => crate::block::count_from_f64(v[k]).map_err(|r| (v[k].to_string(), r)),
            Values::Signed(v) => crate::block::count_from_i64(v[k]).map_err(|r| (v[k].to_string(), r)),
            Values::Unsigned(v) => crate::block::count_from_u64(v[k]).map_err(|r| (v[k].to_string(), r)),
        }
    }
}

/// An open HDF5 file and the facts needed to bound reads from it.
#[derive(Debug)]
pub(crate) struct H5 {
    pub(crate) file: File,
    pub(crate) path: PathBuf,
    pub(crate) size: u64,
    /// A second handle for [`FastChunks`] reads (positioned reads from several threads).
    pub(crate) raw: std::fs::File,
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

/// Runs a library call, turning its error or panic into an [`InputError::Hdf5`] naming `path` and `object`.
pub(crate) fn guard<T>(
    path: &Path,
    object: &str,
    f: impl FnOnce() -> Result<T, hdf5_pure::Error>,
) -> Result<T, InputError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => {
            Err(InputError::Hdf5 { path: path.to_path_buf(), object: object.to_string(), message: e.to_string() })
        }
        Err(p) => Err(InputError::Hdf5 {
            path: path.to_path_buf(),
            object: object.to_string(),
            message: format!("the HDF5 reader failed internally: {}", panic_message(p.as_ref())),
        }),
    }
}

/// Joins HDF5 path components, skipping empty ones.
pub(crate) fn join(parent: &str, child: &str) -> String {
    match (parent.trim_matches('/'), child.trim_matches('/')) {
        ("", c) => c.to_string(),
        (p, "") => p.to_string(),
        (p, c) => format!("{p}/{c}"),
    }
}

/// A string attribute value, whatever string encoding the writer chose.
pub(crate) fn attr_string(v: &AttrValue) -> Option<String> {
    match v {
        AttrValue::String(s)
        | AttrValue::AsciiString(s)
        | AttrValue::VarLenString(s)
        | AttrValue::VarLenAsciiString(s) => Some(s.clone()),
        AttrValue::StringSized { value, .. } | AttrValue::AsciiStringSized { value, .. } => Some(value.clone()),
        AttrValue::StringArray(a)
        | AttrValue::AsciiStringArray(a)
        | AttrValue::VarLenStringArray(a)
        | AttrValue::VarLenAsciiStringArray(a)
            if a.len() == 1 =>
        {
            Some(a[0].clone())
        }
        _ => None,
    }
}

/// An integer-array attribute value (e.g. a `shape`), whatever integer width the writer chose.
pub(crate) fn attr_ints(v: &AttrValue) -> Option<Vec<i128>> {
    fn conv<T: Copy + Into<i128>>(a: &[T]) -> Vec<i128> {
        a.iter().map(|&x| x.into()).collect()
    }
    Some(match v {
        AttrValue::I8Array(a) => conv(a),
        AttrValue::I16Array(a) => conv(a),
        AttrValue::I32Array(a) => conv(a),
        AttrValue::I64Array(a) => conv(a),
        AttrValue::U8Array(a) => conv(a),
        AttrValue::U16Array(a) => conv(a),
        AttrValue::U32Array(a) => conv(a),
        AttrValue::U64Array(a) => conv(a),
        AttrValue::I32(x) => vec![(*x).into()],
        AttrValue::I64(x) => vec![(*x).into()],
        AttrValue::U32(x) => vec![(*x).into()],
        AttrValue::U64(x) => vec![(*x).into()],
        _ => return None,
    })
}

/// A boolean attribute value (h5py stores numpy bools as an enum over int8).
pub(crate) fn attr_bool(v: &AttrValue) -> Option<bool> {
    match v {
        AttrValue::I8(x) => Some(*x != 0),
        AttrValue::U8(x) => Some(*x != 0),
        AttrValue::I32(x) => Some(*x != 0),
        AttrValue::I64(x) => Some(*x != 0),
        _ => None,
    }
}

impl H5 {
    /// Opens `path` lazily: metadata and chunks are fetched as they are needed.
    pub(crate) fn open(path: &Path) -> Result<Self, InputError> {
        let size = std::fs::metadata(path)
            .map_err(|source| InputError::Io { path: path.to_path_buf(), what: "opening".into(), cause: source })?
            .len();
        let handle = std::fs::File::open(path).map_err(|source| InputError::Io {
            path: path.to_path_buf(),
            what: "opening".into(),
            cause: source,
        })?;
        let raw = handle.try_clone().map_err(|source| InputError::Io {
            path: path.to_path_buf(),
            what: "opening".into(),
            cause: source,
        })?;
        let file = guard(path, "/", || File::from_source(BlockSource::new(handle, size)))?;
        Ok(H5 { file, path: path.to_path_buf(), size, raw })
    }

    pub(crate) fn guard<T>(
        &self,
        object: &str,
        f: impl FnOnce() -> Result<T, hdf5_pure::Error>,
    ) -> Result<T, InputError> {
        guard(&self.path, object, f)
    }

    pub(crate) fn group(&self, p: &str) -> Result<Group, InputError> {
        if p.trim_matches('/').is_empty() {
            return Ok(self.file.root());
        }
        self.guard(p, || self.file.group(p))
    }

    pub(crate) fn dataset(&self, p: &str) -> Result<Dataset, InputError> {
        self.guard(p, || self.file.dataset(p))
    }

    /// Whether `p` is a group, a dataset or nothing (a missing parent counts as nothing).
    pub(crate) fn node(&self, p: &str) -> Result<Node, InputError> {
        let p = p.trim_matches('/');
        if p.is_empty() {
            return Ok(Node::Group);
        }
        let (parent, name) = match p.rsplit_once('/') {
            Some((a, b)) => (a, b),
            None => ("", p),
        };
        match self.node(parent)? {
            Node::Group => {}
            _ => return Ok(Node::Absent),
        }
        let g = self.group(parent)?;
        if self.guard(parent, || g.groups())?.iter().any(|n| n == name) {
            return Ok(Node::Group);
        }
        if self.guard(parent, || g.datasets())?.iter().any(|n| n == name) {
            return Ok(Node::Dataset);
        }
        Ok(Node::Absent)
    }

    /// The attributes of the group or dataset at `p` (empty if it does not exist).
    pub(crate) fn attrs(&self, p: &str) -> Result<HashMap<String, AttrValue>, InputError> {
        match self.node(p)? {
            Node::Group => {
                let g = self.group(p)?;
                self.guard(p, || g.attrs())
            }
            Node::Dataset => {
                let d = self.dataset(p)?;
                self.guard(p, || d.attrs())
            }
            Node::Absent => Ok(HashMap::new()),
        }
    }

    /// The `encoding-type` attribute of the object at `p`, if any.
    pub(crate) fn encoding_type(&self, p: &str) -> Result<Option<String>, InputError> {
        Ok(self.attrs(p)?.get("encoding-type").and_then(attr_string))
    }

    pub(crate) fn shape(&self, ds: &Dataset, object: &str) -> Result<Vec<u64>, InputError> {
        self.guard(object, || ds.shape())
    }

    /// The length of a 1-D dataset.
    pub(crate) fn len_1d(&self, ds: &Dataset, object: &str) -> Result<u64, InputError> {
        let shape = self.shape(ds, object)?;
        match shape.as_slice() {
            [n] => Ok(*n),
            _ => Err(self.malformed(object, format!("expected a 1-D dataset, found shape {shape:?}"))),
        }
    }

    pub(crate) fn malformed(&self, object: &str, detail: impl Into<String>) -> InputError {
        InputError::Malformed { path: self.path.clone(), object: object.to_string(), detail: detail.into() }
    }

    pub(crate) fn unsupported(&self, object: &str, detail: impl Into<String>) -> InputError {
        InputError::Unsupported { path: self.path.clone(), object: object.to_string(), detail: detail.into() }
    }

    /// Refuses a claim of `n_elems` elements of `elem_size` bytes that the file could not hold.
    pub(crate) fn check_claim(&self, object: &str, n_elems: u64, elem_size: u64) -> Result<(), InputError> {
        let bytes = n_elems.checked_mul(elem_size.max(1));
        let bound = self.size.saturating_mul(MAX_EXPANSION).saturating_add(SLACK);
        match bytes {
            Some(b) if b <= bound && n_elems <= usize::MAX as u64 / 16 => Ok(()),
            _ => Err(InputError::TooLarge {
                path: self.path.clone(),
                object: object.to_string(),
                detail: format!(
                    "it claims {n_elems} elements of {elem_size} bytes, more than a {}-byte file can hold",
                    self.size
                ),
            }),
        }
    }

    /// The numeric class of a dataset's elements.
    pub(crate) fn elem_kind(&self, ds: &Dataset, object: &str) -> Result<ElemKind, InputError> {
        let dt = self.guard(object, || ds.dtype())?;
        Ok(match dt {
            DType::F32 | DType::F64 => ElemKind::Float,
            DType::I8 | DType::I16 | DType::I32 | DType::I64 => ElemKind::Signed,
            DType::U8 | DType::U16 | DType::U32 | DType::U64 | DType::Enum(_) => ElemKind::Unsigned,
            other => {
                return Err(self.unsupported(object, format!("expected a numeric dataset, found type {other}")));
            }
        })
    }

    /// Reads rows `start .. start + count` of a dataset (1-D: elements; 2-D: rows of the leading dimension) and
    /// appends them to `out`, whose variant must match the dataset's [`ElemKind`].
    pub(crate) fn read_rows_append(
        &self,
        ds: &Dataset,
        object: &str,
        start: u64,
        count: u64,
        out: &mut Values,
    ) -> Result<(), InputError> {
        if count == 0 {
            return Ok(());
        }
        match out {
            Values::Float(v) => v.extend(self.guard(object, || ds.read_f64_rows(start, count))?),
            Values::Signed(v) => v.extend(self.guard(object, || ds.read_i64_rows(start, count))?),
            Values::Unsigned(v) => v.extend(self.guard(object, || ds.read_u64_rows(start, count))?),
        }
        Ok(())
    }

    /// Opens 1-D dataset `object` to be read whole, 8 bytes per entry: its length, checked against
    /// `expected_len` and against what the file can hold.
    fn whole_1d(&self, object: &str, expected_len: Option<u64>) -> Result<(Dataset, u64), InputError> {
        let ds = self.dataset(object)?;
        let n = self.len_1d(&ds, object)?;
        if let Some(e) = expected_len
            && e != n
        {
            return Err(self.malformed(object, format!("has {n} entries, expected {e}")));
        }
        self.check_claim(object, n, 8)?;
        Ok((ds, n))
    }

    /// Reads a whole 1-D integer dataset (an index or offset array) as `u64`, rejecting negative entries.
    pub(crate) fn read_index_array(&self, object: &str, expected_len: Option<u64>) -> Result<Vec<u64>, InputError> {
        let (ds, n) = self.whole_1d(object, expected_len)?;
        let kind = self.elem_kind(&ds, object)?;
        let mut out = Vec::with_capacity(n as usize);
        let mut buf = Values::new(kind);
        let mut start = 0;
        while start < n {
            let step = READ_STEP.min(n - start);
            buf.clear();
            self.read_rows_append(&ds, object, start, step, &mut buf)?;
            if buf.len() as u64 != step {
                return Err(self.malformed(object, format!("read {} entries at {start}, expected {step}", buf.len())));
            }
            match &buf {
                Values::Signed(v) => {
                    for (i, &x) in v.iter().enumerate() {
                        if x < 0 {
                            return Err(self.malformed(object, format!("entry {} is negative ({x})", start + i as u64)));
                        }
                        out.push(x as u64);
                    }
                }
                Values::Unsigned(v) => out.extend_from_slice(v),
                Values::Float(_) => {
                    return Err(self.unsupported(object, "expected an integer dataset, found floating point"));
                }
            }
            start += step;
        }
        Ok(out)
    }

    /// Reads a whole 1-D string dataset (fixed- or variable-length), bounded by the file size.
    pub(crate) fn read_strings(&self, object: &str, expected_len: Option<u64>) -> Result<Vec<String>, InputError> {
        let ds = self.dataset(object)?;
        let n = self.len_1d(&ds, object)?;
        if let Some(e) = expected_len
            && e != n
        {
            return Err(self.malformed(object, format!("has {n} entries, expected {e}")));
        }
        let elem = self.guard(object, || ds.element_size())?;
        self.check_claim(object, n, elem.max(16))?;
        let dt = self.guard(object, || ds.dtype())?;
        match dt {
            DType::VariableLengthString => {
                if let Some(strings) = self.read_vl_strings_bulk(&ds, n) {
                    return Ok(strings);
                }
                let opts = VlenStringReadOptions::new()
                    .with_max_elements(n as usize)
                    .with_max_payload_bytes(usize::try_from(self.size).unwrap_or(usize::MAX));
                self.guard(object, || ds.read_vlen_strings(opts))
            }
            DType::String => self.guard(object, || ds.read_string()),
            other => Err(self.unsupported(object, format!("expected a string dataset, found type {other}"))),
        }
    }

    /// Reads a whole 1-D numeric dataset losslessly (float16 as floats: pandas keeps `float16` obs columns so).
    pub(crate) fn read_values(&self, object: &str, expected_len: Option<u64>) -> Result<Values, InputError> {
        let (ds, n) = self.whole_1d(object, expected_len)?;
        if let Some(little_endian) = half_float_order(&self.guard(object, || ds.dtype())?) {
            return self.read_half_floats(&ds, object, n, little_endian);
        }
        let mut out = Values::new(self.elem_kind(&ds, object)?);
        let mut start = 0;
        while start < n {
            let step = READ_STEP.min(n - start);
            self.read_rows_append(&ds, object, start, step, &mut out)?;
            start += step;
        }
        if out.len() as u64 != n {
            return Err(self.malformed(object, format!("read {} entries, expected {n}", out.len())));
        }
        Ok(out)
    }

    /// The `n` half floats of 1-D dataset `ds`, read as raw 2-byte elements (`little_endian` or not), widened.
    fn read_half_floats(&self, ds: &Dataset, object: &str, n: u64, little_endian: bool) -> Result<Values, InputError> {
        let mut out = Vec::with_capacity(n as usize);
        let mut start = 0;
        while start < n {
            let step = READ_STEP.min(n - start);
            let raw = self.guard(object, || ds.read_raw_rows(start, step))?;
            if raw.len() as u64 != 2 * step {
                return Err(
                    self.malformed(object, format!("read {} bytes of float16 rows, expected {}", raw.len(), 2 * step))
                );
            }
            out.extend(raw.chunks_exact(2).map(|b| {
                let bits =
                    if little_endian { u16::from_le_bytes([b[0], b[1]]) } else { u16::from_be_bytes([b[0], b[1]]) };
                f64::from(half::f16::from_bits(bits))
            }));
            start += step;
        }
        Ok(Values::Float(out))
    }
}

/// `Some(little endian?)` for a dataset of IEEE half floats (float16), which the HDF5 reader has no numeric view of.
pub(crate) fn half_float_order(dt: &DType) -> Option<bool> {
    use hdf5_pure::{Datatype, DatatypeByteOrder};
    match dt {
        DType::Other(t) => match **t {
            Datatype::FloatingPoint { size: 2, byte_order: DatatypeByteOrder::LittleEndian, .. } => Some(true),
            Datatype::FloatingPoint { size: 2, byte_order: DatatypeByteOrder::BigEndian, .. } => Some(false),
            _ => None,
        },
        _ => None,
    }
}
