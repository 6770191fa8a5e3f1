"""Ctrl-C while a read waits for storage that does not answer: the interpreter gets its ``KeyboardInterrupt`` at
once, not when the request times out, and the reader stays usable.

Each case runs in a child process (so that a regression cannot interrupt the test run), over a backend whose tile
and obs shard reads block until released, at most a minute: the child sends itself SIGINT from inside the
blocked read, and reports whether the interrupt came while the read was still blocked."""

import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import make_counts, require
from deltacells import DatasetWriter, open_dataset

pd = require("pandas")
from deltacells.obs import ObsSchema  # noqa: E402

CHILD = r"""
import json, os, signal, sys, threading
import numpy as np
import deltacells

# Ctrl-C as an interactive interpreter takes it (a process started in the background inherits SIGINT ignored).
signal.signal(signal.SIGINT, signal.default_int_handler)
import faulthandler
faulthandler.dump_traceback_later(30)  # where it waits, should it wait (the test's timeout is 50 s)
root, how = sys.argv[1], sys.argv[2]
released = threading.Event()
blocked, finished = [], []

class Silent(deltacells.LocalBackend):
    # Tiles and obs shards that do not come (a server that stopped answering), for at most a minute.
    def _wait(self, name):
        if name.startswith(("tiles/", "obs/obs_")) and not released.is_set():
            blocked.append(name)
            if len(blocked) == 1:
                threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
            released.wait(60)
            finished.append(name)

    def read(self, name):
        self._wait(name)
        return super().read(name)

    def read_range(self, name, offset, length):
        self._wait(name)
        return super().read_range(name, offset, length)

backend = Silent(root)
ds = deltacells.open_dataset(backend, verify=False, cache_dir=os.path.join(root, "..", "cache-" + how))
reader = deltacells.open_corpus([backend]) if how == "corpus" else ds
cells = np.arange(7, 60, 3)
try:
    if how == "loader":
        from deltacells.torch import make_loader
        next(iter(make_loader(backend, 16, shuffle=False)))
    elif how == "obs":
        ds.obs.to_pandas()
    else:
        reader.get_batch(cells)
    said = {"interrupted": False}
except KeyboardInterrupt:
    said = {"interrupted": True, "finished_before": len(finished)}
released.set()
# The reader is usable after the interrupt: the abandoned loads complete and the read gives the batch.
said["again"] = reader.get_batch(cells).to_scipy().toarray().tolist()
print(json.dumps(said))
"""


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("interrupt") / "ds"
    full = make_counts(90, 50, density=0.2, seed=7)
    obs = pd.DataFrame({"x": np.arange(90.0)})
    with DatasetWriter(str(root), n_genes=50, tile_size=30, obs_schema=ObsSchema.infer([obs]),
                       var_names=[f"g{i}" for i in range(50)]) as w:
        for lo in range(0, 90, 30):
            w.add_tile(full[lo : lo + 30], obs=obs.iloc[lo : lo + 30])
    return root, full


@pytest.mark.parametrize("how", ["get_batch", "loader", "corpus", "obs"])
def test_ctrl_c_stops_a_read_waiting_for_storage_and_the_reader_reads_on(dataset, how):
    if how == "loader":
        require("torch")
    root, full = dataset
    try:
        done = subprocess.run([sys.executable, "-c", CHILD, str(root), how], capture_output=True, text=True,
                              timeout=50)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{how}: the child still waited after 50 s:\n{e.stderr}")
    assert done.returncode == 0, done.stderr[-3000:]
    said = json.loads(done.stdout.splitlines()[-1])
    assert said["interrupted"], f"{how}: no KeyboardInterrupt while the read waited"
    assert said["finished_before"] == 0, f"{how}: the interrupt came only after the blocked read ended"
    cells = np.arange(7, 60, 3)
    np.testing.assert_array_equal(np.array(said["again"]), full[cells].toarray())
    # And the dataset as it is on disk reads the same (the interrupted reads changed nothing).
    np.testing.assert_array_equal(open_dataset(str(root)).get_batch(cells).to_scipy().toarray(), full[cells].toarray())
