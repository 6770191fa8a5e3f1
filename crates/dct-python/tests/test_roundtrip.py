"""encode_tile / Tile.decode / DecodedTile.gather against scipy: every input kind, version-2 ranges, buffers."""

import mmap
import pickle

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import make_counts, same
from deltacells import Tile, encode_tile, permute_columns, read_tile, write_tile
from deltacells.reader import row_offsets


@pytest.mark.parametrize("shape", [(1, 1), (1, 7), (5, 1), (100, 50), (500, 300)])
@pytest.mark.parametrize("density", [0.0, 0.02, 0.3, 1.0])
@pytest.mark.parametrize("n_chunks", [1, 3, 8, 1000])
def test_roundtrip(shape, density, n_chunks):
    m = make_counts(*shape, density=density, seed=sum(shape) + n_chunks)
    t = Tile(encode_tile(m, n_chunks=n_chunks, level=3))
    assert (t.n_cells, t.n_genes, t.nnz) == (shape[0], shape[1], m.nnz)
    assert 1 <= t.n_chunks <= min(n_chunks, shape[0])
    for values in (np.int32, np.float32):
        d = t.decode(values=values)
        assert d.values.dtype == values and d.indices.dtype == np.int32 and d.indptr.dtype == np.int64
        assert same(d.to_scipy(), m)


def test_version_2_ranges_counts_and_genes_beyond_uint16():
    rng = np.random.default_rng(5)
    n_genes = 200_000
    rows, cols = rng.integers(0, 50, 400), rng.integers(0, n_genes, 400)
    vals = rng.choice([1, 65535, 65536, 70000, 2**24 + 1, 2**31 - 1], 400)
    m = sp.coo_matrix((vals.astype(np.int64), (rows, cols)), shape=(50, n_genes)).tocsr()
    m.sum_duplicates()
    m.data = np.minimum(m.data, 2**31 - 1)
    t = Tile(encode_tile(m, n_chunks=4, level=3), verify=True)
    d = t.decode(values=np.int32)
    assert same(d.to_scipy(), m) and d.values.max() == m.data.max() and d.indices.max() == m.indices.max()


def test_input_kinds_are_accepted_and_never_modified():
    m = make_counts(40, 30, density=0.3, seed=2)
    for x in (m, m.tocsc(), m.tocoo(), m.toarray(), m.astype(np.int64), m.astype(np.float64), m.astype(np.uint16)):
        before = x.copy()
        t = Tile(encode_tile(x, level=3))
        assert same(t.decode().to_scipy(), m)
        assert same(x, before) if sp.issparse(x) else np.array_equal(x, before)
    assert same(Tile(encode_tile((m > 0).astype(bool))).to_scipy(), (m > 0).astype(np.float32))


def test_duplicates_summed_unsorted_and_explicit_zeros_dropped():
    raw = sp.csr_matrix((np.array([2.0, 0.0, 3.0, 1.0]), np.array([5, 1, 5, 0]), np.array([0, 4, 4])), shape=(2, 8))
    d = Tile(encode_tile(raw)).decode()
    assert d.nnz == 2 and list(d.indices) == [0, 5] and list(d.values) == [1, 5]


@pytest.mark.parametrize("bad,match", [(-1.0, "negative"), (1.5, "integer"), (np.nan, "finite"), (np.inf, "finite"),
                                       (2.0**31, "2\\^31")])
def test_invalid_values_rejected_with_cell_and_gene(bad, match):
    m = make_counts(10, 10, density=0.5, seed=3).tolil()
    m[4, 7] = bad
    with pytest.raises(ValueError, match=match) as e:
        encode_tile(m.tocsr())
    assert "row 4" in str(e.value) and "column 7" in str(e.value)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_an_unrepresentable_count_is_named_exactly(dtype):
    m = sp.csr_matrix(np.array([[0, 2**31], [3, 0]], dtype=dtype))
    with pytest.raises(ValueError) as e:
        encode_tile(m)
    assert "value 2147483648 " in str(e.value), str(e.value)


def test_invalid_arguments():
    m = make_counts(10, 10)
    with pytest.raises(ValueError, match="n_chunks"):
        encode_tile(m, n_chunks=0)
    with pytest.raises(ValueError, match="level"):
        encode_tile(m, level=100)
    with pytest.raises(ValueError, match="dtype"):
        encode_tile(np.array([["a"]], dtype=object))
    with pytest.raises(ValueError, match="format_version"):
        encode_tile(m, format_version=3)


def test_deterministic_across_thread_counts():
    m = make_counts(3000, 400, density=0.05, seed=4)
    assert encode_tile(m, threads=1, level=5) == encode_tile(m, threads=4, level=5)


def test_chunks_are_balanced_by_nonzeros():
    m = make_counts(1000, 200, density=0.1, seed=5)
    info = Tile(encode_tile(m, n_chunks=8, level=1)).info
    assert info.n_chunks == 8 and all(c.nnz < 1.5 * m.nnz / 8 for c in info.chunks)


@pytest.mark.parametrize("threads", [1, 2, 4, 16])
def test_parallel_decode_matches_serial(threads):
    m = make_counts(2000, 300, density=0.05, seed=6)
    t = Tile(encode_tile(m, n_chunks=16, level=3))
    assert same(t.decode(threads=threads).to_scipy(), m)


def test_caller_buffers_are_used_and_shared():
    m = make_counts(300, 100, density=0.1, seed=7)
    t = Tile(encode_tile(m, n_chunks=4, level=3))
    oi, ov = np.full(m.nnz + 10, -1, np.int32), np.full(m.nnz + 10, -1, np.float32)
    scratch = np.empty(2 * t.info.scratch_nbytes, np.uint8)
    for _ in range(2):
        d = t.decode(values=np.float32, threads=2, out_indices=oi, out_values=ov, scratch=scratch)
        assert np.shares_memory(d.indices, oi) and np.shares_memory(d.values, ov)
        assert (oi[m.nnz :] == -1).all() and (ov[m.nnz :] == -1).all() and same(d.to_scipy(), m)
    # The original's executor= is accepted (the Rust decoder has threads of its own), and the scratch size the
    # info gives is the largest chunk's.
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        assert same(t.decode(threads=2, executor=pool).to_scipy(), m)
    assert t.info.max_chunk_nnz == max(c.nnz for c in t.info.chunks)
    assert t.info.scratch_nbytes == 4 * t.info.max_chunk_nnz


def test_wrong_buffers_rejected():
    m = make_counts(50, 20, density=0.3, seed=8)
    t = Tile(encode_tile(m))
    n = m.nnz
    for kw in (
        dict(out_indices=np.empty(n - 1, np.int32)),
        dict(out_indices=np.empty(n, np.int64)),
        dict(out_values=np.empty(n, np.float32)),  # int32 values by default
        dict(scratch=np.empty(1, np.uint8)),
        dict(values=np.int64),
        dict(out_indices=np.empty(n, np.int32)[::-1]),
    ):
        with pytest.raises(ValueError):
            t.decode(**kw)
    ro = np.empty(n, np.int32)
    ro.flags.writeable = False
    with pytest.raises(ValueError):
        t.decode(out_indices=ro)


def test_accepts_various_buffer_types(tmp_path):
    m = make_counts(30, 20, seed=9)
    blob = encode_tile(m)
    p = tmp_path / "t.dct"
    p.write_bytes(blob)
    with open(p, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        sources = [blob, bytearray(blob), memoryview(blob), np.frombuffer(blob, np.uint8), mm]
        for src in sources:
            assert same(Tile(src).to_scipy(), m)
    # A tile of over 1 MiB through each kind of buffer, and a strided view (made whole before it is read).
    big = make_counts(2000, 3000, density=0.2, seed=10)
    big_blob = encode_tile(big, level=1)
    assert len(big_blob) > 1 << 20
    every_other = np.zeros(2 * len(big_blob), np.uint8)
    every_other[::2] = np.frombuffer(big_blob, np.uint8)
    strided = memoryview(every_other)[::2]
    assert not strided.contiguous
    for src in [big_blob, bytearray(big_blob), memoryview(big_blob), np.frombuffer(big_blob, np.uint8), strided]:
        assert same(Tile(src, verify=True).to_scipy(), big)
    misaligned = np.zeros(len(blob) + 3, np.uint8)
    misaligned[3:] = np.frombuffer(blob, np.uint8)
    assert same(Tile(misaligned[3:]).to_scipy(), m)
    assert write_tile(tmp_path / "w.dct", m) == len(blob) and same(read_tile(tmp_path / "w.dct").to_scipy(), m)
    with pytest.raises(FileNotFoundError):
        read_tile(tmp_path / "missing.dct")


def test_gather_matches_scipy_and_keeps_order_and_repeats():
    m = make_counts(400, 120, density=0.1, seed=20)
    dec = Tile(encode_tile(m, n_chunks=4, level=3)).decode(values=np.int32)
    rows = np.random.default_rng(1).permutation(400)[:150]
    for dt in (np.float32, np.int32):
        b = dec.gather(rows, values_dtype=dt)
        assert b.values.dtype == dt and b.shape == (150, 120) and same(b.to_scipy(), m[rows])
    rows = [5, 5, 399, 0, 5, 17]
    assert same(dec.gather(rows).to_scipy(), m[rows])
    empty = dec.gather([])
    assert empty.n_rows == 0 and empty.nnz == 0 and list(empty.indptr) == [0]
    for bad in ([-1], [400], [0, 1000]):
        with pytest.raises(IndexError):
            dec.gather(bad)


def test_gather_takes_rows_as_numpy_means_them():
    m = make_counts(60, 30, density=0.2, seed=21)
    dec = Tile(encode_tile(m, level=1)).decode()
    mask = np.zeros(60, bool)
    mask[[5, 7, 59]] = True
    assert same(dec.gather(mask).to_scipy(), m[[5, 7, 59]])
    assert list(row_offsets(dec.indptr, mask)) == list(row_offsets(dec.indptr, [5, 7, 59]))
    for bad in ([1.9], np.array([0.0, 1.0])):
        with pytest.raises(TypeError, match="row indices must be integers"):
            dec.gather(bad)
        with pytest.raises(TypeError, match="row indices must be integers"):
            row_offsets(dec.indptr, bad)
    with pytest.raises(IndexError, match="boolean mask selects rows with one entry per row"):
        dec.gather(mask[:10])
    for bad, row, position in (([3, 60], 60, 1), ([-1], -1, 0), ([0, 10**20], 10**20, 1)):
        with pytest.raises(IndexError, match=rf"row {row} \(position {position} of the request\) is out of range: "
                                             r"there are 60 rows"):
            dec.gather(bad)
    # A tile pickles as its bytes and comes back the same.
    tile = Tile(encode_tile(m, level=1))
    back = pickle.loads(pickle.dumps(tile))
    assert back.to_bytes() == tile.to_bytes() and same(back.to_scipy(), m)
    with pytest.raises(ValueError, match="threads = 100000: at most 1024 encode threads"):
        encode_tile(m, threads=100_000)
    for option, value in (("level", 2**40), ("threads", -1), ("threads", 0), ("n_chunks", 2**64)):
        with pytest.raises(ValueError, match=f"{option} = {value}: must be at (least|most)"):
            encode_tile(m, **{option: value})


def test_gather_into_caller_buffers():
    m = make_counts(200, 60, density=0.2, seed=21)
    dec = Tile(encode_tile(m)).decode()
    rows = [3, 1, 4, 1, 5, 9, 2, 6]
    need = int(row_offsets(dec.indptr, rows)[-1])
    oi, ov = np.full(need + 10, -1, np.int32), np.full(need + 10, -1, np.float32)
    b = dec.gather(rows, out_indices=oi, out_values=ov)
    assert np.shares_memory(b.indices, oi) and np.shares_memory(b.values, ov) and (oi[need:] == -1).all()
    assert same(b.to_scipy(), m[rows])
    with pytest.raises(ValueError):
        dec.gather(rows, out_indices=np.empty(need - 1, np.int32), out_values=ov)
    with pytest.raises(IndexError):
        row_offsets(dec.indptr, [200])


def test_float_tile_cannot_gather_as_int():
    dec = Tile(encode_tile(make_counts(20, 10, seed=3))).decode(values=np.float32)
    with pytest.raises(ValueError):
        dec.gather([0, 1], values_dtype=np.int32)
    assert dec.gather([0, 1]).values.dtype == np.float32


def test_permute_columns_does_not_modify_its_input():
    m = make_counts(30, 12, density=0.4, seed=22)
    before = (m.data.copy(), m.indices.copy(), m.indptr.copy())
    order = np.random.default_rng(2).permutation(12)
    out = permute_columns(m, order)
    assert same(out, m[:, order]) and out.has_sorted_indices
    assert all(np.array_equal(a, b) for a, b in zip(before, (m.data, m.indices, m.indptr)))
    assert not np.shares_memory(out.data, m.data)
    with pytest.raises(ValueError):
        permute_columns(m, [0] * 12)


def test_to_torch_and_dense_helpers():
    m = make_counts(10, 8, density=0.5, seed=23)
    b = Tile(encode_tile(m)).decode(values=np.float32).gather(np.arange(10))
    assert np.array_equal(b.to_dense(), m.toarray())
