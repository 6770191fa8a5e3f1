"""Shared helpers of the Python package's tests: seeded count matrices, the repository's test data, the CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from deltacells import LocalBackend

REPO = Path(__file__).resolve().parents[3]
TESTDATA = REPO / "testdata"
CONFORMANCE = TESTDATA / "conformance"


def make_counts(n_cells, n_genes, density=0.1, seed=0, max_value=50, dtype=np.float32):
    """A CSR matrix of integer counts in [1, max_value] (float32 by default), sorted indices."""
    rng = np.random.default_rng(seed)
    m = sp.random(n_cells, n_genes, density=density, format="csr", random_state=rng, dtype=np.float64)
    m.data = rng.integers(1, max_value + 1, size=m.nnz).astype(dtype)
    m.sort_indices()
    return m


def write_dataset(root, matrix, tile_size, **writer_options) -> str:
    """``matrix`` written as a dataset at ``root`` in tiles of ``tile_size`` cells (level 3, 2 chunks)."""
    from deltacells import DatasetWriter

    with DatasetWriter(str(root), n_genes=matrix.shape[1], tile_size=tile_size, level=3, n_chunks=2,
                       **writer_options) as w:
        for lo in range(0, matrix.shape[0], tile_size):
            w.add_tile(matrix[lo : lo + tile_size])
    return str(root)


class LoggingBackend(LocalBackend):
    """Appends the name of every object read to a file: reads are counted across DataLoader worker processes
    (forked or spawned: the class pickles by reference to this module). A subclass, so the reader goes through its
    methods."""

    def __init__(self, root, log):
        super().__init__(root)
        self.log = log

    def read(self, name):
        with open(self.log, "a") as f:
            f.write(name + "\n")
        return super().read(name)


def forget_side_file_digests(root) -> None:
    """Removes the side files' digests from a dataset's manifest, as the original package writes manifests (none
    recorded): for tests that put gene tables or names in place by other means."""
    path = Path(root) / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest.pop("side_file_sha256", None)
    path.write_text(json.dumps(manifest))


def same(a, b) -> bool:
    """Exact equality of two sparse or dense matrices."""
    a, b = sp.csr_matrix(a), sp.csr_matrix(b)
    return a.shape == b.shape and (a != b).nnz == 0


def expected_csr(exp: dict) -> sp.csr_matrix:
    """The matrix of a conformance ``expected.json``."""
    return sp.csr_matrix(
        (np.asarray(exp["values"], dtype=np.int64), np.asarray(exp["indices"], dtype=np.int64), exp["indptr"]),
        shape=(exp["n_cells"], exp["n_genes"]),
    )


def load_json(path) -> dict:
    return json.loads(Path(path).read_text())


def good_tiles():
    d = CONFORMANCE / "tiles" / "good"
    return sorted(p for p in d.glob("*.dct"))


def bad_tiles():
    d = CONFORMANCE / "tiles" / "bad"
    return load_json(d / "cases.json")


def cli_binary() -> str | None:
    """The release `deltacells` binary beside the package's build, if one is there."""
    target = os.environ.get("CARGO_TARGET_DIR") or str(REPO / "target")
    for profile in ("release", "debug"):
        p = Path(target) / profile / "deltacells"
        if p.exists():
            return str(p)
    return shutil.which("deltacells")


def run_module(*args: str, **kw) -> subprocess.CompletedProcess:
    """`python -m deltacells ARGS`."""
    return subprocess.run([sys.executable, "-m", "deltacells", *args], capture_output=True, text=True, **kw)


@pytest.fixture
def counts():
    return make_counts


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(module: str):
    """Imports ``module``; skips without it, except in CI, where a missing test dependency is a failure."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        if in_ci():
            raise
        pytest.skip(f"{module} is not installed")


def s3_or_skip():
    """A fresh S3 prefix on the test server and the options to reach it; skips without the server, except in CI."""
    endpoint, bucket = os.environ.get("DCT_S3_ENDPOINT"), os.environ.get("DCT_S3_BUCKET")
    if not endpoint or not bucket:
        if in_ci():
            pytest.fail("DCT_S3_ENDPOINT / DCT_S3_BUCKET are not set (scripts/test-services.sh start)")
        pytest.skip("no S3 server (scripts/test-services.sh start)")
    options = {"aws_endpoint": endpoint, "aws_allow_http": "true", "aws_region": "us-east-1",
               "aws_access_key_id": "test", "aws_secret_access_key": "test"}
    return f"s3://{bucket}/py-{uuid.uuid4().hex[:12]}", options


def dataset_files(ds: Path) -> dict[str, str]:
    """Every file under a dataset folder and its SHA-256."""
    import hashlib

    return {str(p.relative_to(ds)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(ds.rglob("*")) if p.is_file()}


def timed_run(*args: str) -> float:
    """Seconds ``python -m deltacells *args`` takes (it must succeed)."""
    import time

    start = time.perf_counter()
    r = run_module(*args, env=dict(os.environ, RAYON_NUM_THREADS="1"))
    assert r.returncode == 0, r.stderr
    return time.perf_counter() - start


def kill_trials(args: list[str], out: Path, want: dict[str, str], seed: int, duration: float,
                trials: int = 10) -> list[str]:
    """Runs ``python -m deltacells *args`` (which writes a new dataset at ``out``, one thread) ``trials`` times,
    each killed by SIGKILL after a seeded random share (30-95%) of ``duration``, the seconds a whole run takes
    (:func:`timed_run`), unless it finished first; after each, checks that
    ``out`` holds no manifest unless it is the finished dataset, runs the same command again and checks that
    ``out`` then equals ``want`` file for file. Returns, per trial, what the kill left (``absent``, ``partial`` or
    ``finished``), so a caller can check that the trials struck where they should."""
    import random
    import signal
    import time

    rng = random.Random(seed)
    left = []
    env = dict(os.environ, RAYON_NUM_THREADS="1")
    for trial in range(trials):
        shutil.rmtree(out, ignore_errors=True)
        p = subprocess.Popen([sys.executable, "-m", "deltacells", *args], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, env=env)
        time.sleep(duration * rng.uniform(0.3, 0.95))
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
        p.wait()
        if not out.exists():
            left.append("absent")
        elif (out / "manifest.json").exists():
            # A manifest is written last: whatever holds one is the whole dataset (its marker perhaps not yet
            # removed).
            now = {k: v for k, v in dataset_files(out).items() if not k.endswith("-in-progress.json")}
            assert now == want, f"trial {trial}: a manifest beside an unfinished dataset"
            left.append("finished")
        else:
            left.append("partial")
        r = run_module(*args)
        assert r.returncode == 0, f"trial {trial}: {r.stderr}"
        assert dataset_files(out) == want, f"trial {trial}: the run again did not complete it"
    return left


@pytest.fixture(scope="module")
def members(tmp_path_factory):
    """The corpus tests' three members cut from pbmc200 and their sources (``corpus_members.make_members``)."""
    from corpus_members import make_members

    return make_members(tmp_path_factory.mktemp("members"))
