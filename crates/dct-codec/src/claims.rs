//! Checking what a tile's frames claim before anything is allocated for them: each frame header against its
//! chunk, the sum of all claims against what the blob could produce, and, past the trust budget, a proof of every
//! claimed size by streaming the frame through a fixed window.

use dct_format::{Field, FormatError, FrameKind, TileLayout, Version, header_offset};
use zstd_safe::DCtx;

use crate::chunk::frame_err;
use crate::error::DecodeError;
use crate::frame::{MAX_RATIO, SINK_LEN, frame_content_size, verify_content_size};

/// Memory a tile may make the decoder allocate on the strength of its claims alone: 1 MiB plus 64 times the blob
/// size. A tile claiming more is first proven by streaming every frame through a fixed window (see
/// [`Decoder::decode_into`](crate::Decoder::decode_into)).
fn trust_budget(blob_len: usize) -> u64 {
    (1 << 20) + 64 * blob_len as u64
}

/// The state of the claim checks, kept by a decoder across tiles: the window proofs stream into and their zstd
/// context, both made on first need.
#[derive(Default)]
pub(crate) struct ClaimCheck {
    sink: Vec<u8>,
    proof_dctx: Option<DCtx<'static>>,
}

impl ClaimCheck {
    /// Checks the frame headers of the chunks marked in `needed` against the chunk table, then, if the output
    /// (`out_bytes`) and the scratch of `threads` workers those claims imply exceed the trust budget, proves every
    /// such frame's content size by streaming it through a fixed window.
    pub(crate) fn check(
        &mut self,
        blob: &[u8],
        layout: &TileLayout,
        needed: &[bool],
        out_bytes: u64,
        threads: usize,
    ) -> Result<(), DecodeError> {
        let version = layout.version();
        let mut max_scratch = 0u64;
        // Frames may legally share bytes, so bound the sum of all claims by what the whole blob could produce:
        // without this, many chunks pointing at one frame would multiply the work and memory.
        let mut total_claimed = 0u64;
        for (c, e) in layout.chunks().iter().enumerate() {
            if !needed[c] {
                continue;
            }
            let n = e.nnz();
            for kind in [FrameKind::Gaps, FrameKind::Vals, FrameKind::ValueExceptions, FrameKind::GapExceptions] {
                let frame = e.frame(kind);
                if !frame.is_present() {
                    continue;
                }
                let size = frame_content_size(&blob[frame.range()]).map_err(|p| frame_err(c, kind, frame, p))?;
                total_claimed = total_claimed.saturating_add(size);
                let ok = match kind {
                    FrameKind::Gaps | FrameKind::Vals => size == 2 * n,
                    _ => version == Version::V2 && size % 8 == 0 && size / 8 <= n,
                };
                if !ok {
                    let want = match kind {
                        FrameKind::Gaps | FrameKind::Vals => format!("exactly 2n = {} bytes", 2 * n),
                        _ => format!("8k bytes with k <= n = {n}"),
                    };
                    return Err(frame_err(
                        c,
                        kind,
                        frame,
                        format!("declares {size} bytes of content, the chunk needs {want}"),
                    ));
                }
            }
            // gaps + vals + exceptions (4n) and, for row selections, the chunk's decoded rows (8n).
            max_scratch = max_scratch.max(16 * n);
        }
        if total_claimed > (blob.len() as u64).saturating_mul(MAX_RATIO) {
            return Err(DecodeError::Format(FormatError::Layout {
                field: Field::Header("n_chunks"),
                offset: header_offset::N_CHUNKS as u64,
                rule: format!(
                    "the frames claim {total_claimed} decompressed bytes in all, more than a {}-byte tile can hold",
                    blob.len()
                ),
            }));
        }
        let claimed = out_bytes.saturating_add(max_scratch.saturating_mul(threads as u64));
        if usize::try_from(claimed).is_err() || claimed > isize::MAX as u64 {
            return Err(DecodeError::TooLarge { bytes: claimed });
        }
        if claimed <= trust_budget(blob.len()) {
            return Ok(());
        }
        if self.sink.is_empty() {
            self.sink = vec![0; SINK_LEN];
        }
        // A separate context whose window (which libzstd allocates itself, sized from the frame header) is
        // capped by the trust budget, so proving a claim never allocates for the claim.
        let budget = trust_budget(blob.len());
        let window_log = (63 - budget.leading_zeros()).clamp(20, 30);
        let dctx = self.proof_dctx.get_or_insert_with(|| {
            let mut d = DCtx::create();
            let _ = d.set_parameter(zstd_safe::DParameter::WindowLogMax(window_log));
            d
        });
        let _ = dctx.set_parameter(zstd_safe::DParameter::WindowLogMax(window_log));
        for (c, e) in layout.chunks().iter().enumerate() {
            if !needed[c] {
                continue;
            }
            for kind in [FrameKind::Gaps, FrameKind::Vals, FrameKind::ValueExceptions, FrameKind::GapExceptions] {
                let frame = e.frame(kind);
                if frame.is_present() {
                    let src = &blob[frame.range()];
                    let size = frame_content_size(src).map_err(|p| frame_err(c, kind, frame, p))?;
                    verify_content_size(dctx, src, size, &mut self.sink).map_err(|p| frame_err(c, kind, frame, p))?;
                }
            }
        }
        Ok(())
    }
}
