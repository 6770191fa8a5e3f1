//! Decoding one chunk's frames into CSR gene indices and counts, with every data rule checked: the counts and
//! gaps planes recombined, gaps summed per cell, then the exception frames applied.

use dct_format::{ChunkEntry, FrameKind, MAX_COUNT, STREAM_MAX};

use crate::chunk::{
    Ctx, MAX_U32_SUM_LEN, check_position, data_err, frame_err, gap_error, plane, prefix_sum_u64, read_exceptions,
};
use crate::error::DecodeError;
use crate::frame::decompress_exact;
use crate::kernels::{counts_into, prefix_sum_u32};
use crate::values::CountValue;
use crate::worker::Worker;

/// Decodes one chunk into `indices`/`values` (exactly the chunk's `n` nonzeros).
pub(crate) fn decode_chunk<V: CountValue>(
    w: &mut Worker,
    ctx: &Ctx<'_>,
    chunk: u32,
    e: &ChunkEntry,
    indices: &mut [i32],
    values: &mut [V],
) -> Result<(), DecodeError> {
    let n = e.nnz() as usize;
    let blob = ctx.blob;
    let c = chunk as usize;
    // Each stream is post-processed right after it is decompressed, while its planes are still in cache.
    decompress_exact(&mut w.dctx, &blob[e.vals.range()], 2 * n, &mut w.vals)
        .map_err(|p| frame_err(c, FrameKind::Vals, e.vals, p))?;

    // Counts: recombine the byte planes; a stored zero is never valid.
    let (vlo, vhi) = w.vals.split_at(n);
    if counts_into(vlo, vhi, values, ctx.mode) {
        let pos = (0..n).find(|&i| plane(vlo, vhi, i) == 0).expect("a zero was seen");
        return Err(data_err(
            &ctx.indptr,
            chunk,
            e,
            FrameKind::Vals,
            pos as u64,
            "stored count is 0; zeros are never stored".into(),
        ));
    }

    decompress_exact(&mut w.dctx, &blob[e.gaps.range()], 2 * n, &mut w.gaps)
        .map_err(|p| frame_err(c, FrameKind::Gaps, e.gaps, p))?;
    // Gene indices: prefix sums of the gaps, restarting at each cell, in one pass per cell (see prefix_sum_u32).
    let (glo, ghi) = w.gaps.split_at(n);
    let n_genes = u64::from(ctx.header.n_genes);
    let mut start = 0usize;
    for cell in e.cell_lo..e.cell_hi {
        let end = (ctx.indptr.get(cell as usize + 1) - e.nnz_lo) as usize;
        if end > start {
            let (gl, gh, row) = (&glo[start..end], &ghi[start..end], &mut indices[start..end]);
            let (zeros, last) = if row.len() <= MAX_U32_SUM_LEN {
                // At most 65,537 gaps of at most 65,535: every sum fits in 32 bits and cannot wrap.
                prefix_sum_u32(gl, gh, row, ctx.mode)
            } else {
                prefix_sum_u64(gl, gh, row)
            };
            // A cell's first gap is its first gene index and may be 0; any later zero repeats a gene.
            let zeros = zeros - u32::from(gl[0] == 0 && gh[0] == 0);
            if zeros != 0 || last >= n_genes {
                return Err(gap_error(ctx, chunk, e, glo, ghi, start, end, n_genes));
            }
        }
        start = end;
    }

    if e.vexc.is_present() {
        let frame = e.vexc;
        let k = read_exceptions(&mut w.dctx, &mut w.exc, blob, c, FrameKind::ValueExceptions, frame, n)?;
        let (pos, pay) = w.exc.split_at(4 * k);
        let (vlo, vhi) = w.vals.split_at(n);
        let mut prev: Option<u32> = None;
        for (p, q) in pos.chunks_exact(4).zip(pay.chunks_exact(4)) {
            let p = u32::from_le_bytes(p.try_into().expect("4 bytes"));
            let payload = u32::from_le_bytes(q.try_into().expect("4 bytes"));
            check_position(p, prev, n).map_err(|m| frame_err(c, FrameKind::ValueExceptions, frame, m))?;
            prev = Some(p);
            let at = p as usize;
            let fail = |m: String| data_err(&ctx.indptr, chunk, e, FrameKind::ValueExceptions, p.into(), m);
            if plane(vlo, vhi, at) != STREAM_MAX {
                return Err(fail(format!(
                    "value exception at a stored count of {} (must be 65535)",
                    plane(vlo, vhi, at)
                )));
            }
            if !(STREAM_MAX + 1..=MAX_COUNT).contains(&payload) {
                return Err(fail(format!("value exception payload {payload} is outside 65536..=2147483647")));
            }
            values[at] = V::from_count(payload);
        }
    }

    if e.gexc.is_present() {
        let frame = e.gexc;
        let k = read_exceptions(&mut w.dctx, &mut w.exc, blob, c, FrameKind::GapExceptions, frame, n)?;
        let (pos, pay) = w.exc.split_at(4 * k);
        let mut prev: Option<u32> = None;
        // `next_cell` is the first cell not yet passed; `cell_end` the end of the cell before it. Positions are
        // below n, so the walk stops inside the chunk (and never starts for a chunk without nonzeros).
        let mut next_cell = e.cell_lo;
        let mut cell_end = 0usize;
        for (p, q) in pos.chunks_exact(4).zip(pay.chunks_exact(4)) {
            let p = u32::from_le_bytes(p.try_into().expect("4 bytes"));
            let payload = u64::from(u32::from_le_bytes(q.try_into().expect("4 bytes")));
            check_position(p, prev, n).map_err(|m| frame_err(c, FrameKind::GapExceptions, frame, m))?;
            prev = Some(p);
            let at = p as usize;
            let fail = |m: String| data_err(&ctx.indptr, chunk, e, FrameKind::GapExceptions, p.into(), m);
            if plane(glo, ghi, at) != STREAM_MAX {
                return Err(fail(format!("gap exception at a stored gap of {} (must be 65535)", plane(glo, ghi, at))));
            }
            if payload == 0 || payload >= n_genes {
                return Err(fail(format!("gap exception payload {payload} is outside 1..{n_genes}")));
            }
            while at >= cell_end {
                cell_end = (ctx.indptr.get(next_cell as usize + 1) - e.nnz_lo) as usize;
                next_cell += 1;
            }
            // Indices only grow, so the cell's last index is its largest: check it first, then add.
            let last = u64::from(indices[cell_end - 1] as u32) + payload;
            if last >= n_genes {
                return Err(fail(format!("gap exception makes gene index {last}, not below n_genes = {n_genes}")));
            }
            for x in &mut indices[at..cell_end] {
                *x += payload as i32;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::chunk::{MAX_U32_SUM_LEN, prefix_sum_u64};
    use crate::kernels::{WriteMode, prefix_sum_u32};

    /// The obvious serial model: running sums and the count of zero gaps.
    fn model(gaps: &[u32]) -> (Vec<i32>, u32, u64) {
        let mut acc = 0u64;
        let sums = gaps
            .iter()
            .map(|&g| {
                acc += u64::from(g);
                acc as i32
            })
            .collect();
        (sums, gaps.iter().filter(|&&g| g == 0).count() as u32, acc)
    }

    #[test]
    fn block_prefix_sums_match_the_serial_model() {
        // Lengths around the block size, gaps of every byte pattern (zeros inside blocks and in the tail).
        let mut x = 0x9e37_79b9u32;
        for len in 0..70usize {
            for round in 0..20 {
                let gaps: Vec<u32> = (0..len)
                    .map(|i| {
                        x ^= x << 13;
                        x ^= x >> 17;
                        x ^= x << 5;
                        match (x % 7, round % 3) {
                            (0, _) => 0,
                            (1, _) => 65_535,
                            (_, 0) => x % 3,
                            _ => (x >> 8) % 65_536 + (i as u32 % 2),
                        }
                        .min(65_535)
                    })
                    .collect();
                let lo: Vec<u8> = gaps.iter().map(|&g| g as u8).collect();
                let hi: Vec<u8> = gaps.iter().map(|&g| (g >> 8) as u8).collect();
                let (want, zeros, last) = model(&gaps);
                let mut row = vec![-1i32; len];
                assert_eq!(prefix_sum_u32(&lo, &hi, &mut row, WriteMode::Streaming), (zeros, last), "len {len}");
                assert_eq!(row, want, "len {len}");
                let mut row = vec![-1i32; len];
                assert_eq!(prefix_sum_u64(&lo, &hi, &mut row), (zeros, last), "len {len}");
                assert_eq!(row, want, "len {len}");
            }
        }
    }

    #[test]
    fn the_longest_32_bit_cell_does_not_wrap() {
        let n = MAX_U32_SUM_LEN;
        let (lo, hi) = (vec![0xffu8; n], vec![0xffu8; n]);
        let mut row = vec![0i32; n];
        let (zeros, last) = prefix_sum_u32(&lo, &hi, &mut row, WriteMode::Streaming);
        assert_eq!((zeros, last), (0, 65_535 * n as u64));
        assert_eq!(last, u64::from(u32::MAX));
    }
}
