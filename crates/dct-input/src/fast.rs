//! The fast chunk reader: 1-D chunked `data`/`indices` datasets read, inflated and decoded here, many chunks at a
//! time across the rayon pool, instead of one chunk at a time through `hdf5-pure`. Besides the lossless decode into
//! [`Values`], it converts elements straight to `u32` counts or gene indices while they are hot in cache
//! ([`H5::read_fast_u32`]), which is what the converter reads.

use std::panic::{AssertUnwindSafe, catch_unwind};

use dct_format::MAX_COUNT;
use hdf5_pure::Dataset;
use rayon::prelude::*;

use crate::error::InputError;
use crate::h5::{H5, Values};

#[cfg(unix)]
pub(crate) fn read_exact_at(file: &std::fs::File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

#[cfg(not(unix))]
pub(crate) fn read_exact_at(_file: &std::fs::File, _buf: &mut [u8], _offset: u64) -> std::io::Result<()> {
    // `fast_chunks` never qualifies a dataset off unix.
    Err(std::io::Error::other("positioned reads are not available on this platform"))
}

/// Decoding little-endian elements into a [`Values`] vector's element type, losslessly.
trait FromElem: Copy + Send + Sync {
    fn decode(elem: Elem, bytes: &[u8], out: &mut [Self]);
}

macro_rules! decode_as {
    ($bytes:expr, $out:expr, $t:ty, $n:expr, $conv:expr) => {
        for (o, b) in $out.iter_mut().zip($bytes.chunks_exact($n)) {
            *o = $conv(<$t>::from_le_bytes(b.try_into().expect("element size")));
        }
    };
}

impl FromElem for f64 {
    fn decode(elem: Elem, bytes: &[u8], out: &mut [f64]) {
        match elem {
            Elem::F32 => decode_as!(bytes, out, f32, 4, f64::from),
            Elem::F64 => decode_as!(bytes, out, f64, 8, |x| x),
            _ => unreachable!("float datasets decode as floats"),
        }
    }
}

impl FromElem for i64 {
    fn decode(elem: Elem, bytes: &[u8], out: &mut [i64]) {
        match elem {
            Elem::I8 => decode_as!(bytes, out, i8, 1, i64::from),
            Elem::I16 => decode_as!(bytes, out, i16, 2, i64::from),
            Elem::I32 => decode_as!(bytes, out, i32, 4, i64::from),
            Elem::I64 => decode_as!(bytes, out, i64, 8, |x| x),
            _ => unreachable!("signed datasets decode as signed"),
        }
    }
}

impl FromElem for u64 {
    fn decode(elem: Elem, bytes: &[u8], out: &mut [u64]) {
        match elem {
            Elem::U8 => decode_as!(bytes, out, u8, 1, u64::from),
            Elem::U16 => decode_as!(bytes, out, u16, 2, u64::from),
            Elem::U32 => decode_as!(bytes, out, u32, 4, u64::from),
            Elem::U64 => decode_as!(bytes, out, u64, 8, |x| x),
            _ => unreachable!("unsigned datasets decode as unsigned"),
        }
    }
}

/// Element types [`FastChunks`] decodes itself (little-endian, full precision, IEEE floats).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Elem {
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
}

/// A 1-D chunked dataset whose chunks are read and inflated here, several at a time across the rayon pool, instead
/// of one at a time through `hdf5-pure`: its chunk index is read once, every chunk is allocated and unfiltered-or-
/// deflated (optionally shuffled), and its elements are plain little-endian numbers. Anything else (other
/// filters, missing chunks, big-endian or odd types, other platforms) is read through `hdf5-pure` as before. The
/// values are the same either way; this only spreads gzip inflation over the cores.
#[derive(Debug)]
pub(crate) struct FastChunks {
    len: u64,
    chunk_elems: u64,
    elem: Elem,
    size: usize,
    shuffle: bool,
    deflate: bool,
    /// File address and stored bytes of chunk `k` (elements `k * chunk_elems ..`).
    chunks: Vec<(u64, u64)>,
}

/// One chunk's job of a fast read (chunk, first element, end element) and the output it fills.
type Piece<'j, 'o, T> = (&'j (usize, u64, u64), &'o mut [T]);

/// Chunks handled per rayon task at least, so that small windows stay on one thread.
const CHUNKS_PER_TASK: usize = 4;

/// Work scratch of one task of a fast read (one per thread, reused: see [`with_scratch`]).
struct ChunkScratch {
    stored: Vec<u8>,
    raw: Vec<u8>,
    unshuffled: Vec<u8>,
    inflater: libdeflater::Decompressor,
}

impl Default for ChunkScratch {
    fn default() -> Self {
        ChunkScratch {
            stored: Vec::new(),
            raw: Vec::new(),
            unshuffled: Vec::new(),
            inflater: libdeflater::Decompressor::new(),
        }
    }
}

thread_local! {
    /// This thread's chunk scratch. A fresh one per task cost an allocation of each buffer and of a libdeflate
    /// decompressor for every few chunks (about 8% of a converter's first pass in malloc and free). Its buffers
    /// are bounded by the largest chunk read, which `fast_chunks` bounds.
    static SCRATCH: std::cell::RefCell<ChunkScratch> = std::cell::RefCell::new(ChunkScratch::default());
}

/// Scratch buffers larger than this are freed after use rather than kept for the thread's next read.
const SCRATCH_KEEP_BYTES: usize = 16 << 20;

/// Runs `f` with this thread's chunk scratch (or a fresh one, should it be in use further up the stack).
fn with_scratch<R>(f: impl FnOnce(&mut ChunkScratch) -> R) -> R {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut s) => {
            let r = f(&mut s);
            let s = &mut *s;
            for buf in [&mut s.stored, &mut s.raw, &mut s.unshuffled] {
                if buf.capacity() > SCRATCH_KEEP_BYTES {
                    *buf = Vec::new();
                }
            }
            r
        }
        Err(_) => f(&mut ChunkScratch::default()),
    })
}

/// What [`H5::read_fast_u32`] makes of each element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ToU32 {
    /// A count: a finite, integral value in `0 ..= 2^31 - 1` (`-0.0` is 0).
    Count,
    /// A gene index below the given number of genes.
    Gene(u64),
}

/// Converts little-endian elements of type `$t` (`$n` bytes) to `u32` with `$conv` (giving the value and whether
/// it is acceptable), branch-free per element; returns whether all were acceptable.
macro_rules! convert_as {
    ($bytes:expr, $out:expr, $t:ty, $n:expr, $conv:expr) => {{
        let mut ok = true;
        for (o, b) in $out.iter_mut().zip($bytes.chunks_exact($n)) {
            let (v, good): (u32, bool) = $conv(<$t>::from_le_bytes(b.try_into().expect("element size")));
            *o = v;
            ok &= good;
        }
        ok
    }};
}

impl ToU32 {
    /// Converts `bytes` (elements of type `elem`) into `out`; `false` if any element is not acceptable (the caller
    /// then reads the range again through [`Values`] to say which and why).
    fn convert(self, elem: Elem, bytes: &[u8], out: &mut [u32]) -> bool {
        let max = MAX_COUNT;
        match self {
            ToU32::Count => match elem {
                // `as` saturates (NaN to 0), so a value is integral and in range exactly when it survives the
                // round trip and is at most 2^31 - 1.
                Elem::F32 => convert_as!(bytes, out, f32, 4, |x: f32| {
                    let c = x as u32;
                    (c, c as f32 == x && c <= max)
                }),
                Elem::F64 => convert_as!(bytes, out, f64, 8, |x: f64| {
                    let c = x as u32;
                    (c, f64::from(c) == x && c <= max)
                }),
                Elem::I8 => convert_as!(bytes, out, i8, 1, |x: i8| (x as u32, x >= 0)),
                Elem::I16 => convert_as!(bytes, out, i16, 2, |x: i16| (x as u32, x >= 0)),
                Elem::I32 => convert_as!(bytes, out, i32, 4, |x: i32| (x as u32, x >= 0)),
                Elem::I64 => convert_as!(bytes, out, i64, 8, |x: i64| (x as u32, (0..=i64::from(max)).contains(&x))),
                Elem::U8 => convert_as!(bytes, out, u8, 1, |x: u8| (u32::from(x), true)),
                Elem::U16 => convert_as!(bytes, out, u16, 2, |x: u16| (u32::from(x), true)),
                Elem::U32 => convert_as!(bytes, out, u32, 4, |x: u32| (x, x <= max)),
                Elem::U64 => convert_as!(bytes, out, u64, 8, |x: u64| (x as u32, x <= u64::from(max))),
            },
            ToU32::Gene(n) => {
                // Gene indices are below n_genes <= 2^32 after this check, so they fit a u32.
                let n = n.min(1 << 32);
                match elem {
                    Elem::F32 | Elem::F64 => false,
                    Elem::I8 => convert_as!(bytes, out, i8, 1, |x: i8| (x as u32, (x as i64 as u64) < n)),
                    Elem::I16 => convert_as!(bytes, out, i16, 2, |x: i16| (x as u32, (x as i64 as u64) < n)),
                    Elem::I32 => convert_as!(bytes, out, i32, 4, |x: i32| (x as u32, (x as i64 as u64) < n)),
                    Elem::I64 => convert_as!(bytes, out, i64, 8, |x: i64| (x as u32, (x as u64) < n)),
                    Elem::U8 => convert_as!(bytes, out, u8, 1, |x: u8| (u32::from(x), u64::from(x) < n)),
                    Elem::U16 => convert_as!(bytes, out, u16, 2, |x: u16| (u32::from(x), u64::from(x) < n)),
                    Elem::U32 => convert_as!(bytes, out, u32, 4, |x: u32| (x, u64::from(x) < n)),
                    Elem::U64 => convert_as!(bytes, out, u64, 8, |x: u64| (x as u32, x < n)),
                }
            }
        }
    }
}

/// (chunk, first element, end element) of each chunk that elements `start .. end` (non-empty) touch.
fn chunk_jobs(fc: &FastChunks, start: u64, end: u64) -> Vec<(usize, u64, u64)> {
    let c = fc.chunk_elems;
    (start / c..=(end - 1) / c).map(|k| (k as usize, start.max(k * c), end.min((k + 1) * c))).collect()
}

impl H5 {
    /// The fast chunk reader for `ds`, if it qualifies (see [`FastChunks`]); `None` reads through `hdf5-pure`.
    pub(crate) fn fast_chunks(&self, ds: &Dataset) -> Option<FastChunks> {
        if !cfg!(unix) {
            return None;
        }
        catch_unwind(AssertUnwindSafe(|| self.fast_chunks_inner(ds))).ok().flatten()
    }

    fn fast_chunks_inner(&self, ds: &Dataset) -> Option<FastChunks> {
        use hdf5_pure::{Datatype, DatatypeByteOrder, FloatingPointLayout, Layout};
        let [len] = ds.shape().ok()?[..] else { return None };
        let Layout::Chunked { chunk_shape, .. } = ds.layout().ok()? else { return None };
        let [chunk_elems] = chunk_shape[..] else { return None };
        let elem = match ds.datatype().ok()? {
            Datatype::FloatingPoint { size, byte_order: DatatypeByteOrder::LittleEndian, layout } => match size {
                4 if layout == FloatingPointLayout::IEEE754_BINARY32 => Elem::F32,
                8 if layout == FloatingPointLayout::IEEE754_BINARY64 => Elem::F64,
                _ => return None,
            },
            Datatype::FixedPoint { size, byte_order: DatatypeByteOrder::LittleEndian, layout } => {
                if layout.bit_offset != 0 || u32::from(layout.bit_precision) != size * 8 {
                    return None;
                }
                match (layout.signed, size) {
                    (true, 1) => Elem::I8,
                    (true, 2) => Elem::I16,
                    (true, 4) => Elem::I32,
                    (true, 8) => Elem::I64,
                    (false, 1) => Elem::U8,
                    (false, 2) => Elem::U16,
                    (false, 4) => Elem::U32,
                    (false, 8) => Elem::U64,
                    _ => return None,
                }
            }
            _ => return None,
        };
        let size = match elem {
            Elem::I8 | Elem::U8 => 1,
            Elem::I16 | Elem::U16 => 2,
            Elem::F32 | Elem::I32 | Elem::U32 => 4,
            Elem::F64 | Elem::I64 | Elem::U64 => 8,
        };
        let ids: Vec<u16> = ds.filter_pipeline().iter().map(|f| f.id).collect();
        let (shuffle, deflate) = match ids.as_slice() {
            [] => (false, false),
            [1] => (false, true),
            [2, 1] => (true, true),
            _ => return None,
        };
        if chunk_elems == 0 || chunk_elems.checked_mul(size as u64)? > 1 << 30 {
            return None;
        }
        let mut listed = ds.chunks().ok()?;
        listed.sort_by_key(|c| c.offset.first().copied().unwrap_or(u64::MAX));
        let n_chunks = len.div_ceil(chunk_elems);
        if listed.len() as u64 != n_chunks {
            return None;
        }
        let mut chunks = Vec::with_capacity(listed.len());
        for (k, c) in listed.iter().enumerate() {
            let fits = c.address.checked_add(c.storage_size).is_some_and(|end| end <= self.size);
            let raw_ok = deflate || c.storage_size == chunk_elems * size as u64;
            if c.offset != [k as u64 * chunk_elems] || c.filter_mask != 0 || !fits || !raw_ok {
                return None;
            }
            chunks.push((c.address, c.storage_size));
        }
        Some(FastChunks { len, chunk_elems, elem, size, shuffle, deflate, chunks })
    }

    /// Reads elements `start .. start + count` of a [`FastChunks`] dataset and appends them to `out` (the
    /// variant of its element kind), inflating the chunks on up to every core.
    pub(crate) fn read_fast(
        &self,
        fc: &FastChunks,
        object: &str,
        start: u64,
        count: u64,
        out: &mut Values,
    ) -> Result<(), InputError> {
        let end = start.checked_add(count).filter(|&e| e <= fc.len).ok_or_else(|| {
            self.malformed(object, format!("read of {count} entries at {start} is past its {} entries", fc.len))
        })?;
        let float = matches!(fc.elem, Elem::F32 | Elem::F64);
        let signed = matches!(fc.elem, Elem::I8 | Elem::I16 | Elem::I32 | Elem::I64);
        let fits = match out {
            Values::Float(_) => float,
            Values::Signed(_) => signed,
            Values::Unsigned(_) => !float && !signed,
        };
        if !fits {
            return Err(self.unsupported(object, "its element type changed between reads"));
        }
        if count == 0 {
            return Ok(());
        }
        let jobs = chunk_jobs(fc, start, end);
        let base = out.len();
        let elem = fc.elem;
        match out {
            Values::Float(v) => {
                v.resize(base + count as usize, 0.0);
                self.fan_out(fc, &jobs, &mut v[base..], |b, o| {
                    f64::decode(elem, b, o);
                    true
                })
            }
            Values::Signed(v) => {
                v.resize(base + count as usize, 0);
                self.fan_out(fc, &jobs, &mut v[base..], |b, o| {
                    i64::decode(elem, b, o);
                    true
                })
            }
            Values::Unsigned(v) => {
                v.resize(base + count as usize, 0);
                self.fan_out(fc, &jobs, &mut v[base..], |b, o| {
                    u64::decode(elem, b, o);
                    true
                })
            }
        }
        .map(|_| ())
        .map_err(|detail| self.malformed(object, detail))
    }

    /// Reads elements `start .. start + count` of a [`FastChunks`] dataset converted by `to` into `out` (resized
    /// to `count`). `Ok(false)` when some element is not acceptable (`out` then holds garbage): the caller reads the
    /// range again through [`Values`] to report which element and why.
    pub(crate) fn read_fast_u32(
        &self,
        fc: &FastChunks,
        object: &str,
        start: u64,
        count: u64,
        to: ToU32,
        out: &mut Vec<u32>,
    ) -> Result<bool, InputError> {
        let end = start.checked_add(count).filter(|&e| e <= fc.len).ok_or_else(|| {
            self.malformed(object, format!("read of {count} entries at {start} is past its {} entries", fc.len))
        })?;
        // Every element is overwritten below, so a buffer of the right length is reused without clearing it.
        out.resize(count as usize, 0);
        if count == 0 {
            return Ok(true);
        }
        let jobs = chunk_jobs(fc, start, end);
        let elem = fc.elem;
        self.fan_out(fc, &jobs, out, |b, o| to.convert(elem, b, o)).map_err(|detail| self.malformed(object, detail))
    }

    /// Splits `out` by chunk and decodes the chunks with `decode` (which says whether every element was
    /// acceptable) in tasks of a few chunks across the rayon pool.
    fn fan_out<T: Send>(
        &self,
        fc: &FastChunks,
        jobs: &[(usize, u64, u64)],
        out: &mut [T],
        decode: impl Fn(&[u8], &mut [T]) -> bool + Sync,
    ) -> Result<bool, String> {
        let mut pieces: Vec<Piece<'_, '_, T>> = Vec::with_capacity(jobs.len());
        let mut rest = out;
        for job in jobs {
            let (piece, tail) = std::mem::take(&mut rest).split_at_mut((job.2 - job.1) as usize);
            pieces.push((job, piece));
            rest = tail;
        }
        let work = |scratch: &mut ChunkScratch, group: &mut [Piece<'_, '_, T>]| -> Result<bool, String> {
            let mut ok = true;
            for (job, piece) in group.iter_mut() {
                let (k, lo, hi) = **job;
                let bytes = self.load_chunk(fc, k, scratch)?;
                let from = (lo - k as u64 * fc.chunk_elems) as usize * fc.size;
                let to = (hi - k as u64 * fc.chunk_elems) as usize * fc.size;
                ok &= decode(&bytes[from..to], piece);
            }
            Ok(ok)
        };
        if pieces.len() <= CHUNKS_PER_TASK {
            return with_scratch(|s| work(s, &mut pieces));
        }
        pieces
            .par_chunks_mut(CHUNKS_PER_TASK)
            .map(|group| with_scratch(|s| work(s, group)))
            .try_reduce(|| true, |a, b| Ok(a && b))
    }

    /// Reads, inflates and unshuffles chunk `k`: its `chunk_elems * size` bytes.
    fn load_chunk<'s>(&self, fc: &FastChunks, k: usize, s: &'s mut ChunkScratch) -> Result<&'s [u8], String> {
        let (address, stored) = fc.chunks[k];
        let want = fc.chunk_elems as usize * fc.size;
        s.stored.resize(stored as usize, 0);
        read_exact_at(&self.raw, &mut s.stored, address).map_err(|e| format!("reading chunk {k}: {e}"))?;
        let raw: &[u8] = if fc.deflate {
            s.raw.resize(want, 0);
            // libdeflate inflates a whole zlib stream into a buffer of known size (checking its Adler-32), about
            // 1.8x as fast as a streaming inflater on these small chunks.
            let n = s.inflater.zlib_decompress(&s.stored, &mut s.raw).map_err(|e| match e {
                libdeflater::DecompressionError::InsufficientSpace => {
                    format!("chunk {k} inflates to more than the chunk's {want} bytes")
                }
                libdeflater::DecompressionError::BadData => format!("chunk {k} does not inflate: corrupt data"),
            })?;
            if n != want {
                return Err(format!("chunk {k} inflates to {n} bytes, not the chunk's {want}"));
            }
            &s.raw
        } else {
            &s.stored
        };
        if !fc.shuffle || fc.size == 1 {
            return Ok(if fc.deflate { &s.raw } else { &s.stored });
        }
        let n = want / fc.size;
        s.unshuffled.resize(want, 0);
        for b in 0..fc.size {
            let plane = &raw[b * n..(b + 1) * n];
            for (i, &x) in plane.iter().enumerate() {
                s.unshuffled[i * fc.size + b] = x;
            }
        }
        Ok(&s.unshuffled)
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::h5::ElemKind;

    fn fixture(rel: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/inputs").join(rel)
    }

    /// The fast chunk reader gives exactly what `hdf5-pure` gives, for every range shape (inside one chunk,
    /// across chunks, the ragged end), for plain gzip and gzip + shuffle datasets.
    #[test]
    fn fast_chunk_reads_equal_the_library_reads() {
        let mut qualified = Vec::new();
        for (file, objects) in [
            ("pbmc200/pbmc200.h5ad", ["X/data", "X/indices"]),
            ("pbmc200/pbmc200_10x.h5", ["matrix/data", "matrix/indices"]),
            ("wu2020_200.h5ad", ["X/data", "X/indices"]),
        ] {
            let h5 = H5::open(&fixture(file)).unwrap();
            for object in objects {
                let ds = h5.dataset(object).unwrap();
                let Some(fc) = h5.fast_chunks(&ds) else { continue };
                qualified.push((file, object, fc.shuffle, fc.deflate));
                let n = h5.len_1d(&ds, object).unwrap();
                let c = fc.chunk_elems;
                let ranges =
                    [(0, n), (0, 1), (1, c.min(n - 1)), (c.saturating_sub(3), 7.min(n)), (n - 1, 1), (n / 3, n / 2)];
                for (start, count) in ranges {
                    let count = count.min(n - start);
                    let kind = h5.elem_kind(&ds, object).unwrap();
                    let (mut a, mut b) = (Values::new(kind), Values::new(kind));
                    h5.read_rows_append(&ds, object, start, count, &mut a).unwrap();
                    h5.read_fast(&fc, object, start, count, &mut b).unwrap();
                    assert_eq!(format!("{a:?}"), format!("{b:?}"), "{file} {object} {start}+{count}");
                    // The u32 conversion of the converter gives the same numbers as the checked one.
                    let to = if object.ends_with("data") { ToU32::Count } else { ToU32::Gene(u64::MAX) };
                    let mut c = Vec::new();
                    assert!(h5.read_fast_u32(&fc, object, start, count, to, &mut c).unwrap());
                    let want: Vec<u32> = (0..count as usize).map(|k| a.count(k).unwrap()).collect();
                    assert_eq!(c, want, "{file} {object} {start}+{count}");
                }
                assert!(h5.read_fast(&fc, object, n, 1, &mut Values::new(ElemKind::Float)).is_err());
            }
        }
        assert!(qualified.iter().any(|q| q.3), "a gzip fixture takes the fast path: {qualified:?}");
        eprintln!("fast path: {qualified:?}");
    }

    fn convert_one<T: Copy>(elem: Elem, to: ToU32, x: T, le: fn(T) -> Vec<u8>) -> Option<u32> {
        let mut out = [7u32];
        to.convert(elem, &le(x), &mut out).then_some(out[0])
    }

    /// The branch-free conversion accepts exactly the values the checked conversions accept, with the same
    /// result, at every boundary and for every element type.
    #[test]
    fn u32_conversion_agrees_with_the_count_checks() {
        use crate::block::{count_from_f64, count_from_i64, count_from_u64};
        let max = f64::from(MAX_COUNT);
        let floats = [
            0.0,
            -0.0,
            1.0,
            2.5,
            -1.0,
            65535.0,
            65536.0,
            16777217.0,
            max,
            max + 1.0,
            2147483520.0,
            4294967296.0,
            1e20,
            -1e20,
            0.1,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::MIN_POSITIVE,
        ];
        for &x in &floats {
            let want64 = count_from_f64(x).ok();
            assert_eq!(convert_one(Elem::F64, ToU32::Count, x, |v| v.to_le_bytes().to_vec()), want64, "f64 {x}");
            let x32 = x as f32;
            let want32 = count_from_f64(f64::from(x32)).ok();
            assert_eq!(convert_one(Elem::F32, ToU32::Count, x32, |v| v.to_le_bytes().to_vec()), want32, "f32 {x32}");
        }
        let ints: [i64; 9] = [0, 1, -1, 127, -128, 65535, i64::from(MAX_COUNT), i64::from(MAX_COUNT) + 1, i64::MIN];
        for &x in &ints {
            let want = count_from_i64(x).ok();
            assert_eq!(convert_one(Elem::I64, ToU32::Count, x, |v| v.to_le_bytes().to_vec()), want, "i64 {x}");
            if let Ok(v) = i32::try_from(x) {
                assert_eq!(convert_one(Elem::I32, ToU32::Count, v, |v| v.to_le_bytes().to_vec()), want, "i32 {x}");
            }
            if let Ok(v) = i16::try_from(x) {
                assert_eq!(convert_one(Elem::I16, ToU32::Count, v, |v| v.to_le_bytes().to_vec()), want, "i16 {x}");
            }
            if let Ok(v) = i8::try_from(x) {
                assert_eq!(convert_one(Elem::I8, ToU32::Count, v, |v| v.to_le_bytes().to_vec()), want, "i8 {x}");
            }
        }
        for &x in &[0u64, 1, 255, 65535, u64::from(MAX_COUNT), u64::from(MAX_COUNT) + 1, u64::from(u32::MAX), u64::MAX]
        {
            let want = count_from_u64(x).ok();
            assert_eq!(convert_one(Elem::U64, ToU32::Count, x, |v| v.to_le_bytes().to_vec()), want, "u64 {x}");
            if let Ok(v) = u32::try_from(x) {
                assert_eq!(convert_one(Elem::U32, ToU32::Count, v, |v| v.to_le_bytes().to_vec()), want, "u32 {x}");
            }
            if let Ok(v) = u16::try_from(x) {
                assert_eq!(convert_one(Elem::U16, ToU32::Count, v, |v| v.to_le_bytes().to_vec()), want, "u16 {x}");
            }
            if let Ok(v) = u8::try_from(x) {
                assert_eq!(convert_one(Elem::U8, ToU32::Count, v, |v| v.to_le_bytes().to_vec()), want, "u8 {x}");
            }
        }
        // Gene indices: below the gene count, never negative, never floating point.
        let genes = ToU32::Gene(1000);
        for (x, want) in [(0i64, Some(0u32)), (999, Some(999)), (1000, None), (-1, None), (i64::MIN, None)] {
            assert_eq!(convert_one(Elem::I64, genes, x, |v| v.to_le_bytes().to_vec()), want, "gene i64 {x}");
            if let Ok(v) = i32::try_from(x) {
                assert_eq!(convert_one(Elem::I32, genes, v, |v| v.to_le_bytes().to_vec()), want, "gene i32 {x}");
            }
        }
        assert_eq!(convert_one(Elem::U64, genes, 1u64 << 32, |v| v.to_le_bytes().to_vec()), None);
        assert_eq!(convert_one(Elem::U64, ToU32::Gene(u64::MAX), 1u64 << 32, |v| v.to_le_bytes().to_vec()), None);
        assert_eq!(convert_one(Elem::F32, genes, 3.0f32, |v| v.to_le_bytes().to_vec()), None);
        // One bad element among good ones fails the whole slice.
        let bytes: Vec<u8> = [1.0f32, 2.0, 0.5, 4.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert!(!ToU32::Count.convert(Elem::F32, &bytes, &mut [0; 4]));
    }
}
