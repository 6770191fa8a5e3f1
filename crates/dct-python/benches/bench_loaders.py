"""Training loaders side by side: cells per second delivered as torch tensors, from the same cells.

    python bench_loaders.py prepare WORKDIR [--source pbmc3k_raw.h5ad] [--copies 40]
    python bench_loaders.py run WORKDIR [--rounds 3] [--batch-sizes 1024,5000] [--max-cells 108000] [--epoch-rounds 3]
    python bench_loaders.py synthetic DATASET [--rounds 3]           # deltacells, local and throttled
    python bench_loaders.py timeline DATASET --out docs/loader_timeline.png
    python bench_loaders.py workers DATASET [--make-from pbmc3k_raw.h5ad --copies 400] [--workers 0,1,2,4]
    python bench_loaders.py decoder DATASET [--rounds 3] [--batch-sizes 1024,5000]
    python bench_loaders.py epochs WORKDIR [--rounds 3] [--budgets-mib 2048,512]
    python bench_loaders.py steady DATASET [--rounds 3] [--workers 0,1,2] [--budgets-mib 2048,384] [--epochs 5]
    python bench_loaders.py loader DATASET [--batch-size 1024] [--epochs 3] [--budget-mib 2048]
    python bench_loaders.py --least-recently-used COMMAND ...   # the tile cache without the epochs' tile orders

``prepare`` replicates the source cells ``copies`` times into one h5ad (the PBMC 3k raw counts by default: 108,000
cells x 32,738 genes) and stores the same cells as a deltacells dataset (the converter's defaults), and where each is
installed as a TileDB-SOMA experiment (``tiledbsoma.io.from_h5ad``) and an annbatch collection
(``DatasetCollection.add_adatas``, its defaults: shuffled at write time, sharded zarr, blosc lz4; annbatch needs
Python >= 3.12).
``run`` measures, loader after loader, round after round:

* deltacells: ``deltacells.torch.make_loader`` with ``num_workers=0`` (shuffled tiles, cells shuffled within
  windows of 4 tiles = 40,000 cells), X as torch sparse CSR float32;
* deltacells through a throttled store (50 ms per request, 150 MB/s per request, as the reader benchmark's);
* deltacells with one window over every tile (``shuffle_tiles`` >= the tiles: a global shuffle, as AnnData's);
* AnnData backed mode (``anndata.read_h5ad(backed="r")``) under a ``DataLoader`` with 2 workers and a batch sampler
  over a global random permutation (sorted within each batch, as backed CSR reads need), X as torch sparse CSR;
* TileDB-SOMA's PyTorch loader (``tiledbsoma_ml.ExperimentDataset`` with its defaults: ``shuffle_chunk_size=64``,
  ``io_batch_size=65536``, ``return_sparse_X=True``), X converted to torch sparse CSR;
* annbatch's ``Loader`` at the settings its README recommends (``chunk_size=32``, ``preload_nchunks=256``,
  ``to="torch"``, the zarrs codec pipeline for local files) over the collection, whose cells were shuffled once when
  it was written; X comes as torch sparse CSR.

Each loader reads ``max-cells`` cells (the first batches of an epoch, after opening) per round; the figures are medians
over rounds, with the sizes on disk. Throttled against local is also measured on later epochs of one loader
(``--epoch-rounds``: epochs 1 and 2 after a first one), where the first window's fetch, which nothing can hide in a
cold start, was prefetched during the epoch before.

``workers`` measures ``make_loader`` with DataLoader worker processes (``num_workers`` 0, 1, 2 and 4; ``make_loader``
keeps its workers across epochs) against none: per round, each configuration runs a new loader for 3 whole epochs
(its start and end included), in alternating order round after round (after one untimed epoch); and the default
path (tiles' CRC checked) against ``verify=False``. ``--make-from`` first
builds DATASET (when it does not exist) from ``--copies`` hard links of one h5ad, at level 3 without obs: 400 copies
of the PBMC 3k raw counts are 1,080,000 cells.

``epochs`` times the first and the second epoch of one loader (deltacells at each memory budget, and annbatch) over
``prepare``'s cells: a new loader's first epoch pays for its start and for the memory it takes fresh from the
system, a later one does not.

``decoder`` sets the loader against the decoder it feeds on: per round, ``deltacells bench DATASET --json`` times
every tile fetched and decoded whole by the same decode threads (``decode_cells_per_second``; fetch apart), and the
loader (no workers, CRC checked, as ``workers`` measures it) runs 3 whole epochs at each batch size; the ratio is
loader / decoder per round. The same bench run says where a tile's time goes through the reader (fetch, checks,
planes, rows, hand-offs), the rest of the gap is Python and the building of the tensors.

``steady`` sets a training run's epochs against the decoder: per round, the decoder's rate as ``decoder`` takes it,
then for each batch size, number of workers and memory budget one new loader run for ``--epochs`` epochs. Its first
epoch pays for the loader's start and for its cache growing into memory fresh from the system; the later ones are the
rate a run of many epochs sees: at the default budget (2 GiB) some of their tiles are still decoded from the epoch
before, at a budget below the cells' decoded size (384 MiB) nearly every tile is decoded again each epoch, as for an
atlas larger than memory.

``loader`` runs one ``make_loader`` (no workers) for whole epochs and prints each epoch's cells per second: a
process to time whole, against the same command under another build (``farm-bench --vs``), each with its wheel
installed apart (``PYTHONPATH``). With a budget above the decoded tiles (``--budget-mib 8192`` for the 1,080,000
PBMC cells), the epochs after the first find every tile decoded: they time the gathering of rows alone.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import deltacells
import numpy as np
import torch
from deltacells import LocalBackend, ThrottledBackend
from deltacells.torch import DeltaCellsIterableDataset, make_loader


def du(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def to_torch_csr(x) -> torch.Tensor:
    x = x.tocsr()
    return torch.sparse_csr_tensor(
        torch.from_numpy(x.indptr.astype(np.int64)), torch.from_numpy(x.indices.astype(np.int64)),
        torch.from_numpy(x.data.astype(np.float32, copy=False)), size=x.shape,
    )


# ---------------------------------------------------------------------------------------------- prepare


def prepare(work: Path, source: Path, copies: int) -> None:
    import anndata as ad
    import scipy.sparse as sp

    work.mkdir(parents=True, exist_ok=True)
    h5ad = work / "cells.h5ad"
    if not h5ad.exists():
        a = ad.read_h5ad(source)
        x = sp.csr_matrix(a.X)
        big = ad.AnnData(X=sp.vstack([x] * copies, format="csr"), var=a.var.copy())
        big.obs_names = [f"c{i}" for i in range(big.n_obs)]
        big.write_h5ad(h5ad)
        print(f"wrote {h5ad}: {big.n_obs} cells x {big.n_vars} genes, {big.X.nnz} nonzeros", flush=True)
    dct = work / "cells.dct"
    if not (dct / "manifest.json").exists():
        t0 = time.perf_counter()
        from deltacells.convert import convert_h5ad

        convert_h5ad(str(h5ad), str(dct), log=None, overwrite=True)
        print(f"deltacells dataset in {time.perf_counter() - t0:.0f} s", flush=True)
    soma = work / "cells.soma"
    if _installed("tiledbsoma") and not soma.exists():
        import tiledbsoma.io

        t0 = time.perf_counter()
        tiledbsoma.io.from_h5ad(str(soma), str(h5ad), measurement_name="RNA")
        print(f"SOMA experiment in {time.perf_counter() - t0:.0f} s", flush=True)
    collection = work / "cells.annbatch.zarr"
    if _has_annbatch() and not collection.exists():
        from annbatch import DatasetCollection

        _use_zarrs()
        t0 = time.perf_counter()
        # annbatch reads `dataset_size` of rows into memory to shuffle them (20 GB by default, which the kernel
        # killed at 24 GB resident on a 24 GiB machine with 10^6 PBMC cells); its documented memory knob bounds it.
        DatasetCollection(collection).add_adatas([str(h5ad)], shuffle=True, rng=np.random.default_rng(1),
                                                 dataset_size="4GB")
        print(f"annbatch collection in {time.perf_counter() - t0:.0f} s", flush=True)


def _installed(package: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(package) is not None


def _has_annbatch() -> bool:
    return _installed("annbatch")


def _use_zarrs() -> None:
    """annbatch's README: the zarrs codec pipeline is what makes its sharded stores fast on local files."""
    import zarr

    zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"})


# ---------------------------------------------------------------------------------------------- loaders


def _deltacells(path, batch_size, throttled=False, window=4, memory_budget=None):
    uri = ThrottledBackend(LocalBackend(path), latency_s=0.05, bandwidth_bytes_per_s=150e6) if throttled else path
    budget = memory_budget or max(2 << 30, window * (64 << 20))
    return make_loader(uri, batch_size, seed=1, io_threads=8 if throttled else 4, shuffle_tiles=window,
                       memory_budget=budget)


def deltacells_loader(path, batch_size, throttled=False, window=4):
    return (b["X"] for b in _deltacells(path, batch_size, throttled, window))


def later_epochs_rate(path, batch_size, throttled, epochs=3) -> float:
    """Cells per second of epochs 1.. of one loader, after a first epoch (what a training run sees after its
    first minutes: the epoch boundary's fetches are prefetched during the epoch before). The memory budget, 256 MB,
    is below the decoded size of the PBMC cells (about 370 MB), as for atlases larger than memory: every epoch
    fetches and decodes its tiles again instead of reading them from the cache."""
    loader = _deltacells(path, batch_size, throttled, memory_budget=256 << 20)
    for _ in loader:
        pass
    start, n = time.perf_counter(), 0
    for epoch in range(1, epochs):
        loader.set_epoch(epoch)
        for b in loader:
            n += b["X"].shape[0]
    return n / (time.perf_counter() - start)


class _BackedRows(torch.utils.data.Dataset):
    """Rows of a backed h5ad, a batch of (sorted) indices per item, opened in each worker."""

    def __init__(self, path):
        self.path, self.adata = path, None

    def __len__(self):
        import anndata as ad

        return ad.read_h5ad(self.path, backed="r").n_obs

    def __getitem__(self, idx):
        import anndata as ad

        if self.adata is None:
            self.adata = ad.read_h5ad(self.path, backed="r")
        return to_torch_csr(self.adata.X[np.sort(np.asarray(idx))])


def anndata_loader(path, batch_size):
    ds = _BackedRows(str(path))
    n = len(ds)
    sampler = torch.utils.data.BatchSampler(torch.utils.data.RandomSampler(range(n)), batch_size, drop_last=False)
    return iter(torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=None, num_workers=2))


def soma_loader(path, batch_size):
    import tiledbsoma
    import tiledbsoma_ml

    exp = tiledbsoma.Experiment.open(str(path))
    query = exp.axis_query("RNA")
    layer = list(exp.ms["RNA"].X.keys())[0]
    ds = tiledbsoma_ml.ExperimentDataset(query, layer_name=layer, batch_size=batch_size, shuffle=True, seed=1,
                                         return_sparse_X=True)
    loader = tiledbsoma_ml.experiment_dataloader(ds)
    return (to_torch_csr(x) for x, _obs in loader)


def annbatch_loader_object(path, batch_size):
    """annbatch's ``Loader`` over the collection; each iteration is an epoch, its batches dicts with ``"X"``."""
    import anndata as ad
    from annbatch import DatasetCollection, Loader

    _use_zarrs()

    def x_only(group):  # the README's advice: load only what training needs (here X, no obs columns)
        return ad.AnnData(X=ad.io.sparse_dataset(group["X"]))

    # The README's chunk_size=32, preload_nchunks=256; the loader wants chunk_size * preload_nchunks to be a
    # multiple of the batch size, so the preload grows to the next count that is (625 for batches of 5,000).
    preload = next(n for n in range(256, 10**6) if (32 * n) % batch_size == 0)
    loader = Loader(batch_size=batch_size, chunk_size=32, preload_nchunks=preload, shuffle=True, to="torch",
                    preload_to_gpu=False, rng=np.random.default_rng(1))
    loader.use_collection(DatasetCollection(path, mode="r"), load_adata=x_only)
    return loader


def annbatch_loader(path, batch_size):
    return (b["X"] for b in annbatch_loader_object(path, batch_size))


def measure(batches, max_cells: int) -> float:
    """Cells per second of the first ``max_cells`` cells of a loader (the loader's start included)."""
    start = time.perf_counter()
    n = 0
    for x in batches:
        n += x.shape[0]
        if n >= max_cells:
            break
    return n / (time.perf_counter() - start)


def run(work: Path, rounds: int, batch_sizes: list[int], max_cells: int, loaders: list[str],
        epoch_rounds: int) -> None:
    paths = {"deltacells": work / "cells.dct", "throttled": work / "cells.dct", "global": work / "cells.dct",
             "anndata": work / "cells.h5ad", "soma": work / "cells.soma", "annbatch": work / "cells.annbatch.zarr"}
    peers = ("anndata", "soma", "annbatch")
    if "annbatch" in loaders and not _has_annbatch():
        print("annbatch is not installed (it needs Python >= 3.12): measuring without it", flush=True)
        loaders = [k for k in loaders if k != "annbatch"]
    make = {
        "deltacells": lambda p, b: deltacells_loader(str(p), b),
        "global": lambda p, b: deltacells_loader(str(p), b, window=10**6),
        "throttled": lambda p, b: deltacells_loader(str(p), b, throttled=True),
        "anndata": lambda p, b: anndata_loader(p, b),
        "soma": lambda p, b: soma_loader(p, b),
        "annbatch": lambda p, b: annbatch_loader(p, b),
    }
    stored = [k for k in ("deltacells", *peers) if paths[k].exists()]
    print("sizes on disk: " + ", ".join(f"{k} {du(paths[k]) / 1e6:.0f} MB" for k in stored))
    results: dict[tuple[str, int], list[float]] = {}
    for r in range(rounds):
        for b in batch_sizes:
            for name in loaders:
                rate = measure(make[name](paths[name], b), max_cells)
                results.setdefault((name, b), []).append(rate)
                print(f"round {r} batch {b}: {name:<10} {rate:>10.0f} cells/s", flush=True)
    if rounds:
        print("\nmedians (cells/s into torch tensors):")
    for b in batch_sizes if rounds else []:
        med = {name: statistics.median(results[(name, b)]) for name in loaders}
        best_peer = max((v for k, v in med.items() if k in peers), default=float("nan"))
        line = ", ".join(f"{k} {v:.0f}" for k, v in med.items())
        print(f"  batch {b}: {line}; deltacells / best peer {med['deltacells'] / best_peer:.2f}x", end="")
        if "throttled" in med:
            print(f"; throttled / local {med['throttled'] / med['deltacells']:.2f}", end="")
        if "global" in med:
            print(f"; global shuffle / best peer {med['global'] / best_peer:.2f}x", end="")
        print()
    if epoch_rounds:
        dataset = str(paths["deltacells"])
        for b in batch_sizes:
            ratios = []
            for _ in range(epoch_rounds):
                local = later_epochs_rate(dataset, b, throttled=False)
                slow = later_epochs_rate(dataset, b, throttled=True)
                ratios.append(slow / local)
                print(f"later epochs, batch {b}: local {local:.0f}, throttled {slow:.0f} cells/s", flush=True)
            print(f"  batch {b}: throttled / local on later epochs {', '.join(f'{x:.2f}' for x in ratios)}, "
                  f"median {statistics.median(ratios):.2f}")


def epochs_bench(work: Path, rounds: int, batch_sizes: list[int], budgets_mib: list[int]) -> None:
    """The first and the second epoch of one loader, deltacells at each memory budget and annbatch, in alternating
    order round after round: a new loader's first epoch pays for its start and for memory the process takes fresh
    (deltacells' cache growing to its budget; annbatch's preload buffers), a second one for neither."""
    dataset = str(work / "cells.dct")
    configs: list[tuple[str, Any]] = [
        (f"deltacells {m} MiB", lambda b, m=m: _deltacells(dataset, b, memory_budget=m << 20)) for m in budgets_mib
    ]
    if _has_annbatch():
        configs.append(("annbatch", lambda b: annbatch_loader_object(work / "cells.annbatch.zarr", b)))
    results: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for r in range(rounds):
        for b in batch_sizes:
            for name, make in configs if r % 2 == 0 else configs[::-1]:
                loader = make(b)
                rates = []
                for epoch in range(2):
                    if hasattr(loader, "set_epoch"):
                        loader.set_epoch(epoch)
                    start, n = time.perf_counter(), 0
                    for batch in loader:
                        n += batch["X"].shape[0]
                    rates.append(n / (time.perf_counter() - start))
                del loader
                gc.collect()
                results.setdefault((name, b), []).append((rates[0], rates[1]))
                print(f"round {r} batch {b}: {name:<20} first epoch {rates[0]:>9.0f}, second {rates[1]:>9.0f} cells/s",
                      flush=True)
    print("\nmedians (cells/s into torch tensors), first epoch / second epoch:")
    for b in batch_sizes:
        line = ", ".join(
            f"{name} {statistics.median(x[0] for x in v):.0f} / {statistics.median(x[1] for x in v):.0f}"
            for (name, bb), v in results.items() if bb == b
        )
        print(f"  batch {b}: {line}")


# ---------------------------------------------------------------------------------------------- workers


def many_copies(path: Path, source: Path, copies: int) -> None:
    """DATASET from ``copies`` hard links of ``source`` (distinct inputs of the same cells), level 3, no obs."""
    from deltacells import convert

    if (path / "manifest.json").exists():
        return
    links = path.parent / f"{path.name}.inputs"
    links.mkdir(parents=True, exist_ok=True)
    files = []
    for i in range(copies):
        f = links / f"part_{i:04d}.h5ad"
        if not f.exists():
            try:
                os.link(source, f)
            except OSError:
                shutil.copyfile(source, f)
        files.append(str(f))
    start = time.perf_counter()
    convert.convert_h5ad(files, str(path), level=3, obs=False, overwrite=True, log=None)
    print(f"built {path} from {copies} copies of {source} in {time.perf_counter() - start:.0f} s", flush=True)


def epoch_rate(path: str, batch_size: int, workers: int, verify: bool | None = None, epochs: int = 3) -> float:
    """Cells per second over ``epochs`` whole epochs of a new loader, as a training run makes them (its start, its
    workers' start and its end included)."""
    start = time.perf_counter()
    loader = make_loader(path, batch_size, num_workers=workers, verify=verify, seed=1)
    n = 0
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for batch in loader:
            n += batch["X"].shape[0]
    del loader, batch
    gc.collect()  # the readers' (and workers') teardown belongs to the run
    return n / (time.perf_counter() - start)


def steady_rates(path: str, batch_size: int, workers: int, budget_mib: int, epochs: int) -> tuple[float, float]:
    """One new loader run for ``epochs`` whole epochs, as a training run uses it: its first epoch's cells per
    second (its start, its workers' start and its cache growing into memory fresh from the system included) and the
    median of the later epochs' (the rate a run of many epochs sees)."""
    loader = make_loader(path, batch_size, num_workers=workers, seed=1, memory_budget=budget_mib << 20)
    rates = []
    start = time.perf_counter()
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        n = 0
        for batch in loader:
            n += batch["X"].shape[0]
        now = time.perf_counter()
        rates.append(n / (now - start))
        start = now
    del loader, batch
    gc.collect()
    return rates[0], statistics.median(rates[1:])


def steady_bench(path: str, rounds: int, batch_sizes: list[int], workers: list[int], budgets_mib: list[int],
                 epochs: int) -> None:
    """Per round: the decoder's rate (``deltacells bench``), then for each batch size, number of workers and memory
    budget a new loader run for ``epochs`` epochs; its first epoch and its later epochs against the decoder."""
    n_tiles = deltacells.open_dataset(path).manifest.n_tiles
    print(f"{path}: one loader for {epochs} epochs: its first epoch, and the median of the later ones, against "
          f"`deltacells bench` decoding every tile whole", flush=True)
    steady_rates(path, batch_sizes[0], 0, budgets_mib[0], 2)  # untimed: the process's first touches
    configs = [(b, w, m) for b in batch_sizes for w in workers for m in budgets_mib]
    ratios: dict[tuple[int, int, int], list[tuple[float, float]]] = {c: [] for c in configs}
    for r in range(rounds):
        out = subprocess.run([sys.executable, "-m", "deltacells", "bench", path, "--json", "--sample-tiles",
                              str(n_tiles), "--max-cells", "1"], capture_output=True, text=True, check=True)
        decode = json.loads(out.stdout)["decode_cells_per_second"]
        print(f"round {r}: decoder {decode:.0f} cells/s", flush=True)
        for c in configs if r % 2 == 0 else configs[::-1]:
            first, later = steady_rates(path, c[0], c[1], c[2], epochs)
            ratios[c].append((first / decode, later / decode))
            print(f"  batch {c[0]}, {c[1]} workers, {c[2]} MiB: first epoch {first:.0f} ({first / decode:.3f}), "
                  f"later epochs {later:.0f} cells/s ({later / decode:.3f})", flush=True)
    print("loader / decoder, medians over rounds (per round): first epoch; later epochs")
    for c, v in ratios.items():
        print(f"  batch {c[0]}, {c[1]} workers, {c[2]} MiB: {statistics.median(x[0] for x in v):.3f} "
              f"({', '.join(f'{x[0]:.2f}' for x in v)}); {statistics.median(x[1] for x in v):.3f} "
              f"({', '.join(f'{x[1]:.2f}' for x in v)})", flush=True)


def workers_bench(path: str, rounds: int, batch_sizes: list[int], workers: list[int]) -> None:
    n_cells = deltacells.open_dataset(path).n_cells
    print(f"{path}: {n_cells:,} cells; whole epochs, {rounds} rounds, alternating order", flush=True)
    epoch_rate(path, batch_sizes[0], 0, epochs=1)  # untimed: the process's first epoch pays for first touches
    for b in batch_sizes:
        rates: dict[int, list[float]] = {w: [] for w in workers}
        no_crc: list[float] = []
        for r in range(rounds):
            for w in workers if r % 2 == 0 else workers[::-1]:
                rates[w].append(epoch_rate(path, b, w))
            no_crc.append(epoch_rate(path, b, 0, verify=False))
            line = ", ".join(f"{w} workers {rates[w][-1]:.0f}" for w in workers)
            print(f"round {r} batch {b}: {line}; 0 workers, CRC off {no_crc[-1]:.0f} cells/s", flush=True)
        base = rates[0] if 0 in rates else rates[workers[0]]
        for w in workers:
            ratios = [x / y for x, y in zip(rates[w], base)]
            print(f"  batch {b}, {w} workers: median {statistics.median(rates[w]):.0f} cells/s; / no workers per "
                  f"round {', '.join(f'{x:.2f}' for x in ratios)}, median {statistics.median(ratios):.2f}")
        crc = [x / y for x, y in zip(base, no_crc)]
        print(f"  batch {b}, CRC on / off (no workers): per round {', '.join(f'{x:.3f}' for x in crc)}, median "
              f"{statistics.median(crc):.3f}", flush=True)


def loader_epochs(path: str, batch_size: int, epochs: int, budget_mib: int) -> None:
    loader = make_loader(path, batch_size, num_workers=0, seed=1, memory_budget=budget_mib << 20)
    assert isinstance(loader.dataset, DeltaCellsIterableDataset)
    reader = loader.dataset.dataset
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        start, n, decoded = time.perf_counter(), 0, reader.stats["tiles_decoded"]
        for batch in loader:
            n += batch["X"].shape[0]
        print(f"epoch {epoch}: {n / (time.perf_counter() - start):.0f} cells/s, "
              f"{reader.stats['tiles_decoded'] - decoded:.0f} tiles decoded", flush=True)


def decoder_bench(path: str, rounds: int, batch_sizes: list[int]) -> None:
    n_tiles = deltacells.open_dataset(path).manifest.n_tiles
    print(f"{path}: loader (0 workers, 3 epochs) against `deltacells bench` decoding every tile whole", flush=True)
    epoch_rate(path, batch_sizes[0], 0, epochs=1)  # untimed: the process's first epoch pays for first touches
    ratios: dict[int, list[float]] = {b: [] for b in batch_sizes}
    for r in range(rounds):
        out = subprocess.run([sys.executable, "-m", "deltacells", "bench", path, "--json", "--sample-tiles",
                              str(n_tiles), "--max-cells", "1"], capture_output=True, text=True, check=True)
        bench = json.loads(out.stdout)
        decode = bench["decode_cells_per_second"]
        line = []
        for b in batch_sizes if r % 2 == 0 else batch_sizes[::-1]:
            rate = epoch_rate(path, b, 0)
            ratios[b].append(rate / decode)
            line.append(f"batch {b} {rate:.0f} cells/s ({rate / decode:.3f})")
        parts = {(k.removeprefix("tile_reader_").removesuffix("_seconds") or "total").replace("seconds", "total"):
                 v * 1e3 for k, v in bench.items() if k.startswith("tile_reader_")}
        print(f"round {r}: decoder {decode:.0f} cells/s ({bench['threads']} threads); {'; '.join(line)}; a tile "
              f"through the reader, ms: " + ", ".join(f"{k} {v:.2f}" for k, v in parts.items()), flush=True)
    for b in batch_sizes:
        print(f"  batch {b}: loader / decoder per round {', '.join(f'{x:.3f}' for x in ratios[b])}, median "
              f"{statistics.median(ratios[b]):.3f}", flush=True)


# ---------------------------------------------------------------------------------------------- synthetic, timeline


def synthetic(path: str, rounds: int, batch_sizes: list[int]) -> None:
    for b in batch_sizes:
        local, slow = [], []
        for _ in range(rounds):
            local.append(measure(deltacells_loader(path, b), 10**12))
            slow.append(measure(deltacells_loader(path, b, throttled=True), 10**12))
        ratios = [s / lo for s, lo in zip(slow, local)]
        print(f"synthetic batch {b}: local {statistics.median(local):.0f} cells/s, throttled "
              f"{statistics.median(slow):.0f} cells/s; throttled / local per round "
              f"{', '.join(f'{x:.2f}' for x in ratios)}, median {statistics.median(ratios):.2f}", flush=True)


def _epoch_trace(path: str, batch_size: int, throttled: bool) -> tuple[np.ndarray, np.ndarray]:
    """When each batch of one epoch arrived (seconds since the loop started) and the reader's stall by then."""
    uri = ThrottledBackend(LocalBackend(path), latency_s=0.05, bandwidth_bytes_per_s=150e6) if throttled else path
    loader = make_loader(uri, batch_size, seed=1, io_threads=8)
    ds = loader.dataset
    times, stalls = [], []
    start = time.perf_counter()
    for _batch in loader:
        times.append(time.perf_counter() - start)
        stalls.append(ds.stats()["stall_seconds"])
    return np.array(times), np.array(stalls)


def timeline(path: str, out: str, batch_size: int) -> None:
    """Batches per second and the reader's stall over one epoch, local and through a throttled store, as a PNG (the
    numbers as JSON beside it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = {"local disk": _epoch_trace(path, batch_size, False),
            "throttled store (50 ms + 150 MB/s per request)": _epoch_trace(path, batch_size, True)}
    fig, ax = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for k, (label, (times, stalls)) in enumerate(runs.items()):
        rate = np.arange(1, len(times) + 1) / np.maximum(times, 1e-9)
        ax[0].plot(times, 1 / np.maximum(np.diff(np.concatenate([[0.0], times])), 1e-6), ".", ms=3, alpha=0.35,
                   color=f"C{k}")
        ax[0].plot(times, rate, lw=1.6, color=f"C{k}", label=f"{label}: {len(times)} batches in {times[-1]:.1f} s")
        ax[1].plot(np.concatenate([[0.0], times]), np.concatenate([[0.0], stalls]), lw=1.6, color=f"C{k}",
                   label=f"{label}: {stalls[-1]:.2f} s in all, {stalls[-1] - stalls[0]:.2f} s after the first batch")
    ax[0].set_ylabel(f"batches/s ({batch_size} cells)")
    ax[0].set_title("deltacells loader, one shuffled epoch (num_workers=0): dots per batch, lines the mean so far",
                    fontsize=10)
    ax[0].set_ylim(
        bottom=0,
        top=1.35 * max(float(np.percentile(1 / np.maximum(np.diff(np.concatenate([[0.0], t])), 1e-6), 99))
                       for t, _ in runs.values()),
    )
    ax[0].legend(fontsize=8, loc="upper left")
    ax[1].set_ylabel("reader stall (s, cumulative)")
    ax[1].set_xlabel("seconds since the epoch started")
    ax[1].set_ylim(bottom=0, top=max(0.5, 1.2 * max(s[-1] for _, s in runs.values())))
    ax[1].legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    Path(out).with_suffix(".json").write_text(json.dumps(
        {label: {"times": t.tolist(), "stall_seconds": s.tolist()} for label, (t, s) in runs.items()}
        | {"batch_size": batch_size, "dataset": os.path.basename(path.rstrip("/"))}
    ))
    for label, (t, st) in runs.items():
        print(f"{label}: {len(t)} batches in {t[-1]:.2f} s, first after {t[0]:.2f} s; stalled {st[-1]:.2f} s "
              f"({st[-1] - st[0]:.2f} s after the first batch)")
    print(f"wrote {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--least-recently-used", action="store_true",
                    help="the loader does not give the reader's cache its epochs' tile orders (plan_passes): tiles "
                         "done with are evicted least recently used first, for comparison")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("work", type=Path)
    p.add_argument("--source", type=Path,
                   default=Path(__file__).resolve().parents[3] / "../shared/data/pbmc3k_raw.h5ad")
    p.add_argument("--copies", type=int, default=40)
    r = sub.add_parser("run")
    r.add_argument("work", type=Path)
    r.add_argument("--rounds", type=int, default=3)
    r.add_argument("--batch-sizes", default="1024,5000")
    r.add_argument("--max-cells", type=int, default=108_000)
    r.add_argument("--loaders", default="deltacells,throttled,global,anndata,soma,annbatch")
    r.add_argument("--epoch-rounds", type=int, default=3)
    s = sub.add_parser("synthetic")
    s.add_argument("dataset")
    s.add_argument("--rounds", type=int, default=3)
    s.add_argument("--batch-sizes", default="1024,5000")
    t = sub.add_parser("timeline")
    t.add_argument("dataset")
    t.add_argument("--out", default="docs/loader_timeline.png")
    t.add_argument("--batch-size", type=int, default=1024)
    k = sub.add_parser("workers")
    k.add_argument("dataset", type=Path)
    k.add_argument("--make-from", type=Path, default=None)
    k.add_argument("--copies", type=int, default=400)
    k.add_argument("--rounds", type=int, default=3)
    k.add_argument("--batch-sizes", default="1024,5000")
    k.add_argument("--workers", default="0,1,2,4")
    e = sub.add_parser("epochs")
    e.add_argument("work", type=Path)
    e.add_argument("--rounds", type=int, default=3)
    e.add_argument("--batch-sizes", default="1024,5000")
    e.add_argument("--budgets-mib", default="2048,512")
    d = sub.add_parser("decoder")
    d.add_argument("dataset")
    d.add_argument("--rounds", type=int, default=3)
    d.add_argument("--batch-sizes", default="1024,5000")
    st = sub.add_parser("steady")
    st.add_argument("dataset")
    st.add_argument("--rounds", type=int, default=3)
    st.add_argument("--batch-sizes", default="1024,5000")
    st.add_argument("--workers", default="0")
    st.add_argument("--budgets-mib", default="2048,384")
    st.add_argument("--epochs", type=int, default=5)
    o = sub.add_parser("loader")
    o.add_argument("dataset")
    o.add_argument("--batch-size", type=int, default=1024)
    o.add_argument("--epochs", type=int, default=3)
    o.add_argument("--budget-mib", type=int, default=2048)
    args = ap.parse_args()
    if args.least_recently_used:
        # Forked DataLoader workers inherit the switch.
        deltacells.DeltaCellsDataset.plan_passes = lambda self, this_pass, next_pass: None  # type: ignore[method-assign]
    if args.cmd == "loader":
        loader_epochs(args.dataset, args.batch_size, args.epochs, args.budget_mib)
    elif args.cmd == "decoder":
        decoder_bench(args.dataset, args.rounds, [int(b) for b in args.batch_sizes.split(",")])
    elif args.cmd == "steady":
        steady_bench(args.dataset, args.rounds, [int(b) for b in args.batch_sizes.split(",")],
                     [int(w) for w in args.workers.split(",")], [int(m) for m in args.budgets_mib.split(",")],
                     args.epochs)
    elif args.cmd == "prepare":
        prepare(args.work, args.source, args.copies)
    elif args.cmd == "run":
        sizes = [int(b) for b in args.batch_sizes.split(",")]
        run(args.work, args.rounds, sizes, args.max_cells, args.loaders.split(","), args.epoch_rounds)
    elif args.cmd == "epochs":
        epochs_bench(args.work, args.rounds, [int(b) for b in args.batch_sizes.split(",")],
                     [int(m) for m in args.budgets_mib.split(",")])
    elif args.cmd == "synthetic":
        synthetic(args.dataset, args.rounds, [int(b) for b in args.batch_sizes.split(",")])
    elif args.cmd == "workers":
        if args.make_from is not None:
            many_copies(args.dataset, args.make_from, args.copies)
        sizes = [int(b) for b in args.batch_sizes.split(",")]
        workers_bench(str(args.dataset), args.rounds, sizes, [int(w) for w in args.workers.split(",")])
    else:
        timeline(args.dataset, args.out, args.batch_size)


if __name__ == "__main__":
    main()
