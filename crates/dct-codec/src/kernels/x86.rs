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
