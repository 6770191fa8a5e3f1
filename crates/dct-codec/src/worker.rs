//! A decode thread's state, kept across chunks and tiles.

use zstd_safe::DCtx;

use crate::planes::Exception;

/// Per-thread decoding state: a zstd context and scratch buffers, reused across chunks and tiles.
pub(crate) struct Worker {
    pub(crate) dctx: DCtx<'static>,
    pub(crate) gaps: Vec<u8>,
    pub(crate) vals: Vec<u8>,
    pub(crate) exc: Vec<u8>,
    pub(crate) chunk_indices: Vec<i32>,
    pub(crate) chunk_values: Vec<u32>,
    /// Exceptions read by [`Decoder::decode_planes_into`](crate::Decoder::decode_planes_into) from this worker's chunks, in chunk order.
    pub(crate) vexc_out: Vec<Exception>,
    pub(crate) gexc_out: Vec<Exception>,
}

impl Worker {
    pub(crate) fn new() -> Self {
        Worker {
            dctx: DCtx::create(),
            gaps: Vec::new(),
            vals: Vec::new(),
            exc: Vec::new(),
            chunk_indices: Vec::new(),
            chunk_values: Vec::new(),
            vexc_out: Vec::new(),
            gexc_out: Vec::new(),
        }
    }
}
