"""Tile structure from Python: header and chunk table, every rule a FormatError naming it, CRC, constants."""

import struct

import deltacells
import numpy as np
import pytest
from conftest import make_counts
from deltacells import FormatError, Tile, encode_tile, read_tile
from deltacells import format as fmt


@pytest.fixture(scope="module")
def blob():
    return encode_tile(make_counts(200, 80, seed=1), n_chunks=4, level=3)


def test_constants():
    assert fmt.MAGIC == b"DELTACEL" and fmt.VERSION == 2 and fmt.HEADER_SIZE == 64
    assert fmt.CHUNK_ENTRY_SIZE == 96 and fmt.chunk_entry_size(1) == 64 and fmt.chunk_entry_size(2) == 96
    assert fmt.MAX_GENES == 2**31 and fmt.max_genes(1) == 65536 and fmt.MAX_VALUE == 2**31 - 1
    assert issubclass(FormatError, ValueError) and fmt.FormatError is deltacells.FormatError
    assert fmt.align8(0) == 0 and fmt.align8(1) == 8 and fmt.align8(64) == 64
    with pytest.raises(ValueError):
        fmt.chunk_entry_size(3)


def test_header_layout(blob):
    info = fmt.parse_tile_info(blob)
    assert blob[:8] == fmt.MAGIC
    assert (info.version, info.n_cells, info.n_genes, info.n_chunks) == (2, 200, 80, 4)
    assert info.total_size == len(blob) and info.indptr_off % 8 == 0
    assert info.indptr_off >= 64 + 4 * fmt.CHUNK_ENTRY_SIZE
    assert info.chunks[0].cell_lo == 0 and info.chunks[-1].cell_hi == 200
    for a, b in zip(info.chunks, info.chunks[1:]):
        assert a.cell_hi == b.cell_lo and a.nnz_hi == b.nnz_lo
    assert sum(c.nnz for c in info.chunks) == info.nnz
    assert info.scratch_nbytes == 4 * max(c.nnz for c in info.chunks)
    # The header fields agree with the bytes (independent of the parser).
    magic, version, flags, n_cells, nnz, n_genes, n_chunks = struct.unpack_from("<8sIIQQII", blob, 0)
    assert (version, flags, n_cells, nnz, n_genes, n_chunks) == (2, 0, 200, info.nnz, 80, 4)
    assert fmt.payload_crc32(blob) == info.crc32 == struct.unpack_from("<I", blob, 56)[0]


def _patched(blob, offset, fmt_, value):
    b = bytearray(blob)
    struct.pack_into(fmt_, b, offset, value)
    return bytes(b)


@pytest.mark.parametrize(
    "offset,code,value,match",
    [(0, "<Q", 0, "magic"), (8, "<I", 99, "version"), (12, "<I", 1, "flags"), (32, "<I", 0, "n_genes")],
)
def test_header_rules_name_the_field(blob, offset, code, value, match):
    with pytest.raises(FormatError, match=match):
        Tile(_patched(blob, offset, code, value))


@pytest.mark.parametrize("cut", [0, 10, 63, 64, 74, -1, -100])
def test_truncated(blob, cut):
    with pytest.raises(FormatError):
        Tile(blob[:cut])


def test_trailing_garbage_rejected(blob):
    with pytest.raises(FormatError, match="total_size"):
        Tile(blob + b"\0" * 8)


def test_chunk_table_rules(blob):
    entry = 64 + 96  # chunk 1
    with pytest.raises(FormatError, match="chunk 1.*cell_lo|cell_lo.*chunk 1"):
        cell_lo = struct.unpack_from("<Q", blob, entry)[0]
        Tile(_patched(blob, entry, "<Q", cell_lo + 1))
    with pytest.raises(FormatError, match="offset"):
        Tile(_patched(blob, 64 + 32, "<Q", len(blob) + 8))  # chunk 0's gaps frame outside the tile


def test_inconsistent_indptr_rejected(blob):
    info = fmt.parse_tile_info(blob)
    with pytest.raises(FormatError, match="indptr"):
        Tile(_patched(blob, info.indptr_off + 5 * 8, "<q", 10**9))


def test_crc_detects_payload_corruption(blob, tmp_path):
    Tile(blob, verify=True).verify()
    info = fmt.parse_tile_info(blob)
    b = bytearray(blob)
    b[info.chunks[1].vals_off + 3] ^= 0xFF
    t = Tile(bytes(b), verify=False)  # the structure is intact
    with pytest.raises(FormatError, match="CRC"):
        t.verify()
    with pytest.raises(FormatError, match="CRC"):
        Tile(bytes(b), verify=True)
    # Checked unless turned off explicitly: by Tile and read_tile alike.
    with pytest.raises(FormatError, match="CRC"):
        Tile(bytes(b))
    with pytest.raises(FormatError, match="CRC"):
        Tile(bytes(b), verify=None)
    path = tmp_path / "flipped.dct"
    path.write_bytes(bytes(b))
    with pytest.raises(FormatError, match="CRC"):
        read_tile(path)
    assert read_tile(path, verify=False).nnz == t.nnz


def test_garbage_stream_raises_not_crashes(blob):
    info = fmt.parse_tile_info(blob)
    c = info.chunks[2]
    b = bytearray(blob)
    rng = np.random.default_rng(3)
    b[c.gaps_off : c.gaps_off + c.gaps_len] = rng.integers(0, 256, c.gaps_len, dtype=np.uint8).tobytes()
    t = Tile(bytes(b), verify=False)  # past the CRC: the decoder's own checks
    with pytest.raises(FormatError, match="corrupt"):
        t.decode()
    with pytest.raises(ValueError, match="chunk 2"):
        t.decode(threads=3)


def test_public_names():
    import importlib

    for name in deltacells.__all__:
        assert hasattr(deltacells, name), name
    # The names PYTHON-API.md and CORPUS.md promise, spelled out: dropping one from __all__ must fail here.
    promised = {"open_dataset", "DeltaCellsDataset", "SparseBatch", "Tile", "TileInfo", "DecodedTile", "read_tile",
                "encode_tile", "write_tile", "permute_columns", "DatasetWriter", "Manifest", "FormatError", "Backend",
                "LocalBackend", "GCSBackend", "ThrottledBackend", "CountingBackend", "RangeFile", "open_backend",
                "open_corpus", "Corpus"}
    assert promised <= set(deltacells.__all__), sorted(promised - set(deltacells.__all__))
    obs = importlib.import_module("deltacells.obs")
    for name in ("ObsSchema", "ObsStore", "obs_fingerprint", "read_var_table", "write_var_table", "resolve_cache_dir"):
        assert callable(getattr(obs, name)), name
    from deltacells.convert import convert_h5ad
    from deltacells.format import (
        CHUNK_ENTRY_SIZE,
        HEADER_SIZE,
        MAGIC,
        MAX_GENES,
        MAX_VALUE,
        VERSION,
        align8,
        parse_tile_info,
        payload_crc32,
    )

    assert callable(convert_h5ad) and callable(align8) and callable(parse_tile_info) and callable(payload_crc32)
    assert (MAGIC, VERSION, HEADER_SIZE, CHUNK_ENTRY_SIZE, MAX_GENES, MAX_VALUE) == (
        b"DELTACEL", 2, 64, 96, 2**31, 2**31 - 1)
    from deltacells.cli import main

    assert callable(main)
    for module in ("convert", "obs", "cli", "format", "reader", "manifest", "backends", "writer", "dataset"):
        importlib.import_module(f"deltacells.{module}")
    from deltacells.reader import DeltaCellsDataset, row_offsets

    assert DeltaCellsDataset is deltacells.DeltaCellsDataset and callable(row_offsets)
    assert deltacells.__version__ == deltacells._core.__version__


def test_object_names_and_shard_arithmetic_are_the_specification_s():
    """The names and the shard arithmetic come from the Rust layout; checked here against the specification's
    wording (tiles/tile_NNNNNN.dct, obs/obs_NNNN.parquet, shard s holds tiles s*K .. min((s+1)*K, n))."""
    from deltacells.manifest import OBS_SHARD_PATTERN, TILE_PATTERN, Manifest

    assert [Manifest.tile_name(i) for i in (0, 3, 1234567)] == [
        "tiles/tile_000000.dct", "tiles/tile_000003.dct", "tiles/tile_1234567.dct"]
    assert Manifest.obs_shard_name(12) == "obs/obs_0012.parquet" == OBS_SHARD_PATTERN.format(12)
    assert TILE_PATTERN.format(42) == Manifest.tile_name(42)
    for n, k in [(0, 3), (1, 1), (7, 3), (9, 3), (2500, 1000)]:
        m = Manifest(n_genes=1, tile_size=1, n_cells=n, tile_cells=[1] * n, tile_nnz=[0] * n, tile_bytes=[64] * n,
                     has_obs=True, obs_tiles_per_file=k)
        shards = -(-n // k)
        assert m.n_obs_shards == shards
        assert [list(m.obs_shard_tiles(s)) for s in range(shards)] == [
            list(range(s * k, min((s + 1) * k, n))) for s in range(shards)]


def test_a_decoded_tile_s_row_offsets_are_its_own_so_no_decode_changes_another(blob):
    """A decoded tile's ``indptr`` can be edited like its indices and values (shifting offsets before stacking
    tiles), and an edit changes neither the tile's own offsets nor another decode's."""
    t = Tile(blob)
    first = t.decode()
    before = first.indptr.copy()
    assert first.indptr.flags.writeable and first.indices.flags.writeable and first.values.flags.writeable
    first.indptr += 1000
    np.testing.assert_array_equal(first.indptr, before + 1000)
    assert not t.indptr.flags.writeable
    np.testing.assert_array_equal(t.indptr, before)
    out_i, out_v = np.empty(t.nnz, np.int32), np.empty(t.nnz, np.int32)
    into = t.decode(out_indices=out_i, out_values=out_v)
    into.indptr[:] = 0
    np.testing.assert_array_equal(t.decode().indptr, before)
    assert (t.to_scipy() != make_counts(200, 80, seed=1)).nnz == 0


def test_a_path_given_as_a_tile_is_a_type_error_that_says_how_to_read_one(tmp_path):
    for path in ("tiles/tile_000000.dct", tmp_path / "t.dct"):
        with pytest.raises(TypeError, match="read_tile"):
            Tile(path)
