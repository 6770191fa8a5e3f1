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
unsafe fn counts_impl<const FLOAT: bool, const NT: bool>(lp: *const u8, hp: *const u8, op: *mut u32, n: usize) -> bool {
    let convert = |v: __m512i| if FLOAT { _mm512_castps_si512(_mm512_cvtepi32_ps(v)) } else { v };
    let mut min = _mm512_set1_epi32(-1);
    // Non-temporal stores need 64-byte-aligned addresses: a masked head reaches the boundary.
    let head = if NT { head_len(op, n) } else { 0 };
    let mut i = 0;
    // Every access below is at `i .. i + len` with `i + len <= n`, inside the caller's buffers; non-temporal
    // stores are at 64-byte-aligned addresses (`head`, then whole vectors) and the fence follows the last of them.
    if head > 0 {
        // SAFETY: the head's `head <= n` bytes are readable at `lp` and `hp`.
        let v = unsafe { load_masked(lp, hp, head) };
        let k = first_lanes(head);
        min = _mm512_mask_min_epu32(min, k, min, v);
        // SAFETY: the head's `head <= n` lanes are writable at `op` (masked store).
        unsafe { _mm512_mask_storeu_epi32(op.cast(), k, convert(v)) };
        i = head;
    }
    while i + LANES <= n {
        // SAFETY: `i + LANES <= n`: 16 bytes readable at `lp + i` and `hp + i`.
        let v = unsafe { load(lp.add(i), hp.add(i)) };
        min = _mm512_min_epu32(min, v);
        // SAFETY: `i + LANES <= n`: `op + i` is inside the output buffer.
        let dst = unsafe { op.add(i) }.cast::<__m512i>();
        if NT {
            // SAFETY: 16 lanes writable at `dst`, 64-byte aligned after the head; the fence follows the loop.
            unsafe { _mm512_stream_si512(dst.cast(), convert(v)) };
        } else {
            // SAFETY: 16 lanes writable at `dst` (`i + LANES <= n`); unaligned store.
            unsafe { _mm512_storeu_si512(dst, convert(v)) };
        }
        i += LANES;
    }
    if i < n {
        let len = n - i;
        // SAFETY: the tail's `len = n - i` bytes are readable at `lp + i` and `hp + i`.
        let v = unsafe { load_masked(lp.add(i), hp.add(i), len) };
        let k = first_lanes(len);
        min = _mm512_mask_min_epu32(min, k, min, v);
        // SAFETY: the tail's `len` lanes are writable at `op + i` (masked store).
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
    // The accesses below are bounded as in `counts_impl`.
    if head > 0 {
        let k = first_lanes(head);
        // SAFETY: the head's `head <= n` bytes are readable at `lp` and `hp`.
        let out = step(unsafe { load_masked(lp, hp, head) }, k);
        // SAFETY: the head's `head <= n` lanes are writable at `op` (masked store).
        unsafe { _mm512_mask_storeu_epi32(op.cast(), k, out) };
        i = head;
    }
    while i + LANES <= n {
        // SAFETY: `i + LANES <= n`: 16 bytes readable at `lp + i` and `hp + i`.
        let out = step(unsafe { load(lp.add(i), hp.add(i)) }, u16::MAX);
        // SAFETY: `i + LANES <= n`: `op + i` is inside the output buffer.
        let dst = unsafe { op.add(i) }.cast::<__m512i>();
        if NT {
            // SAFETY: 16 lanes writable at `dst`, 64-byte aligned after the head; the fence follows the loop.
            unsafe { _mm512_stream_si512(dst.cast(), out) };
        } else {
            // SAFETY: 16 lanes writable at `dst` (`i + LANES <= n`); unaligned store.
            unsafe { _mm512_storeu_si512(dst, out) };
        }
        i += LANES;
    }
    if i < n {
        let (len, k) = (n - i, first_lanes(n - i));
        // SAFETY: the tail's `len = n - i` bytes are readable at `lp + i` and `hp + i`.
        let out = step(unsafe { load_masked(lp.add(i), hp.add(i), len) }, k);
        // SAFETY: the tail's `len` lanes are writable at `op + i` (masked store).
        unsafe { _mm512_mask_storeu_epi32(op.add(i).cast(), k, out) };
    }
    if NT {
        _mm_sfence();
    }
    let zeros = _mm512_reduce_add_epi32(zeros) as u32;
    (zeros, u64::from(_mm_cvtsi128_si32(_mm512_castsi512_si128(total)) as u32))
}
