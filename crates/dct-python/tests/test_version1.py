"""Version-1 output for readers that know only version 1: the conformance version-1 tiles and dataset re-encoded
with format_version=1 follow VERSION-1.md (header, 64-byte chunk entries, canonical layout) and decode exactly;
data that needs version 2 is refused before anything is written, naming the first cell and gene."""

import json
import struct

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import CONFORMANCE, expected_csr, load_json, same
from deltacells import DatasetWriter, Tile, encode_tile, open_dataset
from deltacells.format import align8, parse_tile_info, payload_crc32

V1_TILES = sorted((CONFORMANCE / "tiles" / "good").glob("v1_*.dct"))


def chunk_bounds(info):
    return [(c.cell_lo, c.cell_hi, c.nnz_lo, c.nnz_hi) for c in info.chunks]


def assert_canonical_v1(blob, n_chunks):
    """The layout VERSION-1.md describes for the original writer."""
    info = parse_tile_info(blob)
    assert info.version == 1
    assert struct.unpack_from("<I", blob, 8)[0] == 1 and struct.unpack_from("<I", blob, 12)[0] == 0
    assert info.indptr_off == align8(64 + 64 * n_chunks)
    pos = info.indptr_off + 8 * (info.n_cells + 1)
    for c in info.chunks:
        assert c.vexc_len == 0 and c.gexc_len == 0
        assert c.gaps_off == align8(pos) and c.vals_off == align8(c.gaps_off + c.gaps_len)
        assert c.gaps_len > 0 and c.vals_len > 0
        pos = c.vals_off + c.vals_len
    assert info.total_size == pos == len(blob)
    assert payload_crc32(blob) == info.crc32
    padding = [blob[a:b] for a, b in _gaps(info)]
    assert all(p == b"\0" * len(p) for p in padding), "zero padding"
    return info


def _gaps(info):
    end = info.indptr_off + 8 * (info.n_cells + 1)
    for c in info.chunks:
        yield end, c.gaps_off
        yield c.gaps_off + c.gaps_len, c.vals_off
        end = c.vals_off + c.vals_len


@pytest.mark.parametrize("path", V1_TILES, ids=[p.stem for p in V1_TILES])
def test_conformance_v1_tiles_reencode_as_v1(path):
    original = Tile(path.read_bytes(), verify=True)
    exp = load_json(path.with_suffix(".expected.json"))
    m = expected_csr(exp)
    # The original writer's chunk count for some request k: find the k that reproduces its chunk table.
    for k in range(max(1, original.n_chunks), original.n_chunks + 4):
        blob = encode_tile(m, n_chunks=k, level=19, format_version=1)
        info = parse_tile_info(blob)
        if chunk_bounds(info) == chunk_bounds(original.info):
            break
    else:
        pytest.fail(f"no chunk request reproduces the chunk table of {path.name}")
    info = assert_canonical_v1(blob, info.n_chunks)
    assert (info.n_cells, info.nnz, info.n_genes) == (original.n_cells, original.nnz, original.n_genes)
    t = Tile(blob, verify=True)
    assert np.array_equal(t.indptr, original.indptr)
    assert np.array_equal(t.indptr, exp["indptr"])
    d = t.decode()
    assert np.array_equal(d.indices, exp["indices"]) and np.array_equal(d.values, exp["values"])
    # Header and indptr are what the original wrote (only the zstd frames, hence offsets and CRC, may differ).
    o = original.info
    assert (info.version, info.flags, info.n_cells, info.nnz, info.n_genes, info.n_chunks) == (
        o.version, o.flags, o.n_cells, o.nnz, o.n_genes, o.n_chunks
    )


def test_conformance_v1_dataset_rewritten_as_v1(tmp_path):
    src = open_dataset(str(CONFORMANCE / "datasets" / "v1_with_obs"), cache_dir=str(tmp_path / "c"))
    exp = load_json(CONFORMANCE / "datasets" / "v1_with_obs.expected.json")
    full = src[:].to_scipy()
    obs = src.obs.to_pandas()
    out = str(tmp_path / "v1")
    with DatasetWriter(
        out, n_genes=src.n_genes, tile_size=src.tile_size, var_names=src.var_names, obs_schema=src.obs.schema,
        obs_tiles_per_file=src.manifest.obs_tiles_per_file, level=19, n_chunks=src.manifest.n_chunks, format_version=1,
    ) as w:
        for t in range(src.n_tiles):
            lo, hi = src.tile_bounds(t)
            w.add_tile(full[lo:hi], obs=obs.iloc[lo:hi])
    raw = json.loads((tmp_path / "v1" / "manifest.json").read_text())
    assert raw["version"] == 1 and "obs_shard_footer_crc32" not in raw
    known = {"format", "version", "n_cells", "n_genes", "tile_size", "tile_cells", "tile_nnz", "tile_bytes", "n_chunks",
             "zstd_level", "has_gene_order", "has_var_names", "metadata", "has_obs", "obs_tiles_per_file",
             "obs_fingerprint", "obs_shard_bytes", "obs_shard_sha256", "has_var_table"}
    assert set(raw) <= known, f"keys the original reader does not know: {set(raw) - known}"
    ds = open_dataset(out, cache_dir=str(tmp_path / "c2"))
    assert ds.manifest.tile_cells == exp["tile_cells"] and ds.manifest.tile_nnz == exp["tile_nnz"]
    assert same(ds[:].to_scipy(), expected_csr(exp))
    for t in range(ds.n_tiles):
        tile = ds.get_tile(t)
        assert tile.version == 1
        assert_canonical_v1((tmp_path / "v1" / "tiles" / f"tile_{t:06d}.dct").read_bytes(), tile.n_chunks)
    # The obs are the same columns and values (written in version-1 shards: the same format as version 2).
    assert ds.obs.to_pandas().equals(obs)


def test_data_that_needs_version_2_is_refused_before_writing(tmp_path):
    m = sp.csr_matrix(np.array([[1, 0, 3], [0, 70000, 0]], dtype=np.int64))
    with pytest.raises(ValueError, match="cell 1, gene 1: count 70000 is above 65535"):
        encode_tile(m, format_version=1)
    w = DatasetWriter(str(tmp_path / "d"), n_genes=3, tile_size=2, format_version=1, level=3)
    w.add_tile(sp.csr_matrix(np.array([[1, 2, 3], [4, 5, 6]])))
    with pytest.raises(ValueError, match="cell 3, gene 1: count 70000"):
        w.add_tile(m)  # global cell 2 + 1
    assert not (tmp_path / "d" / "tiles" / "tile_000001.dct").exists()
    w.add_tile(sp.csr_matrix(np.array([[7, 0, 0]])))
    assert w.close().version == 1
    with pytest.raises(ValueError, match="n_genes"):
        DatasetWriter(str(tmp_path / "e"), n_genes=65537, tile_size=2, format_version=1)
    with pytest.raises(ValueError, match="65536 genes|version 1"):
        encode_tile(sp.csr_matrix((1, 70000), dtype=np.float32), format_version=1)
