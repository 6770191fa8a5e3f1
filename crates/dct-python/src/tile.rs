//! One tile from Python: parse (structure and CRC, nothing decompressed), decode into fresh arrays or the caller's
//! buffers, gather rows of a decoded tile, and the helpers of `deltacells.format` and `deltacells.reader`.

use bytes::Bytes;
use dct_codec::CountValue;
use dct_format::{ParsedTile, compute_crc};
use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyMemoryView, PyTuple};

use crate::arrays::{Values, owned, writable};
use crate::errors::{decode_error, format_error, index_error, value_error};
use crate::process::with_decoder;

/// A parsed tile: its bytes (shared with the Python `bytes` object they came from, or copied) and its validated
/// layout.
#[pyclass(module = "deltacells._core", name = "Tile", frozen)]
pub(crate) struct PyTile {
    tile: ParsedTile<Bytes>,
}

impl PyTile {
    /// Parses `blob` (structure only; the CRC too with `verify`).
    pub(crate) fn parse(blob: Bytes, verify: bool) -> PyResult<Self> {
        let tile = ParsedTile::parse(blob).map_err(|e| format_error(e.to_string()))?;
        if verify {
            tile.verify_crc().map_err(|e| format_error(e.to_string()))?;
        }
        Ok(PyTile { tile })
    }
}

/// The bytes of `data`: a `bytes` object is shared (kept alive, not copied); a `bytearray`, a uint8 numpy array or
/// any other buffer (`memoryview`, `mmap`) is copied, since its contents could change while a decode reads it
/// without the GIL.
pub(crate) fn blob_of(data: &Bound<'_, PyAny>) -> PyResult<Bytes> {
    if data.is_instance_of::<PyBytes>() || data.is_instance_of::<PyByteArray>() {
        let backed: PyBackedBytes = data.extract()?;
        return Ok(Bytes::from_owner(backed));
    }
    if let Ok(array) = data.extract::<PyReadonlyArray1<'_, u8>>() {
        return Ok(match array.as_slice() {
            Ok(s) => Bytes::copy_from_slice(s),
            Err(_) => Bytes::from(array.as_array().iter().copied().collect::<Vec<u8>>()),
        });
    }
    let copied = PyMemoryView::from(data).and_then(|view| view.call_method0("tobytes")).map_err(|_| {
        value_error(format!(
            "the data must be bytes, bytearray, memoryview, mmap or a 1-D uint8 numpy array, not {}",
            data.get_type().name().map_or_else(|_| "this object".to_string(), |n| n.to_string())
        ))
    })?;
    Ok(Bytes::from_owner(copied.extract::<PyBackedBytes>()?))
}

#[pymethods]
impl PyTile {
    /// Parses the tile in `data` (`bytes` are shared, other buffers copied); checks the CRC too with `verify`.
    #[new]
    #[pyo3(signature = (data, verify = false))]
    fn new(data: &Bound<'_, PyAny>, verify: bool) -> PyResult<Self> {
        PyTile::parse(blob_of(data)?, verify)
    }

    /// The tile's bytes (a copy), as it was parsed from.
    fn to_bytes<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, self.tile.blob())
    }

    /// Header fields and chunk entries as a dict (`chunks`: one 12-tuple per chunk: cell_lo, cell_hi, nnz_lo,
    /// nnz_hi, then offset and length of the gaps, vals, vexc and gexc frames).
    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let h = self.tile.layout().header();
        let d = PyDict::new(py);
        let fields = [
            ("version", u64::from(h.version.number())),
            ("flags", 0),
            ("n_cells", h.n_cells),
            ("nnz", h.nnz),
            ("n_genes", u64::from(h.n_genes)),
            ("indptr_off", h.indptr_off),
            ("total_size", h.total_size),
            ("crc32", u64::from(h.crc32)),
        ];
        for (key, value) in fields {
            d.set_item(key, value)?;
        }
        let chunks: Vec<Bound<'py, PyTuple>> = self
            .tile
            .layout()
            .chunks()
            .iter()
            .map(|e| {
                let f = [e.gaps, e.vals, e.vexc, e.gexc];
                PyTuple::new(
                    py,
                    [e.cell_lo, e.cell_hi, e.nnz_lo, e.nnz_hi]
                        .into_iter()
                        .chain(f.iter().flat_map(|r| [r.offset, r.len]))
                        .collect::<Vec<u64>>(),
                )
            })
            .collect::<PyResult<_>>()?;
        d.set_item("chunks", chunks)?;
        Ok(d)
    }

    /// The tile's row offsets, an int64 array of `n_cells + 1` (a copy, aligned).
    fn indptr<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<i64>> {
        let n = self.tile.layout().header().n_cells as usize;
        let mut out = Vec::with_capacity(n + 1);
        self.tile.indptr().copy_range_into(0, n, &mut out);
        owned(py, out)
    }

    /// Cells.
    #[getter]
    fn n_cells(&self) -> u64 {
        self.tile.layout().header().n_cells
    }

    /// Genes.
    #[getter]
    fn n_genes(&self) -> u32 {
        self.tile.layout().header().n_genes
    }

    /// Stored nonzeros.
    #[getter]
    fn nnz(&self) -> u64 {
        self.tile.layout().header().nnz
    }

    /// Chunks.
    #[getter]
    fn n_chunks(&self) -> usize {
        self.tile.layout().chunks().len()
    }

    /// Size in bytes.
    #[getter]
    fn nbytes(&self) -> usize {
        self.tile.blob().len()
    }

    /// Header version (1 or 2).
    #[getter]
    fn version(&self) -> u32 {
        self.tile.layout().header().version.number()
    }

    /// Checks the CRC-32 of the payload; `FormatError` if it does not match.
    fn verify(&self, py: Python<'_>) -> PyResult<()> {
        let tile = &self.tile;
        py.detach(|| tile.verify_crc()).map_err(|e| format_error(e.to_string()))
    }

    /// Decodes the whole tile with `threads` threads (the GIL released). Without output buffers: returns
    /// `(indices, values)`, numpy arrays owning the decoded vectors. With both: fills their first `nnz` elements
    /// and returns `nnz`. `values` is `"int32"` or `"float32"`.
    #[pyo3(signature = (values, threads = 1, out_indices = None, out_values = None))]
    fn decode<'py>(
        &self,
        py: Python<'py>,
        values: &str,
        threads: usize,
        out_indices: Option<Bound<'py, PyAny>>,
        out_values: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if threads == 0 {
            return Err(value_error("threads must be at least 1"));
        }
        let threads = threads.min(self.tile.layout().chunks().len().max(1));
        match Values::parse(values)? {
            Values::Int32 => self.decode_as::<i32>(py, threads, out_indices, out_values, "int32"),
            Values::Float32 => self.decode_as::<f32>(py, threads, out_indices, out_values, "float32"),
        }
    }
}

impl PyTile {
    fn decode_as<'py, V: CountValue + numpy::Element>(
        &self,
        py: Python<'py>,
        threads: usize,
        out_indices: Option<Bound<'py, PyAny>>,
        out_values: Option<Bound<'py, PyAny>>,
        dtype: &str,
    ) -> PyResult<Bound<'py, PyAny>> {
        let tile = &self.tile;
        match (out_indices, out_values) {
            (Some(oi), Some(ov)) => {
                let oi = oi.cast_into::<PyArray1<i32>>().map_err(|_| bad_out("out_indices", "int32"))?;
                let ov = ov.cast_into::<PyArray1<V>>().map_err(|_| bad_out("out_values", dtype))?;
                let mut wi = writable(&oi, "out_indices", "int32")?;
                let mut wv = writable(&ov, "out_values", dtype)?;
                let (si, sv) = (wi.as_slice_mut()?, wv.as_slice_mut()?);
                let mut indptr = Vec::new();
                let got = py.detach(|| with_decoder(threads, false, |d| d.decode_to(tile, &mut indptr, si, sv)));
                let header = got.map_err(|e| decode_error(&e))?;
                Ok(header.nnz.into_pyobject(py)?.into_any())
            }
            (None, None) => {
                let got = py.detach(|| with_decoder(threads, false, |d| d.decode::<V>(tile)));
                let tile = got.map_err(|e| decode_error(&e))?;
                Ok(PyTuple::new(py, [owned(py, tile.indices).into_any(), owned(py, tile.values).into_any()])?
                    .into_any())
            }
            _ => Err(value_error("pass both out_indices and out_values, or neither")),
        }
    }
}

fn bad_out(name: &str, dtype: &str) -> PyErr {
    value_error(format!("{name} must be a writable contiguous 1-D {dtype} numpy array"))
}

/// Reads the tile file at `path` (any size; refused only by the parser).
#[pyfunction]
#[pyo3(signature = (path, verify = false))]
pub(crate) fn read_tile_file(py: Python<'_>, path: std::path::PathBuf, verify: bool) -> PyResult<PyTile> {
    let bytes = py.detach(|| std::fs::read(&path)).map_err(|e| {
        let message = format!("{}: {e}", path.display());
        if e.kind() == std::io::ErrorKind::NotFound {
            pyo3::exceptions::PyFileNotFoundError::new_err(message)
        } else {
            pyo3::exceptions::PyOSError::new_err(message)
        }
    })?;
    PyTile::parse(Bytes::from(bytes), verify).map_err(|e| {
        let message = format!("{}: {}", path.display(), e.value(py));
        format_error(message)
    })
}

/// CRC-32 (IEEE) of bytes `64..` of a tile (its payload), as the header stores it.
#[pyfunction]
pub(crate) fn payload_crc32(py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<u32> {
    let blob = blob_of(data)?;
    if blob.len() < 64 {
        return Err(format_error(format!("tile is {} bytes, shorter than the 64-byte header", blob.len())));
    }
    Ok(py.detach(|| compute_crc(&blob)))
}

/// The output row offsets of gathering `rows` of a CSR matrix with row offsets `indptr`: int64, `len(rows) + 1`
/// entries from 0. `IndexError` for a row outside the matrix.
#[pyfunction]
pub(crate) fn row_offsets<'py>(
    py: Python<'py>,
    indptr: PyReadonlyArray1<'py, i64>,
    rows: PyReadonlyArray1<'py, i64>,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let ip = indptr.as_slice()?;
    let rows = rows.as_slice()?;
    Ok(owned(py, offsets(ip, rows, u64::MAX)?))
}

/// Row offsets of the gather of `rows` from `indptr`, checking every row and every row's range (`0 <= lo <= hi
/// <= limit`, the length of the index and value arrays).
fn offsets(ip: &[i64], rows: &[i64], limit: u64) -> PyResult<Vec<i64>> {
    let n_rows = ip.len().saturating_sub(1);
    let mut out = Vec::with_capacity(rows.len() + 1);
    out.push(0i64);
    let mut total = 0i64;
    for (position, &r) in rows.iter().enumerate() {
        let r = usize::try_from(r).ok().filter(|&r| r < n_rows).ok_or_else(|| {
            index_error(format!(
                "row {r} (position {position} of the request) is out of range: there are {n_rows} rows"
            ))
        })?;
        let (lo, hi) = (ip[r], ip[r + 1]);
        if lo < 0 || hi < lo || hi as u64 > limit {
            return Err(value_error(format!(
                "indptr[{r}..={}] is [{lo}, {hi}], not a valid row of arrays of {limit} elements",
                r + 1
            )));
        }
        total += hi - lo;
        out.push(total);
    }
    Ok(out)
}

/// Gathers `rows` (any order, repeats allowed) of a decoded tile's arrays. Without output buffers: returns
/// `(indptr, indices, values)`, fresh arrays. With both: fills their first `nnz` elements and returns
/// `(indptr, nnz)`. Values convert from int32 to float32, not the other way.
#[pyfunction]
#[pyo3(signature = (indptr, indices, values, rows, values_dtype, out_indices = None, out_values = None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn gather<'py>(
    py: Python<'py>,
    indptr: PyReadonlyArray1<'py, i64>,
    indices: PyReadonlyArray1<'py, i32>,
    values: Bound<'py, PyAny>,
    rows: PyReadonlyArray1<'py, i64>,
    values_dtype: &str,
    out_indices: Option<Bound<'py, PyAny>>,
    out_values: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyTuple>> {
    let want = Values::parse(values_dtype)?;
    if let Ok(v) = values.extract::<PyReadonlyArray1<'py, i32>>() {
        match want {
            Values::Int32 => gather_as::<i32, i32>(py, &indptr, &indices, &v, &rows, out_indices, out_values, "int32"),
            Values::Float32 => {
                gather_as::<i32, f32>(py, &indptr, &indices, &v, &rows, out_indices, out_values, "float32")
            }
        }
    } else if let Ok(v) = values.extract::<PyReadonlyArray1<'py, f32>>() {
        match want {
            Values::Float32 => {
                gather_as::<f32, f32>(py, &indptr, &indices, &v, &rows, out_indices, out_values, "float32")
            }
            Values::Int32 => Err(value_error("cannot convert float32 values to int32")),
        }
    } else {
        Err(value_error("a decoded tile's values must be a 1-D int32 or float32 numpy array"))
    }
}

/// A value conversion the gather may make.
trait Convert<T> {
    fn convert(self) -> T;
}

impl Convert<i32> for i32 {
    fn convert(self) -> i32 {
        self
    }
}

impl Convert<f32> for i32 {
    fn convert(self) -> f32 {
        self as f32
    }
}

impl Convert<f32> for f32 {
    fn convert(self) -> f32 {
        self
    }
}

#[allow(clippy::too_many_arguments)]
fn gather_as<'py, S, D>(
    py: Python<'py>,
    indptr: &PyReadonlyArray1<'py, i64>,
    indices: &PyReadonlyArray1<'py, i32>,
    values: &PyReadonlyArray1<'py, S>,
    rows: &PyReadonlyArray1<'py, i64>,
    out_indices: Option<Bound<'py, PyAny>>,
    out_values: Option<Bound<'py, PyAny>>,
    dtype: &str,
) -> PyResult<Bound<'py, PyTuple>>
where
    S: numpy::Element + Copy + Convert<D> + Sync,
    D: numpy::Element + Copy + Default + Send,
{
    let (ip, si, sv, rows) = (indptr.as_slice()?, indices.as_slice()?, values.as_slice()?, rows.as_slice()?);
    let limit = si.len().min(sv.len()) as u64;
    let out_ip = offsets(ip, rows, limit)?;
    let nnz = *out_ip.last().expect("at least one entry") as usize;
    let copy = |di: &mut [i32], dv: &mut [D]| {
        for (j, &r) in rows.iter().enumerate() {
            let (lo, hi) = (ip[r as usize] as usize, ip[r as usize + 1] as usize);
            let at = out_ip[j] as usize;
            di[at..at + hi - lo].copy_from_slice(&si[lo..hi]);
            for (d, &s) in dv[at..at + hi - lo].iter_mut().zip(&sv[lo..hi]) {
                *d = s.convert();
            }
        }
    };
    match (out_indices, out_values) {
        (Some(oi), Some(ov)) => {
            let oi = oi.cast_into::<PyArray1<i32>>().map_err(|_| bad_out("out_indices", "int32"))?;
            let ov = ov.cast_into::<PyArray1<D>>().map_err(|_| bad_out("out_values", dtype))?;
            let mut wi = writable(&oi, "out_indices", "int32")?;
            let mut wv = writable(&ov, "out_values", dtype)?;
            let (di, dv) = (wi.as_slice_mut()?, wv.as_slice_mut()?);
            for (len, name) in [(di.len(), "out_indices"), (dv.len(), "out_values")] {
                if len < nnz {
                    return Err(value_error(format!("{name} holds {len} elements but {nnz} are required")));
                }
            }
            py.detach(|| copy(&mut di[..nnz], &mut dv[..nnz]));
            PyTuple::new(py, [owned(py, out_ip).into_any(), nnz.into_pyobject(py)?.into_any()])
        }
        (None, None) => {
            let mut di = vec![0i32; nnz];
            let mut dv = vec![D::default(); nnz];
            py.detach(|| copy(&mut di, &mut dv));
            PyTuple::new(py, [owned(py, out_ip).into_any(), owned(py, di).into_any(), owned(py, dv).into_any()])
        }
        _ => Err(value_error("pass both out_indices and out_values, or neither")),
    }
}
