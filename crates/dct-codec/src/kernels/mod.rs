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

/// Asks the processor to bring the first `lines` cache lines of `bytes` into its caches, without waiting for
/// them: a row's planes lie at a random place in a decoded tile far larger than the caches, and the hardware
/// prefetcher only follows a stream once it has missed on a few of its lines. Issued for the next row while this
/// one is built, they arrive by the time it is needed (a standalone loop over random rows of 847 nonzeros: 0.67
/// against 0.92 ns a nonzero for the counts and the prefix sums). A hint only: it never faults and changes no
/// data; a no-op off x86-64.
pub(crate) fn prefetch(bytes: &[u8], lines: usize) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    for at in (0..bytes.len()).step_by(64).take(lines) {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: a prefetch reads nothing architecturally and cannot fault; the address lies inside `bytes`.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(bytes.as_ptr().add(at).cast()) };
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    let _ = (bytes, lines);
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
mod x86;

/// AVX-512 kernels: the planes' 16 low and 16 high bytes widen straight into one vector of 16 u32 (a whole cache
/// line of output), which halves to thirds the instructions per nonzero of the SSE2 kernels. The head and tail of a
/// slice use masked loads and stores, so no element is done one at a time.
#[cfg(all(target_arch = "x86_64", not(miri)))]
mod avx512;

#[cfg(test)]
mod tests;
