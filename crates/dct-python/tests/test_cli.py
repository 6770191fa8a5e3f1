"""The command line from Python: `python -m deltacells`, `deltacells.cli.main`, and the `deltacells` command that
`pip install` puts on the PATH, against the same dataset."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import make_counts, run_module
from deltacells import DatasetWriter
from deltacells.cli import main


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("cli") / "ds")
    with DatasetWriter(root, n_genes=40, tile_size=200, level=3) as w:
        full = make_counts(530, 40, density=0.2, seed=40)
        for lo in range(0, 530, 200):
            w.add_tile(full[lo : lo + 200])
    return root


def test_python_m_deltacells_runs_the_subcommands(dataset):
    r = run_module("info", dataset, "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert (info["n_cells"], info["n_genes"], info["n_tiles"]) == (530, 40, 3)
    r = run_module("verify", dataset)
    assert r.returncode == 0, r.stderr
    r = run_module("--version")
    assert r.returncode == 0 and r.stdout.startswith("deltacells 0.1.0 (")
    r = run_module("no-such-command")
    assert r.returncode == 2 and "no-such-command" in r.stderr


def test_main_returns_the_exit_status(dataset, tmp_path):
    assert main(["verify", dataset]) == 0
    bad = tmp_path / "bad"
    shutil.copytree(dataset, bad)
    tile = bad / "tiles" / "tile_000001.dct"
    data = bytearray(tile.read_bytes())
    data[-10] ^= 0xFF
    tile.write_bytes(bytes(data))
    assert main(["verify", str(bad)]) == 1
    assert main(["info", str(tmp_path / "missing")]) == 1
    assert main(["export", dataset, "--cells", "0:3", "--format", "csv", "--output", str(tmp_path / "x.csv")]) == 0
    assert (tmp_path / "x.csv").read_text().count("\n") >= 3


def test_the_console_script_is_installed(dataset):
    exe = Path(sys.executable).with_name("deltacells")
    if not exe.exists():
        pytest.skip("the package is not installed with its console script (an in-tree run)")
    r = subprocess.run([str(exe), "info", dataset], capture_output=True, text=True)
    assert r.returncode == 0 and "530" in r.stdout, r.stderr


def test_original_spelling_of_convert_inputs(tmp_path):
    ad = pytest.importorskip("anndata")
    from conftest import TESTDATA

    src = TESTDATA / "inputs" / "pbmc200" / "pbmc200.h5ad"
    out = tmp_path / "o"
    r = run_module("convert", "--h5ad-glob", str(src), "--output", str(out), "--tile-size", "64", "--level", "1")
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "manifest.json").read_text())["n_cells"] == ad.read_h5ad(src).n_obs
    assert np.load(out / "gene_order.npy").shape == (2500,)
    assert os.path.exists(out / "obs" / "schema.json")


def test_convert_format_version_1_from_the_command_line(tmp_path):
    from conftest import TESTDATA

    src = TESTDATA / "inputs" / "pbmc200" / "pbmc200.h5ad"
    out = tmp_path / "v1"
    r = run_module(
        "convert", str(src), "--output", str(out), "--tile-size", "64", "--level", "1", "--format-version", "1"
    )
    assert r.returncode == 0, r.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["version"] == 1 and all(p.read_bytes()[8] == 1 for p in (out / "tiles").glob("*.dct"))
    bad = run_module("convert", str(TESTDATA / "inputs" / "layouts.h5ad"), "--output", str(tmp_path / "b"),
                     "--format-version", "1", "--tile-size", "16")
    assert bad.returncode == 1 and "above 65535" in bad.stderr and "gene" in bad.stderr, bad.stderr
    assert not (tmp_path / "b" / "manifest.json").exists()


def test_main_writes_through_the_python_streams(dataset):
    """As the original package's: output captured by redirect_stdout / redirect_stderr (or a notebook)."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["info", dataset, "--json"])
    assert code == 0, err.getvalue()
    assert json.loads(out.getvalue())["n_cells"] == 530
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["info", dataset + "-missing"])
    assert code != 0 and out.getvalue() == "" and "missing" in err.getvalue()
    # Only stdout redirected: the error still goes to the process's stderr, and nothing to the StringIO.
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["no-such-command"]) == 2
    assert out.getvalue() == ""


def test_output_into_a_closed_pipe_ends_the_command_quietly(dataset):
    """`python -m deltacells info DATASET | head -1`: the reader goes away; the command ends with status 0 and says
    nothing on stderr (no panic, no BrokenPipeError at exit)."""
    code = "import sys, deltacells.cli as c; raise SystemExit(c.main(sys.argv[1:]))"
    tile = os.path.join(dataset, "tiles", "tile_000000.dct")
    for args in (["info", dataset], ["info", dataset, "--json"], ["verify", dataset], ["inspect-tile", tile]):
        r, w = os.pipe()
        os.close(r)  # nobody reads: the first write fails with EPIPE
        with os.fdopen(w, "wb") as out:
            done = subprocess.run([sys.executable, "-c", code, *args], stdout=out, stderr=subprocess.PIPE,
                                  timeout=120)
        assert (done.returncode, done.stderr.decode()) == (0, ""), args


def test_a_python_stream_that_refuses_the_output_raises_in_the_caller(dataset):
    """A redirected stream that fails (a broken pipe, a closed file) is the caller's error: raised by main, not a
    traceback from a thread; the streams are the process's own again afterwards."""
    import contextlib
    import io
    import threading

    class Refusing(io.TextIOBase):
        def write(self, s):
            raise BrokenPipeError(32, "Broken pipe")

    # More output than a pipe holds (about 160 kB of obs values), so the command is still writing when the pipe
    # closes: nothing it could not write may come out in the next command.
    import pandas as pd
    from deltacells.obs import ObsSchema

    big = os.path.join(os.path.dirname(dataset), "with_obs")
    if not os.path.exists(big):
        obs = pd.DataFrame({"label": [f"cell number {i}" for i in range(8000)]})
        with DatasetWriter(big, n_genes=5, tile_size=4000, level=3, obs_schema=ObsSchema.infer(obs)) as w:
            for lo in (0, 4000):
                w.add_tile(make_counts(4000, 5, density=0.2, seed=lo), obs=obs.iloc[lo : lo + 4000])
    hooked = []
    old_hook, threading.excepthook = threading.excepthook, hooked.append
    try:
        with contextlib.redirect_stdout(Refusing()), pytest.raises(BrokenPipeError):
            main(["obs", "show", big, "--cells", ":", "--csv", "--cache-dir", os.path.join(big, "..", "cache")])
        with contextlib.redirect_stdout(Refusing()), pytest.raises(BrokenPipeError):
            main(["inspect-tile", os.path.join(dataset, "tiles", "tile_000000.dct")])
        closed = io.StringIO()
        closed.close()
        with contextlib.redirect_stdout(closed), pytest.raises(ValueError, match="closed file"):
            main(["info", dataset])
    finally:
        threading.excepthook = old_hook
    assert hooked == []
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["info", dataset, "--json"]) == 0
    assert json.loads(out.getvalue())["n_cells"] == 530
