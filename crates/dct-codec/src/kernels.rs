//! The per-nonzero loops of decoding: byte planes to counts, and gap planes to gene indices.
//!
//! A decoded tile can be far larger than the caches (8 bytes per nonzero: 256 MB for a 10,000-cell tile); then
//! these loops are bound by memory writes: with ordinary stores every output line is first read into the cache and
//! later written back. For such output ([`WriteMode::Streaming`]) the x86-64 kernels use non-temporal stores, which
//! write whole lines without reading them; in the codec benchmark they wrote a tile's output 2.8x faster than
//! ordinary stores. Which kernels run is chosen once per call from what the processor has:
//!
//! * AVX-512 (F, BW and VL, detected at run time): 16 nonzeros per 64-byte vector, masked heads and tails, both
//!   write modes. On the build machine they cut the single-thread decode's time beyond the zstd floor from 20 to
//!   13 ms per 10,000-cell tile, of which 11 ms is the bare cost of storing the output (`docs/BENCHMARKS.md`).
//! * SSE2 (the x86-64 baseline): non-temporal kernels for [`WriteMode::Streaming`].
//! * Portable loops that the compiler vectorises: everything else (cached SSE2 writes, other architectures, 8-byte
//!   output types) and always under Miri, which cannot run non-temporal stores.
//!
//! The crate's unsafe code lives here, in `handoff` and in `buffers`. Every kernel is a safe function over slices:
//! the unsafe part reads and writes strictly inside them (AVX-512 masked loads and stores do not touch masked-off
//! lanes), makes non-temporal stores to aligned addresses only (a head reaches alignment), and ends with the store
//! fence that non-temporal stores require before the memory is touched again. The tests run every kernel this
//! processor can run against a serial model on all alignments and lengths.

#![allow(unsafe_code)]

use crate::values::CountValue;

/// How decoded gene indices and counts are stored to memory.
///
/// Non-temporal stores pay off when the output is much larger than the caches and is not read again at once; for
/// output that fits in cache they make the consumer's first read go to memory. In an alternating comparison on the
/// build machine (decode a tile, then sum its output), ordinary stores were faster up to about 9 MB of output and
/// non-temporal stores 20% faster at 26 MB, hence [`WriteMode::for_output_bytes`]'s threshold of 16 MiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WriteMode {
    /// Ordinary stores (the output stays in cache).
    #[default]
    Cached,
    /// Non-temporal stores on x86-64 (ordinary stores elsewhere).
    Streaming,
}

impl WriteMode {
    /// Output of at least this many bytes is written with [`WriteMode::Streaming`] by
    /// [`WriteMode::for_output_bytes`].
    pub const STREAMING_MIN_BYTES: u64 = 16 << 20;

    /// The mode for an operation that writes `bytes` of output in all: streaming from
    /// [`STREAMING_MIN_BYTES`](Self::STREAMING_MIN_BYTES) up.
    pub fn for_output_bytes(bytes: u64) -> Self {
        if bytes >= Self::STREAMING_MIN_BYTES { WriteMode::Streaming } else { WriteMode::Cached }
    }
}

/// Writes the counts `lo[i] | hi[i] << 8` of two byte planes to `out` (as `V`) and says whether any was 0.
/// The three slices have the same length.
pub(crate) fn counts_into<V: CountValue>(lo: &[u8], hi: &[u8], out: &mut [V], mode: WriteMode) -> bool {
    counts_with(Isa::best(), lo, hi, out, mode)
}

/// [`counts_into`] with the instructions of `isa` (which must be available: see [`Isa::best`]).
fn counts_with<V: CountValue>(isa: Isa, lo: &[u8], hi: &[u8], out: &mut [V], mode: WriteMode) -> bool {
    assert!(lo.len() == out.len() && hi.len() == out.len(), "counts_into: planes and output differ in length");
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    if isa != Isa::Portable {
        use std::any::TypeId;
        let t = TypeId::of::<V>();
        let float = t == TypeId::of::<f32>();
        if float || t == TypeId::of::<u32>() || t == TypeId::of::<i32>() {
            let (ptr, len) = (out.as_mut_ptr().cast::<u32>(), out.len());
            // SAFETY: `V` is f32, u32 or i32 (checked by type id): 4 bytes with alignment 4, and every bit pattern
            // is a valid value of each, so the slice may be viewed as u32 for the duration of this borrow.
            let out = unsafe { std::slice::from_raw_parts_mut(ptr, len) };
            let nt = mode == WriteMode::Streaming;
            match (isa, float, nt) {
                (Isa::Avx512, true, true) => return avx512::counts::<true, true>(lo, hi, out),
                (Isa::Avx512, true, false) => return avx512::counts::<true, false>(lo, hi, out),
                (Isa::Avx512, false, true) => return avx512::counts::<false, true>(lo, hi, out),
                (Isa::Avx512, false, false) => return avx512::counts::<false, false>(lo, hi, out),
                (Isa::Sse2, true, true) => return x86::counts::<true>(lo, hi, out),
                (Isa::Sse2, false, true) => return x86::counts::<false>(lo, hi, out),
                _ => {} // SSE2 with ordinary stores: the compiler's vectorised portable loop is as fast
            }
        }
    }
    let _ = (isa, mode); // only x86-64 has kernels of its own
    portable_counts(lo, hi, out)
}

/// [`counts_into`] with ordinary loops.
pub(crate) fn portable_counts<V: CountValue>(lo: &[u8], hi: &[u8], out: &mut [V]) -> bool {
    let mut zero = false;
    for ((o, &l), &h) in out.iter_mut().zip(lo).zip(hi) {
        let v = u16::from(l) | u16::from(h) << 8;
        zero |= v == 0;
        *o = V::from_stream(v);
    }
    zero
}

/// Gene indices of one cell from its gap planes, in one pass: `row[i]` = sum of gaps `0..=i` (mod 2^32). Returns
/// the number of zero gaps and the last index. The caller guarantees that the sums fit in 32 bits
/// (`row.len() <= MAX_U32_SUM_LEN`, see the decoder).
pub(crate) fn prefix_sum_u32(gl: &[u8], gh: &[u8], row: &mut [i32], mode: WriteMode) -> (u32, u64) {
    prefix_sum_with(Isa::best(), gl, gh, row, mode)
}

/// [`prefix_sum_u32`] with the instructions of `isa` (which must be available: see [`Isa::best`]).
fn prefix_sum_with(isa: Isa, gl: &[u8], gh: &[u8], row: &mut [i32], mode: WriteMode) -> (u32, u64) {
    assert!(gl.len() == row.len() && gh.len() == row.len(), "prefix_sum_u32: planes and output differ in length");
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    match (isa, mode) {
        (Isa::Avx512, WriteMode::Streaming) => return avx512::prefix_sum::<true>(gl, gh, row),
        (Isa::Avx512, WriteMode::Cached) => return avx512::prefix_sum::<false>(gl, gh, row),
        (Isa::Sse2, WriteMode::Streaming) => return x86::prefix_sum(gl, gh, row),
        _ => {}
    }
    let _ = (isa, mode); // only x86-64 has kernels of its own
    portable_prefix_sum_u32(gl, gh, row)
}

/// The instruction sets the kernels are written for, best last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Isa {
    /// Loops the compiler vectorises for the build target.
    Portable,
    /// SSE2 (x86-64 baseline): non-temporal kernels for [`WriteMode::Streaming`].
    #[cfg_attr(not(all(target_arch = "x86_64", not(miri))), allow(dead_code))]
    Sse2,
    /// AVX-512 F, BW and VL, detected at run time: one 64-byte vector (a whole cache line) per 16 nonzeros.
    #[cfg_attr(not(all(target_arch = "x86_64", not(miri))), allow(dead_code))]
    Avx512,
}

impl Isa {
    /// The best set this processor has.
    fn best() -> Isa {
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        {
            if avx512::available() { Isa::Avx512 } else { Isa::Sse2 }
        }
        #[cfg(not(all(target_arch = "x86_64", not(miri))))]
        Isa::Portable
    }

    /// Every set this processor has (for tests that compare them).
    #[cfg(test)]
    fn available() -> Vec<Isa> {
        let mut all = vec![Isa::Portable];
        if cfg!(all(target_arch = "x86_64", not(miri))) {
            all.push(Isa::Sse2);
        }
        if Isa::best() == Isa::Avx512 {
            all.push(Isa::Avx512);
        }
        all
    }
}

/// [`prefix_sum_u32`] with ordinary loops (cached writes, and every write off x86-64): blocks of 8
/// gaps are summed with a log-step scan over a fixed-size array (three shifted adds, which the compiler turns into
/// vector shuffles and adds) and offset by the running total, so the serial dependency is one add per 8 gaps.
pub(crate) fn portable_prefix_sum_u32(gl: &[u8], gh: &[u8], row: &mut [i32]) -> (u32, u64) {
    const W: usize = 8;
    let mut acc = 0u32;
    let mut zeros = 0u32;
    let blocks = row.len() / W;
    for ((o, l), h) in row.chunks_exact_mut(W).zip(gl.chunks_exact(W)).zip(gh.chunks_exact(W)).take(blocks) {
        let mut p = [0u32; W];
        for k in 0..W {
            p[k] = u32::from(l[k]) | u32::from(h[k]) << 8;
        }
        zeros += p.iter().map(|&g| u32::from(g == 0)).sum::<u32>();
        for k in (1..W).rev() {
            p[k] = p[k].wrapping_add(p[k - 1]);
        }
        for k in (2..W).rev() {
            p[k] = p[k].wrapping_add(p[k - 2]);
        }
        for k in (4..W).rev() {
            p[k] = p[k].wrapping_add(p[k - 4]);
        }
        for k in 0..W {
            o[k] = acc.wrapping_add(p[k]) as i32;
        }
        acc = acc.wrapping_add(p[W - 1]);
    }
    let tail = blocks * W;
    let (z, acc) = scalar_prefix(&gl[tail..], &gh[tail..], &mut row[tail..], acc);
    (zeros + z, u64::from(acc))
}

/// One gap at a time from `acc`: returns the zero gaps seen and the new running total.
fn scalar_prefix(gl: &[u8], gh: &[u8], row: &mut [i32], mut acc: u32) -> (u32, u32) {
    let mut zeros = 0;
    for ((o, &l), &h) in row.iter_mut().zip(gl).zip(gh) {
        let g = u32::from(l) | u32::from(h) << 8;
        zeros += u32::from(g == 0);
        acc = acc.wrapping_add(g);
        *o = acc as i32;
    }
    (zeros, acc)
}

#[cfg(all(target_arch = "x86_64", not(miri)))]
mod x86 {
    use std::arch::x86_64::{
        __m128i, _mm_add_epi16, _mm_add_epi32, _mm_castps_si128, _mm_cmpeq_epi16, _mm_cvtepi32_ps, _mm_cvtsi128_si32,
        _mm_loadu_si128, _mm_madd_epi16, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi16, _mm_set1_epi32,
        _mm_setzero_si128, _mm_sfence, _mm_shuffle_epi32, _mm_slli_si128, _mm_stream_si128, _mm_unpackhi_epi8,
        _mm_unpackhi_epi16, _mm_unpacklo_epi8, _mm_unpacklo_epi16,
    };

    use super::scalar_prefix;

    /// Elements per vector step: 16 bytes of each plane, four 16-byte stores.
    const STEP: usize = 16;

    /// How many leading elements of a 4-byte slice starting at `ptr` to write with ordinary stores so that the
    /// rest starts at a 16-byte boundary (at most `len`).
    fn head_len<T>(ptr: *const T, len: usize) -> usize {
        debug_assert_eq!(size_of::<T>(), 4);
        let misalign = ptr as usize % 16;
        let head = if misalign == 0 { 0 } else { (16 - misalign) / 4 };
        head.min(len)
    }

    /// The 16 pairs `(lo[k], hi[k])` at `lo`/`hi` as four vectors of 4 u32 each, plus the two vectors of 8 u16.
    ///
    /// # Safety
    /// 16 bytes must be readable at `lo` and at `hi`.
    #[inline(always)]
    unsafe fn load16(lo: *const u8, hi: *const u8) -> ([__m128i; 2], [__m128i; 4]) {
        // SAFETY: the caller guarantees 16 readable bytes at each pointer (unaligned loads); the rest is register
        // arithmetic of SSE2, which every x86-64 processor has.
        unsafe {
            let (l, h) = (_mm_loadu_si128(lo.cast()), _mm_loadu_si128(hi.cast()));
            let z = _mm_setzero_si128();
            let w0 = _mm_unpacklo_epi8(l, h);
            let w1 = _mm_unpackhi_epi8(l, h);
            let d = [
                _mm_unpacklo_epi16(w0, z),
                _mm_unpackhi_epi16(w0, z),
                _mm_unpacklo_epi16(w1, z),
                _mm_unpackhi_epi16(w1, z),
            ];
            ([w0, w1], d)
        }
    }

    /// See [`super::counts_into`]; `FLOAT` writes f32 bit patterns, otherwise the integers.
    pub(super) fn counts<const FLOAT: bool>(lo: &[u8], hi: &[u8], out: &mut [u32]) -> bool {
        let n = out.len();
        // The vector loop below reads the planes up to `n`: make that a property of this function, not its callers.
        let (lo, hi) = (&lo[..n], &hi[..n]);
        let convert = |v: u32| if FLOAT { (v as f32).to_bits() } else { v };
        let head = head_len(out.as_ptr(), n);
        let body = (n - head) / STEP * STEP;
        let mut zero = false;
        for i in (0..head).chain(head + body..n) {
            let v = u32::from(lo[i]) | u32::from(hi[i]) << 8;
            zero |= v == 0;
            out[i] = convert(v);
        }
        if body == 0 {
            return zero;
        }
        // SAFETY: `i + 16 <= body <= n - head`, so 16 bytes of each plane and 16 u32 of `out` from `head + i` lie
        // inside the slices; `op.add(i)` is 16-byte aligned (`head_len`, and `i` is a multiple of 16 elements), as
        // the non-temporal stores require, and the fence follows the last of them. The other intrinsics are SSE2
        // register arithmetic, which every x86-64 processor has.
        unsafe {
            let z = _mm_setzero_si128();
            let mut any = z;
            let (lp, hp, op) = (lo[head..].as_ptr(), hi[head..].as_ptr(), out[head..].as_mut_ptr());
            let mut i = 0;
            while i < body {
                let ([w0, w1], d) = load16(lp.add(i), hp.add(i));
                any = _mm_or_si128(any, _mm_or_si128(_mm_cmpeq_epi16(w0, z), _mm_cmpeq_epi16(w1, z)));
                for (k, x) in d.into_iter().enumerate() {
                    let x = if FLOAT { _mm_castps_si128(_mm_cvtepi32_ps(x)) } else { x };
                    _mm_stream_si128(op.add(i + 4 * k).cast(), x);
                }
                i += STEP;
            }
            // Non-temporal stores are weakly ordered: fence before anyone (this thread included) reads `out`.
            _mm_sfence();
            zero || _mm_movemask_epi8(any) != 0
        }
    }

    /// See [`super::prefix_sum_u32`].
    pub(super) fn prefix_sum(gl: &[u8], gh: &[u8], row: &mut [i32]) -> (u32, u64) {
        let n = row.len();
        // As in `counts`: the planes are read up to `n`.
        let (gl, gh) = (&gl[..n], &gh[..n]);
        let head = head_len(row.as_ptr(), n);
        let body = (n - head) / STEP * STEP;
        let (mut zeros, acc) = scalar_prefix(&gl[..head], &gh[..head], &mut row[..head], 0);
        if body == 0 {
            let (z, acc) = scalar_prefix(&gl[head..], &gh[head..], &mut row[head..], acc);
            return (zeros + z, u64::from(acc));
        }
        // SAFETY: as in `counts`: reads and 16-byte-aligned non-temporal stores inside the slices, fenced before
        // the slices are touched again; otherwise SSE2 register arithmetic.
        let acc = unsafe {
            let z = _mm_setzero_si128();
            // Per u16 lane: minus the number of zero gaps seen (at most 2 per step; `n <= MAX_U32_SUM_LEN` keeps this
            // below 2^15).
            let mut zc = z;
            let mut total = _mm_set1_epi32(acc as i32);
            let (lp, hp, op) = (gl[head..].as_ptr(), gh[head..].as_ptr(), row[head..].as_mut_ptr());
            let mut i = 0;
            while i < body {
                let ([w0, w1], d) = load16(lp.add(i), hp.add(i));
                zc = _mm_add_epi16(zc, _mm_cmpeq_epi16(w0, z));
                zc = _mm_add_epi16(zc, _mm_cmpeq_epi16(w1, z));
                // Prefix sums within each vector and the offsets of vectors 1-3 inside the step, all independent
                // of the running total, which then costs one dependent add per 16 gaps.
                let mut s = d;
                for x in &mut s {
                    *x = _mm_add_epi32(*x, _mm_slli_si128(*x, 4));
                    *x = _mm_add_epi32(*x, _mm_slli_si128(*x, 8));
                }
                let last = |x: __m128i| _mm_shuffle_epi32(x, 0xff);
                let o1 = last(s[0]);
                let o2 = _mm_add_epi32(o1, last(s[1]));
                let o3 = _mm_add_epi32(o2, last(s[2]));
                let o4 = _mm_add_epi32(o3, last(s[3]));
                for (k, (x, o)) in s.into_iter().zip([_mm_setzero_si128(), o1, o2, o3]).enumerate() {
                    _mm_stream_si128(op.add(i + 4 * k).cast(), _mm_add_epi32(x, _mm_add_epi32(o, total)));
                }
                total = _mm_add_epi32(total, o4);
                i += STEP;
            }
            _mm_sfence();
            // Each u16 lane holds minus its count; madd with -1 gives the four pair sums as positive i32.
            let pairs = _mm_madd_epi16(zc, _mm_set1_epi16(-1));
            let pairs = _mm_add_epi32(pairs, _mm_shuffle_epi32(pairs, 0x4e));
            let pairs = _mm_add_epi32(pairs, _mm_shuffle_epi32(pairs, 0xb1));
            zeros += _mm_cvtsi128_si32(pairs) as u32;
            _mm_cvtsi128_si32(total) as u32
        };
        let (z, acc) = scalar_prefix(&gl[head + body..], &gh[head + body..], &mut row[head + body..], acc);
        (zeros + z, u64::from(acc))
    }
}

/// AVX-512 kernels: the planes' 16 low and 16 high bytes widen straight into one vector of 16 u32 (a whole cache
/// line of output), which halves to thirds the instructions per nonzero of the SSE2 kernels. The head and tail of a
/// slice use masked loads and stores, so no element is done one at a time.
#[cfg(all(target_arch = "x86_64", not(miri)))]
mod avx512 {
    use std::arch::x86_64::{
        __m512i, __mmask16, _mm_cvtsi128_si32, _mm_loadu_si128, _mm_maskz_loadu_epi8, _mm_sfence, _mm512_add_epi32,
        _mm512_alignr_epi32, _mm512_castps_si512, _mm512_castsi512_si128, _mm512_cvtepi32_ps, _mm512_cvtepu8_epi32,
        _mm512_mask_cmpeq_epi32_mask, _mm512_mask_min_epu32, _mm512_mask_storeu_epi32, _mm512_mask_sub_epi32,
        _mm512_min_epu32, _mm512_or_si512, _mm512_permutexvar_epi32, _mm512_reduce_add_epi32, _mm512_reduce_min_epu32,
        _mm512_set1_epi32, _mm512_setzero_si512, _mm512_slli_epi32, _mm512_storeu_si512, _mm512_stream_si512,
    };

    /// Elements per vector.
    const LANES: usize = 16;

    /// Whether this processor has AVX-512 F, BW and VL (the check is cached by the standard library).
    pub(super) fn available() -> bool {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vl")
    }

    /// Leading elements of a 4-byte slice at `ptr` before a 64-byte boundary, at most `len` and below 16.
    fn head_len(ptr: *const u32, len: usize) -> usize {
        let misalign = ptr as usize % 64;
        let head = if misalign == 0 { 0 } else { (64 - misalign) / 4 };
        head.min(len)
    }

    /// Mask of the first `len` (at most 16) lanes.
    fn first_lanes(len: usize) -> __mmask16 {
        debug_assert!(len <= LANES);
        ((1u32 << len) - 1) as __mmask16
    }

    /// The 16 values `lo[k] | hi[k] << 8`.
    ///
    /// # Safety
    /// AVX-512 F must be available and 16 bytes readable at `lo` and at `hi`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    unsafe fn load(lo: *const u8, hi: *const u8) -> __m512i {
        // SAFETY: 16 readable bytes at each pointer (the caller), unaligned loads.
        let (l, h) = unsafe { (_mm_loadu_si128(lo.cast()), _mm_loadu_si128(hi.cast())) };
        _mm512_or_si512(_mm512_cvtepu8_epi32(l), _mm512_slli_epi32::<8>(_mm512_cvtepu8_epi32(h)))
    }

    /// The values of the first `len` (below 16) pairs, zeros in the other lanes.
    ///
    /// # Safety
    /// AVX-512 F, BW and VL must be available and `len` bytes readable at `lo` and at `hi`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    unsafe fn load_masked(lo: *const u8, hi: *const u8, len: usize) -> __m512i {
        let k = first_lanes(len);
        // SAFETY: masked-off bytes are not accessed; the first `len` are readable (the caller).
        let (l, h) = unsafe { (_mm_maskz_loadu_epi8(k, lo.cast()), _mm_maskz_loadu_epi8(k, hi.cast())) };
        _mm512_or_si512(_mm512_cvtepu8_epi32(l), _mm512_slli_epi32::<8>(_mm512_cvtepu8_epi32(h)))
    }

    /// See [`super::counts_into`]; `FLOAT` writes f32 bit patterns, `NT` uses non-temporal stores.
    pub(super) fn counts<const FLOAT: bool, const NT: bool>(lo: &[u8], hi: &[u8], out: &mut [u32]) -> bool {
        assert!(available(), "AVX-512 kernel called on a processor without AVX-512");
        let n = out.len();
        let (lo, hi) = (&lo[..n], &hi[..n]);
        // SAFETY: AVX-512 F, BW and VL are available (asserted above); the slices hold `n` elements each.
        unsafe { counts_impl::<FLOAT, NT>(lo.as_ptr(), hi.as_ptr(), out.as_mut_ptr(), n) }
    }

    /// # Safety
    /// AVX-512 F, BW and VL must be available; `n` bytes readable at `lp` and `hp`, `n` u32 writable at `op`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    unsafe fn counts_impl<const FLOAT: bool, const NT: bool>(
        lp: *const u8,
        hp: *const u8,
        op: *mut u32,
        n: usize,
    ) -> bool {
        let convert = |v: __m512i| if FLOAT { _mm512_castps_si512(_mm512_cvtepi32_ps(v)) } else { v };
        let mut min = _mm512_set1_epi32(-1);
        // Non-temporal stores need 64-byte-aligned addresses: a masked head reaches the boundary.
        let head = if NT { head_len(op, n) } else { 0 };
        let mut i = 0;
        // SAFETY (all blocks below): every access is at `i .. i + len` with `i + len <= n`, inside the caller's
        // buffers; non-temporal stores are at 64-byte-aligned addresses (`head`, then whole vectors) and the
        // fence follows the last of them.
        if head > 0 {
            let v = unsafe { load_masked(lp, hp, head) };
            let k = first_lanes(head);
            min = _mm512_mask_min_epu32(min, k, min, v);
            unsafe { _mm512_mask_storeu_epi32(op.cast(), k, convert(v)) };
            i = head;
        }
        while i + LANES <= n {
            let v = unsafe { load(lp.add(i), hp.add(i)) };
            min = _mm512_min_epu32(min, v);
            let dst = unsafe { op.add(i) }.cast::<__m512i>();
            if NT {
                unsafe { _mm512_stream_si512(dst.cast(), convert(v)) };
            } else {
                unsafe { _mm512_storeu_si512(dst, convert(v)) };
            }
            i += LANES;
        }
        if i < n {
            let len = n - i;
            let v = unsafe { load_masked(lp.add(i), hp.add(i), len) };
            let k = first_lanes(len);
            min = _mm512_mask_min_epu32(min, k, min, v);
            unsafe { _mm512_mask_storeu_epi32(op.add(i).cast(), k, convert(v)) };
        }
        if NT {
            // Non-temporal stores are weakly ordered: fence before anyone (this thread included) reads `out`.
            _mm_sfence();
        }
        _mm512_reduce_min_epu32(min) == 0
    }

    /// See [`super::prefix_sum_u32`]; `NT` uses non-temporal stores.
    pub(super) fn prefix_sum<const NT: bool>(gl: &[u8], gh: &[u8], row: &mut [i32]) -> (u32, u64) {
        assert!(available(), "AVX-512 kernel called on a processor without AVX-512");
        let n = row.len();
        let (gl, gh) = (&gl[..n], &gh[..n]);
        // SAFETY: AVX-512 F, BW and VL are available (asserted above); the slices hold `n` elements each.
        unsafe { prefix_impl::<NT>(gl.as_ptr(), gh.as_ptr(), row.as_mut_ptr().cast(), n) }
    }

    /// # Safety
    /// As for [`counts_impl`].
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    unsafe fn prefix_impl<const NT: bool>(lp: *const u8, hp: *const u8, op: *mut u32, n: usize) -> (u32, u64) {
        let z = _mm512_setzero_si512();
        let minus_one = _mm512_set1_epi32(-1);
        let last_lane = _mm512_set1_epi32(LANES as i32 - 1);
        // Per lane, the zero gaps seen (at most n / 16 + 2 each).
        let mut zeros = z;
        // The running total in every lane.
        let mut total = z;
        // Inclusive prefix sums of one vector (lanes `len..` hold zeros, so they repeat the last sum), added to
        // the running total; the vector's own total is taken off the dependency chain, which is one add per 16.
        let mut step = |v: __m512i, k: __mmask16| {
            zeros = _mm512_mask_sub_epi32(zeros, _mm512_mask_cmpeq_epi32_mask(k, v, z), zeros, minus_one);
            let mut x = v;
            x = _mm512_add_epi32(x, _mm512_alignr_epi32::<15>(x, z));
            x = _mm512_add_epi32(x, _mm512_alignr_epi32::<14>(x, z));
            x = _mm512_add_epi32(x, _mm512_alignr_epi32::<12>(x, z));
            x = _mm512_add_epi32(x, _mm512_alignr_epi32::<8>(x, z));
            let out = _mm512_add_epi32(x, total);
            total = _mm512_add_epi32(total, _mm512_permutexvar_epi32(last_lane, x));
            out
        };
        let head = if NT { head_len(op, n) } else { 0 };
        let mut i = 0;
        // SAFETY (all blocks below): as in `counts_impl`.
        if head > 0 {
            let k = first_lanes(head);
            let out = step(unsafe { load_masked(lp, hp, head) }, k);
            unsafe { _mm512_mask_storeu_epi32(op.cast(), k, out) };
            i = head;
        }
        while i + LANES <= n {
            let out = step(unsafe { load(lp.add(i), hp.add(i)) }, u16::MAX);
            let dst = unsafe { op.add(i) }.cast::<__m512i>();
            if NT {
                unsafe { _mm512_stream_si512(dst.cast(), out) };
            } else {
                unsafe { _mm512_storeu_si512(dst, out) };
            }
            i += LANES;
        }
        if i < n {
            let (len, k) = (n - i, first_lanes(n - i));
            let out = step(unsafe { load_masked(lp.add(i), hp.add(i), len) }, k);
            unsafe { _mm512_mask_storeu_epi32(op.add(i).cast(), k, out) };
        }
        if NT {
            _mm_sfence();
        }
        let zeros = _mm512_reduce_add_epi32(zeros) as u32;
        (zeros, u64::from(_mm_cvtsi128_si32(_mm512_castsi512_si128(total)) as u32))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MODES: [WriteMode; 2] = [WriteMode::Cached, WriteMode::Streaming];

    /// Every instruction set this processor has, with both write modes.
    fn combinations() -> Vec<(Isa, WriteMode)> {
        Isa::available().into_iter().flat_map(|isa| MODES.map(|mode| (isa, mode))).collect()
    }

    #[test]
    fn the_best_instruction_set_is_among_the_available_ones_and_is_tested() {
        let all = Isa::available();
        assert_eq!(all.last(), Some(&Isa::best()));
        if cfg!(all(target_arch = "x86_64", not(miri))) {
            assert!(all.contains(&Isa::Sse2), "SSE2 is part of x86-64");
        }
    }

    /// Plane pairs with zeros, 65535s and small values, from a fixed xorshift.
    fn planes(len: usize, seed: u32) -> (Vec<u8>, Vec<u8>) {
        let mut x = seed | 1;
        let gaps: Vec<u16> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                match x % 9 {
                    0 => 0,
                    1 => 65_535,
                    2 => 256,
                    3 => (x >> 8) as u16,
                    _ => (x % 5) as u16 + 1,
                }
            })
            .collect();
        (gaps.iter().map(|&g| g as u8).collect(), gaps.iter().map(|&g| (g >> 8) as u8).collect())
    }

    /// The obvious serial model.
    fn model_prefix(lo: &[u8], hi: &[u8]) -> (Vec<i32>, u32, u64) {
        let mut acc = 0u32;
        let gaps = lo.iter().zip(hi).map(|(&l, &h)| u32::from(l) | u32::from(h) << 8);
        let sums = gaps
            .clone()
            .map(|g| {
                acc = acc.wrapping_add(g);
                acc as i32
            })
            .collect();
        (sums, gaps.filter(|&g| g == 0).count() as u32, u64::from(acc))
    }

    fn check_counts<V: CountValue + PartialEq + std::fmt::Debug>(lo: &[u8], hi: &[u8], offset: usize) {
        let n = lo.len();
        let want: Vec<V> = lo.iter().zip(hi).map(|(&l, &h)| V::from_stream(u16::from(l) | u16::from(h) << 8)).collect();
        let want_zero = lo.iter().zip(hi).any(|(&l, &h)| l == 0 && h == 0);
        // An output starting `offset` elements into a buffer: every alignment of the start.
        for (isa, mode) in combinations() {
            let mut buf = vec![V::default(); n + offset + 3];
            let zero = counts_with(isa, lo, hi, &mut buf[offset..offset + n], mode);
            assert_eq!(zero, want_zero, "{isa:?} {mode:?}: len {n} offset {offset}");
            assert_eq!(&buf[offset..offset + n], &want[..], "{isa:?} {mode:?}: len {n} offset {offset}");
            let outside = buf[..offset].iter().chain(&buf[offset + n..]);
            assert!(outside.into_iter().all(|v| *v == V::default()), "{isa:?} {mode:?}: wrote outside");
        }
    }

    #[test]
    fn counts_match_the_model_for_every_type_length_and_alignment() {
        for len in (0..80).chain([255, 256, 257, 4099]) {
            for seed in 1..4 {
                let (lo, hi) = planes(len, seed * 7919 + len as u32);
                for offset in 0..4 {
                    check_counts::<f32>(&lo, &hi, offset);
                    check_counts::<u32>(&lo, &hi, offset);
                    check_counts::<i32>(&lo, &hi, offset);
                    check_counts::<u64>(&lo, &hi, offset);
                    check_counts::<f64>(&lo, &hi, offset);
                }
            }
        }
    }

    #[test]
    fn a_zero_anywhere_is_reported() {
        for len in [1, 15, 16, 17, 40, 100] {
            for at in 0..len {
                let (lo, hi) = (vec![1u8; len], vec![0u8; len]);
                let (mut lo, hi) = (lo, hi);
                lo[at] = 0;
                let mut out = vec![0f32; len + 1];
                for (offset, (isa, mode)) in
                    [0, 1].into_iter().flat_map(|o| combinations().into_iter().map(move |c| (o, c)))
                {
                    let zero = counts_with(isa, &lo, &hi, &mut out[offset..offset + len], mode);
                    assert!(zero, "{isa:?} {mode:?}: len {len} zero at {at}");
                }
            }
            let mut out = vec![0u32; len];
            for (isa, mode) in combinations() {
                assert!(!counts_with(isa, &vec![1u8; len], &vec![0u8; len], &mut out, mode), "{isa:?} {mode:?}");
            }
        }
    }

    #[test]
    fn prefix_sums_match_the_model_for_every_length_and_alignment() {
        for len in (0..80).chain([255, 256, 257, 4099]) {
            for seed in 1..4 {
                let (lo, hi) = planes(len, seed * 104_729 + len as u32);
                let (want, zeros, last) = model_prefix(&lo, &hi);
                for offset in 0..4 {
                    for (isa, mode) in combinations() {
                        let mut buf = vec![-1i32; len + offset + 3];
                        let got = prefix_sum_with(isa, &lo, &hi, &mut buf[offset..offset + len], mode);
                        let at = format!("{isa:?} {mode:?}: len {len} offset {offset}");
                        assert_eq!(got, (zeros, last), "{at}");
                        assert_eq!(&buf[offset..offset + len], &want[..], "{at}");
                        let outside = buf[..offset].iter().chain(&buf[offset + len..]);
                        assert!(outside.into_iter().all(|&v| v == -1), "{at}: wrote outside");
                    }
                    let mut row = vec![-1i32; len];
                    assert_eq!(portable_prefix_sum_u32(&lo, &hi, &mut row), (zeros, last), "portable, len {len}");
                    assert_eq!(row, want, "portable, len {len}");
                }
            }
        }
    }

    #[test]
    fn the_longest_32_bit_cell_counts_every_zero_and_does_not_wrap() {
        let n = crate::chunk::MAX_U32_SUM_LEN;
        let (lo, hi) = (vec![0xffu8; n], vec![0xffu8; n]);
        let (zero_lo, zero_hi) = (vec![0u8; n], vec![0u8; n]);
        let mut row = vec![0i32; n];
        for (isa, mode) in combinations() {
            assert_eq!(prefix_sum_with(isa, &lo, &hi, &mut row, mode), (0, u64::from(u32::MAX)), "{isa:?} {mode:?}");
            assert_eq!(prefix_sum_with(isa, &zero_lo, &zero_hi, &mut row, mode), (n as u32, 0), "{isa:?} {mode:?}");
        }
    }
}
