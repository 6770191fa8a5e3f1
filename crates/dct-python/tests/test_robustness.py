"""Damaged files through the Python API: every mutated tile, manifest, schema, shard and cache file gives a Python
exception of the class the API names (never a crash of the interpreter, never a hang), and the message names the
file."""

import json
import shutil

import deltacells
import numpy as np
import pytest
from conftest import make_counts, require
from deltacells import DatasetWriter, FormatError, Tile, encode_tile, open_dataset

pd = require("pandas")
from deltacells.obs import ObsSchema  # noqa: E402

ALLOWED = (FormatError, ValueError, FileNotFoundError, OSError, IndexError, KeyError)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("rob") / "ds"
    full = make_counts(120, 300, density=0.1, seed=50, max_value=70000, dtype=np.int64)
    obs = pd.DataFrame({"t": pd.Categorical(np.random.default_rng(1).choice(["a", "b"], 120)), "x": np.arange(120.0)})
    with DatasetWriter(str(root), n_genes=300, tile_size=40, level=3, n_chunks=3, obs_schema=ObsSchema.infer([obs]),
                       var_names=[f"g{i}" for i in range(300)], gene_order=np.arange(300)[::-1]) as w:
        for lo in range(0, 120, 40):
            w.add_tile(full[lo : lo + 40], obs=obs.iloc[lo : lo + 40])
    return root, full


def read_everything(root, cache):
    ds = open_dataset(str(root), verify=False, cache_dir=str(cache))
    ds.get_batch(np.arange(ds.n_cells))
    ds.var_names, ds.gene_order  # noqa: B018
    if ds.obs is not None:
        ds.obs.to_pandas()


def child_says(statements: str, catch: str = "Exception") -> str:
    """What ``statements`` print (an exception of ``catch`` as its class and message), run in a child process with
    a timeout: a regression that aborts or hangs fails the test rather than killing or hanging the run."""
    import subprocess
    import sys

    body = "".join(f"    {line}\n" for line in statements.splitlines())
    code = f"import deltacells\ntry:\n{body}except ({catch}) as e:\n    print(type(e).__name__, e)\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_mutated_tiles_raise_format_errors():
    m = make_counts(80, 200_000 // 1000, density=0.2, seed=51, max_value=70000, dtype=np.int64)
    blob = encode_tile(m, n_chunks=4, level=3)
    rng = np.random.default_rng(2)
    raised = 0
    for i in range(600):
        b = bytearray(blob)
        for _ in range(int(rng.integers(1, 4))):
            b[int(rng.integers(0, len(b)))] = int(rng.integers(0, 256))
        if i % 5 == 0:
            b = b[: int(rng.integers(0, len(b)))]
        try:
            # Half without the CRC, so that the decoder's own checks meet the damage too.
            t = Tile(bytes(b), verify=False if i % 2 else None)
            d = t.decode(threads=int(rng.integers(1, 4)))
            d.gather(np.arange(d.n_cells)[::-1])
        except FormatError as e:
            assert str(e), "an empty message"
            raised += 1
    assert raised > 300


def test_damaged_dataset_files_raise(dataset, tmp_path):
    root, _ = dataset
    rng = np.random.default_rng(3)
    targets = ["manifest.json", "tiles/tile_000001.dct", "obs/schema.json", "obs/obs_0000.parquet",
               "gene_order.npy", "var_names.txt"]
    outcomes = {}
    for k in range(60):
        case = tmp_path / f"c{k}"
        shutil.copytree(root, case)
        name = targets[k % len(targets)]
        p = case / name
        data = bytearray(p.read_bytes())
        how = k // len(targets) % 3
        if how == 0:
            data[int(rng.integers(0, len(data)))] ^= 0xFF
        elif how == 1:
            data = data[: len(data) // 2]
        else:
            data = bytearray(rng.integers(0, 256, len(data), dtype=np.uint8).tobytes())
        p.write_bytes(bytes(data))
        try:
            read_everything(case, tmp_path / "cache")
            outcomes[name] = outcomes.get(name, 0)
        except ALLOWED as e:
            outcomes[name] = outcomes.get(name, 0) + 1
            assert name.split("/")[-1].split(".")[0] in str(e) or "manifest" in str(e) or "obs" in str(e), (name, e)
    # A flipped byte in a shard or tile may land where nothing checks it without verify; most cases must raise.
    assert sum(outcomes.values()) >= 40, outcomes


def test_damaged_cache_files_are_rebuilt_or_raise(dataset, tmp_path):
    root, _ = dataset
    cache = tmp_path / "cache"
    ds = open_dataset(str(root), cache_dir=str(cache))
    ds.obs.localize(["t", "x"])
    want = ds.obs.to_pandas()
    for path in ds.obs.cache_dir.glob("*.arrow"):
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 3] + b"\x00" * 17)
    again = open_dataset(str(root), cache_dir=str(cache))
    got = again.obs.to_pandas()
    assert got.equals(want)


def test_manifest_garbage_raises_format_error(tmp_path, dataset):
    root, _ = dataset
    for text in ("", "{", "[]", json.dumps({"format": "deltacells-dataset"}), "\xff\xfe", '{"version": "2"}'):
        case = tmp_path / f"m{abs(hash(text))}"
        shutil.copytree(root, case)
        (case / "manifest.json").write_bytes(text.encode("utf-8", "surrogateescape") if text else b"")
        with pytest.raises(FormatError, match="manifest"):
            open_dataset(str(case))


def test_inputs_the_writer_refuses_are_value_errors(tmp_path):
    import scipy.sparse as sp

    bad_csr = sp.csr_matrix((np.array([1.0, 2.0]), np.array([0, 9]), np.array([0, 1, 2])), shape=(2, 5), copy=False)
    with pytest.raises(ValueError):
        encode_tile(bad_csr)
    with pytest.raises(ValueError):
        deltacells.Tile(b"DELTACEL" + b"\0" * 10)


def test_a_manifest_claiming_more_cells_than_its_tiles_hold_is_refused_not_allocated(dataset, tmp_path):
    """A few hundred bytes of manifest claiming 2^32 - 1 cells in one tile: refused where the claim is impossible
    (a tile too small for its cells), and, where the claimed tile bytes agree, by the loader before it lays out a
    window of the claim (which would be 34 GB): no abort, no allocation of the claim. Run in a child process, so a
    regression shows as a failed check rather than the test runner killed."""
    require("torch")
    root, _ = dataset
    n = 2**32 - 1
    for name, tile_bytes, expect in (("small", None, "tile_bytes"), ("consistent", 64 + 8 * (n + 1), "epoch plan")):
        claim = tmp_path / name
        shutil.copytree(root, claim)
        m = json.loads((claim / "manifest.json").read_text())
        for k in ("obs_tiles_per_file", "obs_fingerprint", "obs_shard_bytes", "obs_shard_sha256",
                  "obs_shard_footer_crc32"):
            m.pop(k, None)
        m.update(has_obs=False, n_cells=n, tile_size=n, tile_cells=[n], tile_nnz=m["tile_nnz"][:1],
                 tile_bytes=[tile_bytes or m["tile_bytes"][0]])
        (claim / "manifest.json").write_text(json.dumps(m))
        said = child_says("import deltacells.torch\n"
                          f"next(iter(deltacells.torch.make_loader({str(claim)!r}, 32, memory_budget=2 << 30)))",
                          "ValueError, deltacells.FormatError")
        assert expect in said and "manifest" in said, said
        if tile_bytes:
            # A corpus's loader refuses the same window, naming the member.
            said = child_says("import deltacells.torch\n"
                              f"c = deltacells.open_corpus({{'big': {str(claim)!r}}})\n"
                              "next(iter(deltacells.torch.make_loader(c, 32, memory_budget=2 << 30)))",
                              "ValueError, deltacells.FormatError")
            assert "member big" in said and expect in said, said


def test_special_files_in_place_of_dataset_files_are_errors_not_hangs(dataset, tmp_path):
    """A FIFO in place of a tile or the manifest would block a reader that opens it forever, and a dataset path that
    is a file names no manifest: each is an error at once, naming the file (run in a child process with a timeout,
    so a regression fails rather than hangs the run)."""
    import os

    root, _ = dataset
    cases = []
    for name, rel in (("tile", "tiles/tile_000000.dct"), ("manifest", "manifest.json")):
        copy = tmp_path / name
        shutil.copytree(root, copy)
        os.remove(copy / rel)
        os.mkfifo(copy / rel)
        cases.append((copy, rel, "a FIFO, not a regular file"))
    afile = tmp_path / "afile"
    afile.write_text("x")
    cases.append((afile, "manifest.json", ""))
    for where, rel, says in cases:
        said = child_says(f"deltacells.open_dataset({str(where)!r}).get_batch([0])", "OSError")
        assert rel.split("/")[-1] in said and says in said, said
        assert "attempts" not in said, f"a local file is not retried: {said}"
        if says:
            # Through a LocalBackend subclass, whose files the Python backend reads.
            subclass = "type('Mine', (deltacells.LocalBackend,), {})"
            said = child_says(f"deltacells.open_dataset({subclass}({str(where)!r})).get_batch([0])", "OSError")
            assert rel.split("/")[-1] in said and "not a regular file" in said, said
    assert "FileNotFoundError" in said, said


def test_a_special_file_in_the_obs_cache_is_an_error_not_a_hang(dataset, tmp_path):
    """A FIFO or a directory where a cached column belongs: an error naming the file and saying to delete the cache,
    at once (in a child process with a timeout, so a regression fails rather than hangs the run)."""
    import os

    root, _ = dataset
    for kind in ("fifo", "dir"):
        cache = tmp_path / f"cache_{kind}"
        ds = open_dataset(str(root), cache_dir=str(cache))
        path = ds.obs.cache_dir / deltacells._core.column_file_name("x")
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(path) if kind == "fifo" else path.mkdir()
        said = child_says(f"deltacells.open_dataset({str(root)!r}, cache_dir={str(cache)!r}).obs.to_pandas()")
        assert "not a regular file" in said and "x.arrow" in said and "delete the cache directory" in said, said
