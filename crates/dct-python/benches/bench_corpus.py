"""A corpus against one dataset: the training loader's cells per second through a gene vocabulary.

    python bench_corpus.py prepare WORKDIR [--source ~/.cache/dct-loaders/million.dct] [--members 20]
    python bench_corpus.py run WORKDIR [--source ...] [--rounds 3] [--batch-sizes 1024,5000]
    python bench_corpus.py opening WORKDIR [--members 1000] [--latency 0.05]
    python bench_corpus.py peers WORKDIR [--source ...] [--cells-per-member 4000] [--batch-sizes 1024]
    python bench_corpus.py epochs WORKDIR [--source ...] [--rounds 3] [--batch-sizes 1024] [--epochs 4]

``prepare`` makes the corpus's members from the source dataset (by default the 1,080,000-cell PBMC benchmark
dataset of ``bench_loaders.py workers``: 400 copies of PBMC 3k in order) and the real samples beside the repository
(``--shared-data``, ``../shared/data``): the PBMC 3k counts as an h5ad file, a 10x HDF5 file and a 10x Matrix Market
folder, each converted by ``deltacells convert --level 3`` as it stores them (genes by decreasing total, its gene
table with the inputs' Ensembl IDs as ``gene_ids``), stand for the source's last 3 copies; the source's other cells
are cut into ``members`` datasets of consecutive cells, each with a gene list of its own: a seeded random 80-95% of
the source's genes, stored (``--gene-order``) by decreasing total over the member's cells as ``deltacells convert``
stores them (``totals``, the default) or in a seeded random order (``random``), stored columns re-indexed
accordingly, and a gene table whose ``gene_ids`` column holds the source's Ensembl IDs; every fourth member names its
genes by Ensembl ID only (its gene names are the IDs, no symbol anywhere), the others by symbol. The cut members have
an obs column ``batch`` (``a`` or ``b``, one half of each member's cells each) so that ``where`` can choose half of
their cells. Written at level 3, tiles of 10,000 cells. The members hold the source's cells in the source's order.

``run`` measures, round after round in alternating order, one whole epoch of ``deltacells.torch.make_loader``
(``num_workers=0``, shuffled, windows of 4 tiles, X as torch sparse CSR float32) over:

* ``single``: the source dataset itself (the same cells, its own genes: no re-indexing);
* ``corpus``: the members through a 20,000-gene vocabulary (the source's first 20,000 genes, its most counted, by
  Ensembl ID and listed in ID order, an order no member stores), so every row is re-ordered and a member's genes
  outside it are dropped;
* ``weighted``: the same with member weights 1, 2, 3 (cycling), an epoch of as many cells as the corpus has;
* ``half``: the corpus's cells of batch ``a`` (``corpus.where(batch=["a"])``), unweighted;
* ``single_half``: the same cells as one dataset with no re-indexing (the source alone as a corpus in its own genes,
  whose rows are copied as they are, with those cells selected), what ``half`` is compared with;
* ``aligned``: the members written once in the vocabulary's gene order (``deltacells.convert.align_corpus``, level 3,
  into ``WORKDIR/aligned``; done by ``run`` if it is not there, its time and bytes reported) read through the same
  vocabulary: each row is renumbered, not re-ordered, and the genes outside the vocabulary are gone from the tiles;
  ``aligned_weighted`` and ``aligned_half`` are ``weighted`` and ``half`` over them (``aligned_half`` is also
  compared with ``single_half``).

Figures are cells per second into torch (opening excluded), medians over rounds, with each corpus configuration's
ratio to ``single`` in the same round.

``peers`` takes the first ``cells-per-member`` cells of each member (written once as an h5ad of its own: the member's
genes as var names, its Ensembl IDs as the index, raw counts) and reads them through the same 20,000-gene
vocabulary two ways, one epoch each, alternating for ``rounds``: the deltacells loader over the corpus's selection
of those cells (windows of 4 tiles, as above), and AnnData backed mode (``anndata.read_h5ad(backed="r")``, each
member's file open once) with the genes aligned by pandas and scipy as its documentation's users do (the
vocabulary's position of each member gene by ``pandas.Index.get_indexer``, one sparse selection matrix per member,
``X @ P``), batches drawn in a global random order (sorted within each member, as backed CSR reads need), X as torch
sparse CSR; and, where annbatch is installed (it needs Python >= 3.12), annbatch 0.3 as its documentation shows
for several datasets: ``DatasetCollection.add_adatas`` of the members' h5ad files with ``var_subset`` the
vocabulary (the var spaces outer-joined, then cut to the vocabulary: the alignment is done once, when the
collection is written, and its time is reported), then its ``Loader`` at its README's settings (``chunk_size=32``,
``preload_nchunks=256``, grown to a multiple of the batch size; zarrs codec pipeline; X only), which draws random
chunks of 32 cells of a collection shuffled when written (``dataset_size="4GB"``: its default of 20 GB is killed
for lack of memory on this machine).

``aligned`` is deltacells with the alignment done once, as annbatch does it: the members' h5ad files converted
(``convert_h5ad(genes=vocabulary)``, level 3) into one dataset in the vocabulary's genes, read by the same loader
(write time reported beside annbatch's); ``corpus_aligned`` is the corpus over the members written once in the
vocabulary's gene order (``align_corpus``, level 3, into ``WORKDIR/aligned``, as ``run`` measures it), the same
cells selected. ``--loaders`` chooses which of the five run.

``opening`` writes (once) ``members`` small datasets (200 cells each, a seeded 400 of 1,000 genes in a seeded order,
a gene table with ``gene_ids``) and opens them as one corpus by ``gene_ids`` through a store that answers every
request after ``latency`` seconds (a Python backend that sleeps, as an object store's round trip would), counting the
requests; it reports the time to open against the time the same requests would take one after another.

``epochs`` runs one loader for ``--epochs`` epochs (``set_epoch`` before each) over the source as one dataset, the
corpus over the members as stored and the corpus over the members aligned once (``run`` writes them), alternating
round by round, and prints each epoch's cells/s and tiles decoded, and the corpora's later epochs against one
dataset's: what the tiles each cache keeps for the next epoch give a training run. ``--give-back-all``: the corpus
gives back every tile no window ahead needs at each window, as before it kept tiles for the next epoch.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import deltacells
import numpy as np
import pandas as pd
import scipy.sparse as sp
from deltacells.convert import align_corpus
from deltacells.obs import ObsSchema
from deltacells.torch import make_loader

SOURCE = Path.home() / ".cache/dct-loaders/million.dct"
# The real samples beside the repository (``../shared/data``): PBMC 3k as h5ad, 10x HDF5 and 10x Matrix Market.
SHARED_DATA = Path(__file__).resolve().parents[4] / "shared" / "data"
VOCABULARY = 20_000


def model_vocabulary(source: deltacells.DeltaCellsDataset) -> list[str]:
    """The source's first ``VOCABULARY`` genes (the most counted: it stores genes by decreasing total) by Ensembl ID,
    listed in ID order as a model's vocabulary may be: an order no member stores its genes in."""
    return sorted(list(source.var["gene_ids"])[:VOCABULARY])


def real_samples(shared: Path) -> list[tuple[str, Path]]:
    """The PBMC 3k counts of ``../shared/data`` in each input format the converter reads (each the same 2,700 cells
    the source repeats), as ``(member name, input)``; none where the folder is absent."""
    found = [("member_90_h5ad", shared / "pbmc3k_raw.h5ad"), ("member_91_10x_h5", shared / "pbmc3k_10x.h5"),
             ("member_92_10x_mtx", shared / "pbmc3k_mtx")]
    return [(name, path) for name, path in found if path.exists()]


def prepare(workdir: Path, source: Path, members: int, gene_order: str, shared: Path) -> None:
    ds = deltacells.open_dataset(str(source), max_cached_tiles=4, decode_threads=2)
    ids = list(ds.var["gene_ids"])
    n_genes, n_cells = ds.n_genes, ds.n_cells
    # The source's last cells come from the real samples as converted from each input format (its cells are copies
    # of PBMC 3k in order), so the corpus holds the source's cells in the source's order.
    real = real_samples(shared)
    tail = 2_700 * len(real)
    per = (n_cells - tail) // members
    rng = np.random.default_rng(2026)
    schema = ObsSchema.infer([pd.DataFrame({"batch": pd.Categorical(["a", "b"])})])
    for name, path in real:
        root = workdir / name
        if not (root / "manifest.json").exists():
            convert = [sys.executable, "-m", "deltacells", "convert", str(path), "--output", str(root), "--level", "3",
                       "--overwrite"]
            subprocess.run(convert, check=True, capture_output=True)
        got = deltacells.open_dataset(str(root))
        assert got.n_cells == 2_700 and "gene_ids" in got.var.columns, (name, got.n_cells, list(got.var.columns))
        print(f"{name}: {path.name} converted as stored by `deltacells convert` ({got.n_genes} genes)", flush=True)
    for m in range(members):
        root = workdir / f"member_{m:02d}"
        if (root / "manifest.json").exists():
            continue
        keep = rng.permutation(n_genes)[: int(n_genes * rng.uniform(0.80, 0.95))]
        lo, hi = m * per, ((m + 1) * per if m < members - 1 else n_cells - tail)
        if gene_order == "totals":
            # As `deltacells convert` stores genes by default: by decreasing total over the member's own cells.
            totals = np.asarray(ds.get_batch(np.arange(lo, hi)).to_scipy().sum(axis=0)).ravel()
            keep = keep[np.lexsort((keep, -totals[keep]))]
        new_column = np.full(n_genes, -1, np.int64)
        new_column[keep] = np.arange(len(keep))
        if m % 4 == 3:
            # Genes by Ensembl ID only: no symbols anywhere in the member.
            var = pd.DataFrame({"gene_ids": [ids[g] for g in keep]}, index=[ids[g] for g in keep])
        else:
            var = pd.DataFrame({"gene_ids": [ids[g] for g in keep]}, index=[ds.var_names[g] for g in keep])
        with deltacells.DatasetWriter(str(root), n_genes=len(keep), tile_size=10_000, level=3, n_chunks=8,
                                      var_names=list(var.index), var=var, obs_schema=schema) as w:
            for a in range(lo, hi, 10_000):
                b = min(a + 10_000, hi)
                x = ds.get_batch(np.arange(a, b)).to_scipy().tocoo()
                kept = new_column[x.col] >= 0
                block = sp.csr_matrix((x.data[kept], (x.row[kept], new_column[x.col[kept]])), shape=(b - a, len(keep)))
                labels = np.where(rng.random(b - a) < 0.5, "a", "b")
                w.add_tile(block, obs=pd.DataFrame({"batch": pd.Categorical(labels, categories=["a", "b"])}))
        print(f"member {m}: cells {lo}..{hi}, {len(keep)} genes{' by Ensembl ID only' if m % 4 == 3 else ''}",
              flush=True)


class ThrottledBackend(deltacells.LocalBackend):
    """A local dataset answering each request after ``latency`` seconds, counting them."""

    def __init__(self, root: str, latency: float, counter: list[int]) -> None:
        super().__init__(root)
        self.latency, self.counter = latency, counter

    def _wait(self) -> None:
        self.counter.append(1)  # list.append is atomic under the GIL
        time.sleep(self.latency)

    def read(self, name: str) -> bytes:
        self._wait()
        return super().read(name)

    def read_range(self, name: str, offset: int, length: int) -> bytes:
        self._wait()
        return super().read_range(name, offset, length)

    def exists(self, name: str) -> bool:
        self._wait()
        return super().exists(name)

    def size(self, name: str) -> int:
        self._wait()
        return super().size(name)


def opening(workdir: Path, members: int, latency: float) -> dict[str, object]:
    root = workdir / "small"
    rng = np.random.default_rng(11)
    for m in range(members):
        path = root / f"m{m:04d}"
        if (path / "manifest.json").exists():
            continue
        genes = rng.permutation(1000)[:400]
        x = sp.random(200, 400, density=0.05, format="csr", random_state=m, data_rvs=lambda k: rng.integers(1, 9, k))
        var = pd.DataFrame({"gene_ids": [f"ENSG{g:05d}" for g in genes]}, index=[f"G{g}" for g in genes])
        with deltacells.DatasetWriter(str(path), n_genes=400, tile_size=100, level=3, n_chunks=1,
                                      var_names=list(var.index), var=var) as w:
            for lo in (0, 100):
                w.add_tile(x[lo : lo + 100])
    counter: list[int] = []
    backends = {f"m{m:04d}": ThrottledBackend(str(root / f"m{m:04d}"), latency, counter) for m in range(members)}
    start = time.perf_counter()
    corpus = deltacells.open_corpus(backends, gene_key="gene_ids")
    seconds = time.perf_counter() - start
    result = {"members": members, "latency_s": latency, "cells": corpus.n_cells, "genes": corpus.n_genes,
              "requests": len(counter), "open_s": seconds, "one_after_another_s": len(counter) * latency}
    print(json.dumps(result, indent=2))
    return result


def _subset_h5ads(workdir: Path, roots: list[str], per_member: int) -> list[Path]:
    """The first ``per_member`` cells of each member as an h5ad of its own (written once)."""
    import anndata as ad

    out = []
    for root in roots:
        path = workdir / "h5ad" / f"{Path(root).name}_{per_member}.h5ad"
        out.append(path)
        if path.exists():
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        ds = deltacells.open_dataset(root)
        x = ds.get_batch(np.arange(min(per_member, ds.n_cells))).to_scipy().tocsr()
        var = pd.DataFrame(index=pd.Index(list(ds.var["gene_ids"]), name="gene_ids"))
        # Cell names unique across members, as annbatch asks (it would otherwise rename 10^6 of them itself).
        obs = pd.DataFrame(index=[f"{Path(root).name}_{i}" for i in range(x.shape[0])])
        ad.AnnData(X=x.astype(np.float32), obs=obs, var=var).write_h5ad(path)
    return out


def anndata_backed_epoch(paths: list[Path], vocabulary: list[str], batch_size: int, seed: int) -> float:
    """One epoch of AnnData backed mode over ``paths`` through ``vocabulary``: cells per second into torch."""
    import anndata as ad
    import torch

    start = time.perf_counter()
    members = [ad.read_h5ad(p, backed="r") for p in paths]
    vocab = pd.Index(vocabulary)
    maps = []
    for a in members:
        where = vocab.get_indexer(a.var_names)  # -1: not in the vocabulary
        rows = np.flatnonzero(where >= 0)
        maps.append(sp.csr_matrix((np.ones(len(rows), np.float32), (rows, where[rows])),
                                  shape=(a.n_vars, len(vocab))))
    sizes = [a.n_obs for a in members]
    member = np.repeat(np.arange(len(members)), sizes)
    local = np.concatenate([np.arange(n) for n in sizes])
    order = np.random.default_rng(seed).permutation(len(member))
    cells = 0
    for lo in range(0, len(order), batch_size):
        pick = order[lo : lo + batch_size]
        parts = []
        for m in np.unique(member[pick]):
            rows = np.sort(local[pick[member[pick] == m]])
            parts.append(sp.csr_matrix(members[m].X[rows]) @ maps[m])
        x = sp.vstack(parts).tocsr()
        x.sort_indices()
        t = torch.sparse_csr_tensor(torch.from_numpy(x.indptr.astype(np.int64)),
                                    torch.from_numpy(x.indices.astype(np.int64)),
                                    torch.from_numpy(x.data.astype(np.float32, copy=False)), size=x.shape)
        cells += int(t.shape[0])
    return cells / (time.perf_counter() - start)


def _has_annbatch() -> bool:
    import importlib.util

    return importlib.util.find_spec("annbatch") is not None


def annbatch_collection(workdir: Path, paths: list[Path], vocabulary: list[str], per_member: int) -> tuple[Path, float]:
    """The members' h5ad files as one annbatch collection in the vocabulary's genes (written once); returns its
    path and the seconds writing it took (0 if it was there)."""
    import zarr
    from annbatch import DatasetCollection

    zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"})
    path = workdir / f"annbatch_{per_member}.zarr"
    if path.exists():
        return path, 0.0
    start = time.perf_counter()
    # dataset_size bounds what it holds in memory (its default, 20 GB, does not fit this 24 GB machine's share).
    DatasetCollection(path).add_adatas([str(p) for p in paths], var_subset=vocabulary, shuffle=True,
                                       dataset_size="4GB", rng=np.random.default_rng(1))
    return path, time.perf_counter() - start


def annbatch_epoch(path: Path, batch_size: int, seed: int) -> float:
    """One epoch of annbatch's Loader over the collection at ``path``: cells per second into torch."""
    import anndata as ad
    import zarr
    from annbatch import DatasetCollection, Loader

    zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"})

    def x_only(group):  # its README's advice: load only what training needs
        return ad.AnnData(X=ad.io.sparse_dataset(group["X"]))

    start = time.perf_counter()
    preload = next(n for n in range(256, 10**6) if (32 * n) % batch_size == 0)
    loader = Loader(batch_size=batch_size, chunk_size=32, preload_nchunks=preload, shuffle=True, to="torch",
                    preload_to_gpu=False, rng=np.random.default_rng(seed))
    loader.use_collection(DatasetCollection(path, mode="r"), load_adata=x_only)
    cells = sum(int(b["X"].shape[0]) for b in loader)
    return cells / (time.perf_counter() - start)


def aligned_dataset(workdir: Path, paths: list[Path], vocabulary: list[str], per_member: int) -> tuple[Path, float]:
    """The members' h5ad files converted once into one dataset in the vocabulary's genes (``genes=vocabulary``, level
    3), as annbatch aligns them once when it writes its collection; returns its path and the seconds writing it
    took (0 if it was there)."""
    from deltacells.convert import convert_h5ad

    path = workdir / f"aligned_{per_member}.dct"
    if (path / "manifest.json").exists():
        return path, 0.0
    start = time.perf_counter()
    convert_h5ad([str(p) for p in paths], str(path), sort_files=False, genes=vocabulary, level=3, log=None,
                 overwrite=True)
    return path, time.perf_counter() - start


def peers(workdir: Path, source: Path, per_member: int, rounds: int, batch_sizes: list[int],
          loaders: list[str]) -> dict[str, object]:
    roots = sorted(str(p) for p in workdir.glob("member_*"))
    vocabulary = model_vocabulary(deltacells.open_dataset(str(source)))
    paths = _subset_h5ads(workdir, roots, per_member)
    corpus = deltacells.open_corpus(roots, genes=vocabulary, gene_key="gene_ids")
    starts = np.cumsum([0, *corpus.member_cells[:-1]])
    # The first `per_member` cells of each member (all of a smaller one's, as its h5ad holds).
    firsts = np.concatenate([np.arange(min(per_member, n)) + s for s, n in zip(starts, corpus.member_cells)])
    subset = corpus.select(firsts)
    results: dict[str, object] = {"members": len(roots), "cells": subset.n_cells, "vocabulary": len(vocabulary)}
    collection = aligned = None
    aligned_members: list[str] = []
    if "annbatch" in loaders and _has_annbatch():
        collection, seconds = annbatch_collection(workdir, paths, vocabulary, per_member)
        results["annbatch_write_seconds"] = seconds
        print(f"annbatch collection: {seconds:.0f} s to write", flush=True)
    elif "annbatch" in loaders:
        print("annbatch is not installed (it needs Python >= 3.12): measuring without it", flush=True)
        loaders = [k for k in loaders if k != "annbatch"]
    if "aligned" in loaders:
        aligned, seconds = aligned_dataset(workdir, paths, vocabulary, per_member)
        results["aligned_write_seconds"] = seconds
        print(f"aligned dataset: {seconds:.0f} s to write", flush=True)
    if "corpus_aligned" in loaders:
        started = time.perf_counter()
        aligned_members = align_corpus(roots, workdir / "aligned", genes=vocabulary, gene_key="gene_ids", level=3)
        results["corpus_aligned_write_seconds"] = time.perf_counter() - started
    for b in batch_sizes:
        rates: dict[str, list[float]] = {k: [] for k in loaders}
        for r in range(rounds):
            order = list(rates) if r % 2 == 0 else list(reversed(rates))
            for k in order:
                if k == "deltacells":
                    start = time.perf_counter()  # opening included, as for AnnData
                    c = deltacells.open_corpus(roots, genes=vocabulary, gene_key="gene_ids").select(firsts)
                    loader = make_loader(c, b, seed=r)
                    n = sum(int(x["index"].shape[0]) for x in loader)
                    rates[k].append(n / (time.perf_counter() - start))
                elif k == "annbatch":
                    assert collection is not None
                    rates[k].append(annbatch_epoch(collection, b, seed=r))
                elif k == "corpus_aligned":
                    start = time.perf_counter()  # opening included, as for the others
                    c = deltacells.open_corpus(aligned_members, genes=vocabulary, gene_key="gene_ids").select(firsts)
                    n = sum(int(x["index"].shape[0]) for x in make_loader(c, b, seed=r))
                    rates[k].append(n / (time.perf_counter() - start))
                elif k == "aligned":
                    assert aligned is not None
                    start = time.perf_counter()  # opening included, as for the others
                    n = sum(int(x["index"].shape[0]) for x in make_loader(str(aligned), b, seed=r))
                    rates[k].append(n / (time.perf_counter() - start))
                else:
                    rates[k].append(anndata_backed_epoch(paths, vocabulary, b, seed=r))
            print(f"batch {b} round {r}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in rates.items()), flush=True)
        results[f"batch_{b}"] = {
            k: {"median_cells_per_s": statistics.median(v), "rounds": v} for k, v in rates.items()
        }
        ours_all = ("deltacells", "corpus_aligned", "aligned")
        for ours in [k for k in ours_all if k in rates]:
            for peer in [k for k in rates if k not in ours_all]:
                results[f"batch_{b}"][f"{ours}_to_{peer}"] = statistics.median(  # type: ignore[index]
                    d / a for d, a in zip(rates[ours], rates[peer]))
    print(json.dumps(results, indent=2))
    return results


def epoch_rate(source: object, batch_size: int, **options: object) -> float:
    loader = make_loader(source, batch_size, seed=1, **options)
    start = time.perf_counter()
    cells = 0
    for b in loader:
        cells += int(b["index"].shape[0])
    return cells / (time.perf_counter() - start)


def epochs(workdir: Path, source: Path, rounds: int, batch_size: int, n_epochs: int, give_back_all: bool) -> None:
    """One loader per configuration for ``n_epochs`` epochs (``set_epoch`` before each): the source as one dataset,
    the corpus over the members as stored and over the members aligned once (``run`` writes them), alternating
    round by round; per epoch cells/s and tiles decoded, and the corpora's later epochs against one dataset's."""
    if give_back_all:
        # The corpus as before it kept tiles across epochs: every tile no window ahead needs given back.
        from deltacells.corpus import _CorpusReader

        def release(self: _CorpusReader, ahead: list[int], window: int) -> int:
            return int(self._core.release_tiles_except([int(t) for t in ahead]))

        _CorpusReader.release_tiles_for = release  # type: ignore[method-assign]
    roots = sorted(str(p) for p in workdir.glob("member_*"))
    aligned = sorted(str(p) for p in (workdir / "aligned").glob("member_*"))
    if len(aligned) != len(roots):
        raise SystemExit(f"{workdir / 'aligned'}: run `bench_corpus.py run` first (it aligns the members)")
    vocabulary = model_vocabulary(deltacells.open_dataset(str(source)))
    sources: dict[str, Callable[[], object]] = {
        "single": lambda: str(source),
        "corpus": lambda: deltacells.open_corpus(roots, genes=vocabulary, gene_key="gene_ids"),
        "aligned": lambda: deltacells.open_corpus(aligned, genes=vocabulary, gene_key="gene_ids"),
    }
    later: dict[str, list[float]] = {k: [] for k in sources}
    for r in range(rounds):
        for name in list(sources) if r % 2 == 0 else list(reversed(sources)):
            loader = make_loader(sources[name](), batch_size, seed=r)
            reader = loader.dataset.dataset  # type: ignore[attr-defined]
            line = []
            for e in range(n_epochs):
                loader.set_epoch(e)  # type: ignore[attr-defined]
                decoded, start, n = reader.stats["tiles_decoded"], time.perf_counter(), 0
                for b in loader:
                    n += int(b["index"].shape[0])
                rate = n / (time.perf_counter() - start)
                line.append(f"{rate:,.0f} ({reader.stats['tiles_decoded'] - decoded:.0f} tiles)")
                if e > 0:
                    later[name].append(rate)
            print(f"round {r} {name}: " + ", ".join(line), flush=True)
            del loader, reader
            gc.collect()
    medians = {k: statistics.median(v) for k, v in later.items()}
    print("later epochs, median cells/s: " + ", ".join(f"{k} {v:,.0f}" for k, v in medians.items())
          + f"; corpus / single {medians['corpus'] / medians['single']:.2f}, aligned / single "
          f"{medians['aligned'] / medians['single']:.2f}", flush=True)


def run(workdir: Path, source: Path, rounds: int, batch_sizes: list[int]) -> dict[str, object]:
    roots = sorted(str(p) for p in workdir.glob("member_*"))
    single_ds = deltacells.open_dataset(str(source))
    vocabulary = model_vocabulary(single_ds)
    corpus = deltacells.open_corpus(roots, genes=vocabulary, gene_key="gene_ids", cache_dir=str(workdir / "cache"))
    half = corpus.where(batch=["a"])
    # The same half of the cells as one dataset: the members are the source's cells in order, so corpus cell i is
    # source cell i; a corpus of the source alone in its own genes copies its rows as they are.
    chosen = corpus.obs.take_pandas(np.arange(corpus.n_cells), "batch", warn=False)["batch"].to_numpy() == "a"
    single_half = deltacells.open_corpus([str(source)], gene_key="gene_ids").select(chosen)
    assert single_half.n_cells == half.n_cells
    weights = [float(1 + i % 3) for i in range(len(roots))]
    aligned_dir = workdir / "aligned"
    started = time.perf_counter()
    aligned_roots = align_corpus(roots, aligned_dir, genes=vocabulary, gene_key="gene_ids", level=3)
    align_seconds = time.perf_counter() - started
    aligned = deltacells.open_corpus(aligned_roots, genes=vocabulary, gene_key="gene_ids")
    configs = {
        "single": (str(source), {}),
        "corpus": (corpus, {}),
        "weighted": (corpus, {"weights": weights}),
        "half": (half, {}),
        "single_half": (single_half, {}),
        "aligned": (aligned, {}),
        "aligned_weighted": (aligned, {"weights": weights}),
        "aligned_half": (aligned.where(batch=["a"]), {}),
    }
    tile_bytes = lambda rs: sum(p.stat().st_size for r in rs for p in Path(r, "tiles").glob("*"))  # noqa: E731
    results: dict[str, object] = {"members": len(roots), "cells": corpus.n_cells, "half_cells": half.n_cells,
                                  "vocabulary": len(vocabulary), "align_seconds": align_seconds,
                                  "member_tile_bytes": tile_bytes(roots),
                                  "aligned_tile_bytes": tile_bytes(aligned_roots)}
    for b in batch_sizes:
        rates: dict[str, list[float]] = {k: [] for k in configs}
        for r in range(rounds):
            order = list(configs) if r % 2 == 0 else list(reversed(configs))
            for k in order:
                src, opts = configs[k]
                rates[k].append(epoch_rate(src, b, **opts))
            print(f"batch {b} round {r}: " + ", ".join(f"{k} {rates[k][-1]:,.0f}" for k in configs), flush=True)
        results[f"batch_{b}"] = {
            k: {"median_cells_per_s": statistics.median(v), "rounds": v,
                "ratio_to_single": None if k == "single" else statistics.median(
                    x / s for x, s in zip(v, rates["single"]))}
            for k, v in rates.items()
        }
        # half against the same cells read as one dataset (single_half), round by round.
        for k in ("half", "aligned_half"):
            results[f"batch_{b}"][k]["ratio_to_single_half"] = statistics.median(
                x / s for x, s in zip(rates[k], rates["single_half"]))
    print(json.dumps(results, indent=2))
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["prepare", "run", "opening", "peers", "epochs"])
    p.add_argument("workdir", type=Path)
    p.add_argument("--source", type=Path, default=SOURCE)
    p.add_argument("--members", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batch-sizes", default="1024,5000")
    p.add_argument("--latency", type=float, default=0.05)
    p.add_argument("--epochs", type=int, default=4, help="epochs: epochs of each loader")
    p.add_argument("--give-back-all", action="store_true",
                   help="epochs: the corpus gives back every tile no window ahead needs at each window, as before "
                        "it kept tiles for the next epoch")
    p.add_argument("--gene-order", choices=["totals", "random"], default="totals",
                   help="prepare: each member's stored gene order (totals: by decreasing total over its cells, as "
                        "`deltacells convert` writes; random: a seeded random order)")
    p.add_argument("--cells-per-member", type=int, default=4000)
    p.add_argument("--shared-data", type=Path, default=SHARED_DATA,
                   help="prepare: the folder of real samples (PBMC 3k as h5ad, 10x HDF5 and Matrix Market)")
    p.add_argument("--loaders", default="deltacells,corpus_aligned,aligned,anndata_backed,annbatch",
                   help="peers: which loaders to measure (deltacells: the corpus; corpus_aligned: the corpus over "
                        "its members aligned once; aligned: one dataset in the vocabulary's genes, converted once; "
                        "anndata_backed; annbatch)")
    a = p.parse_args()
    a.workdir.mkdir(parents=True, exist_ok=True)
    if a.command == "prepare":
        prepare(a.workdir, a.source, a.members, a.gene_order, a.shared_data)
    elif a.command == "opening":
        opening(a.workdir, a.members, a.latency)
    elif a.command == "epochs":
        epochs(a.workdir, a.source, a.rounds, int(a.batch_sizes.split(",")[0]), a.epochs, a.give_back_all)
    elif a.command == "peers":
        peers(a.workdir, a.source, a.cells_per_member, a.rounds, [int(x) for x in a.batch_sizes.split(",")],
              a.loaders.split(","))
    else:
        run(a.workdir, a.source, a.rounds, [int(x) for x in a.batch_sizes.split(",")])


if __name__ == "__main__":
    main()
