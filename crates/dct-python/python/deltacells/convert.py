"""Converting AnnData ``.h5ad`` (and 10x HDF5, 10x Matrix Market) inputs into a dataset, with the Rust converter.

One machine: :func:`convert_h5ad`. Many machines, on the engine at hand (Dask, Slurm arrays, Kubernetes jobs):
:func:`plan` once (optionally after :func:`scan_part` for every share of the inputs), :func:`run_part` for every
share of the tiles, then :func:`finalize`; every step is idempotent and resumable, and the tiles are byte-identical
to a one-machine conversion.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from deltacells import _core
from deltacells._args import MAX_COUNT, int_argument
from deltacells.manifest import Manifest

__all__ = [
    "AppendReport", "align_corpus", "append", "convert_h5ad", "finalize", "merge", "natural_sort_key", "plan",
    "resolve_files", "run_part", "scan_part", "subset",
]

Log = Callable[[str], None]


_NATURAL = functools.cmp_to_key(_core.natural_cmp)


def natural_sort_key(path: str | os.PathLike[str]) -> Any:
    """A sort key ordering numbers by value (``s_2`` before ``s_10``): the converter's own order."""
    return _NATURAL(os.fspath(path))


def resolve_files(patterns: Sequence[str] | str, sort: bool = True) -> list[str]:
    """Input paths from paths and glob patterns, by the converter's one rule (the CLI's too): ``**`` matches any
    depth of folders; hidden names only match a pattern that spells the dot; an argument naming nothing is a
    ``FileNotFoundError``; a path given twice is read once, where it first came; naturally sorted with ``sort``,
    else in the order given (each pattern's matches in natural order)."""
    if isinstance(patterns, (str, os.PathLike)):
        patterns = [os.fspath(patterns)]
    return _core.resolve_inputs([os.fspath(p) for p in patterns], bool(sort))


def _options(
    *, tile_size: int, sort_genes: bool, sort_genes_max_files: int | None, n_chunks: int, level: int,
    threads: int | None, obs: bool, obs_exclude: Sequence[str], obs_columns: Sequence[str] | None,
    max_categories: int, obs_tiles_per_file: int, format_version: int, layer: str | None, raw: bool,
    feature_type: str | None, storage_options: dict[str, str] | None, preset: str = "tuned", var: bool = True,
    genes: str | Sequence[str] | None = None, gene_key: str | None = None,
) -> dict[str, Any]:
    if gene_key is not None and genes is None:
        raise ValueError("gene_key matches genes across inputs of a gene space: give genes too "
                         "('union', 'intersection' or a list of gene identifiers)")
    if genes is not None and not isinstance(genes, str):
        genes = [str(g) for g in genes]
    if sort_genes_max_files is not None and int(sort_genes_max_files) < 1:
        raise ValueError("sort_genes_max_files must be at least 1 (or None for all the files)")
    return dict(
        tile_size=int(tile_size), sort_genes=bool(sort_genes),
        sort_genes_max_files=None if sort_genes_max_files is None else int(sort_genes_max_files),
        n_chunks=int(n_chunks), level=int(level), threads=threads, obs=bool(obs), obs_exclude=list(obs_exclude),
        obs_columns=None if obs_columns is None else list(obs_columns), max_categories=int(max_categories),
        obs_tiles_per_file=int(obs_tiles_per_file), format_version=int(format_version), layer=layer, raw=bool(raw),
        feature_type=feature_type, storage_options=storage_options, preset=str(preset), var=bool(var),
        genes=genes, gene_key=gene_key,
    )


def _progress(log: Log | None) -> Callable[[dict[str, Any]], None] | None:
    if log is None:
        return None

    def report(p: dict[str, Any]) -> None:
        log(f"[tile {p['tiles_done']}/{p['tiles_total']}] {p['cells_written']} cells, {p['seconds']:.1f} s")

    return report


def _output_is_dataset(output: str) -> bool:
    return "://" not in output and os.path.exists(os.path.join(output, _core.MANIFEST_NAME))


def convert_h5ad(
    paths: Sequence[str] | str,
    output: str,
    *,
    tile_size: int = 10_000,
    sort_genes: bool = True,
    sort_files: bool = True,
    n_chunks: int = 8,
    level: int = 19,
    threads: int | None = None,
    workers: int | None = None,
    sort_genes_max_files: int | None = 10,
    overwrite: bool = False,
    obs: bool = True,
    obs_names: bool = True,
    obs_exclude: Sequence[str] = (),
    max_categories: int = 20_000,
    obs_tiles_per_file: int = 1000,
    var: bool = True,
    log: Log | None = print,
    format_version: int = 2,
    layer: str | None = None,
    raw: bool = False,
    feature_type: str | None = "Gene Expression",
    storage_options: dict[str, str] | None = None,
    preset: str = "tuned",
    genes: str | Sequence[str] | None = None,
    gene_key: str | None = None,
) -> Manifest:
    """Converts the inputs ``paths`` (files, folders or glob patterns) into a dataset at ``output`` (a path or
    store URL) with the Rust converter, and returns its manifest.

    Genes are ordered by decreasing total counts over ``sort_genes_max_files`` evenly spread inputs (``None``: all
    of them; ``sort_genes=False`` keeps the source order); tiles hold ``tile_size`` consecutive cells across input
    boundaries; obs (the cell names as ``obs_names``, last, and the inputs' obs columns with one global vocabulary
    per categorical column) and ``var.parquet`` (the gene table; not with ``var=False``, which keeps the gene names
    in ``var_names.txt``) are written too. ``threads`` bounds the threads used (default:
    every core); ``workers`` is accepted for compatibility (the converter runs in threads, not processes).
    Progress goes to ``log`` (``None``: silent). A complete dataset at ``output`` raises ``FileExistsError``
    unless ``overwrite``; an interrupted conversion to ``output`` resumes where it stopped. ``preset`` chooses how
    zstd's parameters follow from ``level`` (``"tuned"``, the default; ``"plain"``, the level's own; ``"fast"``,
    level-19 size in about half the time, ignoring ``level``), as ``deltacells convert --preset``.

    Inputs that list different genes are combined with ``genes``: ``"union"``, ``"intersection"`` or a list of
    gene identifiers (a vocabulary: its order is the column order before sorting by totals, kept with
    ``sort_genes=False``; genes outside it are dropped), matched by the inputs' gene names or, with ``gene_key``,
    by a column of each ``.h5ad`` input's gene table (e.g. ``"gene_ids"``; 10x inputs match by their feature IDs).
    A gene an input lacks is zero for its cells; ``var.parquet`` describes each gene as the first input that has
    it does. Without ``genes`` the inputs must list the same genes in the same order.
    """
    if workers is not None and int(workers) < 1:
        raise ValueError("workers must be at least 1")
    output = os.fspath(output)
    if _output_is_dataset(output) and not overwrite:
        raise FileExistsError(f"{output} is not empty; pass overwrite=True to replace it")
    files = resolve_files(paths, sort=sort_files)
    opts = _options(
        tile_size=tile_size, sort_genes=sort_genes, sort_genes_max_files=sort_genes_max_files, n_chunks=n_chunks,
        level=level, threads=threads, obs=obs, obs_exclude=list(obs_exclude) + ([] if obs_names else ["obs_names"]),
        obs_columns=None, max_categories=max_categories,
        obs_tiles_per_file=obs_tiles_per_file, format_version=format_version, layer=layer, raw=raw,
        feature_type=feature_type, storage_options=storage_options, preset=preset, var=var, genes=genes,
        gene_key=gene_key,
    )
    if log is not None:
        log(f"{len(files)} files: {files[0]} ... {files[-1]}")
    text = _core.convert(files, output, bool(overwrite), _progress(log), **opts)
    m = Manifest.from_json(text)
    if log is not None:
        mb = sum(m.tile_bytes) / 1e6
        log(f"done: {m.n_tiles} tiles, {mb:.1f} MB = {mb * 1e3 / max(1, m.n_cells):.2f} kB per cell")
    return m


def plan(
    paths: Sequence[str] | str, output: str, plan_path: str, *, sort_files: bool = True, tile_size: int = 10_000,
    sort_genes: bool = True, sort_genes_max_files: int | None = 10, n_chunks: int = 8, level: int = 19,
    threads: int | None = None, obs: bool = True, obs_exclude: Sequence[str] = (),
    obs_columns: Sequence[str] | None = None, max_categories: int = 20_000, obs_tiles_per_file: int = 1000,
    format_version: int = 2, layer: str | None = None, raw: bool = False,
    feature_type: str | None = "Gene Expression", storage_options: dict[str, str] | None = None,
    preset: str = "tuned", var: bool = True, genes: str | Sequence[str] | None = None, gene_key: str | None = None,
    overwrite: bool = False,
) -> tuple[int, int, int]:
    """Makes the plan of a split conversion of ``paths`` into ``output`` and saves it at ``plan_path`` (reusing
    the scan files of :func:`scan_part` runs); returns ``(n_cells, n_genes, n_tiles)``. ``overwrite=True`` first
    clears what the output holds (another dataset, or tiles of another plan), as ``deltacells convert ... --plan P
    --overwrite`` does. Genes are ordered by their totals over the first ``sort_genes_max_files`` inputs, as
    :func:`convert_h5ad` orders them (the command line sums over all: pass ``None`` for the same tiles)."""
    files = resolve_files(paths, sort=sort_files)
    opts = _options(
        tile_size=tile_size, sort_genes=sort_genes, sort_genes_max_files=sort_genes_max_files, n_chunks=n_chunks,
        level=level, threads=threads, obs=obs, obs_exclude=obs_exclude, obs_columns=obs_columns,
        max_categories=max_categories, obs_tiles_per_file=obs_tiles_per_file, format_version=format_version,
        layer=layer, raw=raw, feature_type=feature_type, storage_options=storage_options, preset=preset, var=var,
        genes=genes, gene_key=gene_key,
    )
    made = _core.make_plan(files, os.fspath(output), os.fspath(plan_path), overwrite=bool(overwrite), **opts)
    return tuple(made)  # type: ignore[return-value]


def _share(part: Any, parts: Any) -> tuple[int, int]:
    """``(part, parts)`` checked: ``parts`` at least 1, ``part`` in ``0..parts-1`` (``ValueError`` naming them)."""
    n = int_argument("parts", parts, 1)
    return int_argument("part", part, 0, n - 1), n


def scan_part(
    paths: Sequence[str] | str, plan_path: str, part: int, parts: int, *, sort_files: bool = True, **options: Any
) -> tuple[int, int]:
    """Scans share ``part`` of ``parts`` of the inputs (the plan's first pass) into scan files beside
    ``plan_path``; give :func:`plan` the same inputs and options afterwards. Returns ``(scanned, kept)``."""
    files = resolve_files(paths, sort=sort_files)
    defaults: dict[str, Any] = dict(
        tile_size=10_000, sort_genes=True, sort_genes_max_files=10, n_chunks=8, level=19, threads=None, obs=True,
        obs_exclude=(), obs_columns=None, max_categories=20_000, obs_tiles_per_file=1000, format_version=2,
        layer=None, raw=False, feature_type="Gene Expression", storage_options=None, preset="tuned",
    )
    defaults.update(options)
    opts = _options(**defaults)
    return tuple(_core.scan_part(files, os.fspath(plan_path), *_share(part, parts), **opts))  # type: ignore[return-value]


def run_part(
    plan_path: str, part: int, parts: int, *, threads: int | None = None, log: Log | None = None,
    storage_options: dict[str, str] | None = None,
) -> tuple[int, int]:
    """Writes share ``part`` of ``parts`` of the plan's tiles (tiles already complete are kept); returns
    ``(written, skipped)``."""
    return tuple(  # type: ignore[return-value]
        _core.run_part(
            os.fspath(plan_path), *_share(part, parts), _progress(log), threads=threads,
            storage_options=storage_options,
        )
    )


def finalize(plan_path: str, *, storage_options: dict[str, str] | None = None) -> Manifest:
    """Checks every tile of the plan, writes the side files and obs, then the manifest; returns it."""
    return Manifest.from_json(_core.finalize(os.fspath(plan_path), storage_options=storage_options))


def subset(
    source: str | os.PathLike[str], output: str | os.PathLike[str], *, cells: Sequence[int] | None = None,
    where: Mapping[str, Sequence[Any] | tuple[float | None, float | None]] | None = None,
    genes: Sequence[str] | None = None, gene_key: str | None = None, tile_size: int | None = None, level: int = 19,
    overwrite: bool = False, storage_options: dict[str, str] | None = None, listed_gene_order: bool = False,
    skip_missing_genes: bool = False,
) -> Manifest:
    """Writes some cells and genes of the dataset ``source`` as a new dataset at ``output`` and returns its manifest,
    as ``deltacells subset``: the cells ``cells`` (indices; any order, each kept once) that meet every condition of
    ``where`` (``{"tissue": ["lung", "blood"]}``: one of these values; ``{"n_genes": (200, None)}``: a number
    range, either end open), and the genes ``genes`` (identifiers under ``gene_key``: the var names by default, or a
    gene-table column such as ``"gene_ids"``), kept in the source's column order (``listed_gene_order=True``: in the
    order ``genes`` lists them; ``skip_missing_genes=True``: genes the source lacks are left out rather than
    refused). Obs come along with the
    source's category vocabularies, the gene table is cut to the kept genes, and the manifest's
    ``metadata["subset"]`` says what was chosen from what. The manifest is written last: an interrupted subset
    leaves no dataset that looks complete, and running the same subset again completes it (a finished one is left
    as it is). Runs without the GIL."""
    conditions = []
    for column, chosen in (where or {}).items():
        if isinstance(chosen, tuple) and len(chosen) == 2 and all(v is None or isinstance(v, (int, float))
                                                                   for v in chosen):
            low, high = ("" if v is None else repr(v) for v in chosen)
            conditions.append(f"{column}={low}:{high}")
        else:
            values = [chosen] if isinstance(chosen, (str, int, float, bool)) else list(chosen)
            if not values:
                raise ValueError(f"where[{column!r}] names no value")
            conditions.append(f"{column}=" + ",".join(str(v).lower() if isinstance(v, bool) else str(v)
                                                     for v in values))
    cell_list = None
    if cells is not None:
        cell_list = [int_argument("cells", c, -MAX_COUNT) for c in cells]
        for k, c in enumerate(cell_list):
            if c < 0:  # the Rust call takes cell indices as they are
                raise ValueError(f"cell {c} (position {k} of the request) is out of range: cells are 0, 1, ...")
    text = _core.subset(os.fspath(source), os.fspath(output), cell_list,
                        conditions, None if genes is None else [str(g) for g in genes], gene_key, tile_size,
                        int(level), bool(overwrite), storage_options, bool(listed_gene_order),
                        bool(skip_missing_genes))
    return Manifest.from_json(text)


def align_corpus(
    members: Sequence[str | os.PathLike[str]], output: str | os.PathLike[str], *,
    genes: str | Sequence[str] = "union", gene_key: str | None = None, level: int = 19, overwrite: bool = False,
    storage_options: dict[str, str] | None = None,
) -> list[str]:
    """Writes each of ``members`` (read as one corpus with ``genes`` and ``gene_key``, as
    :func:`deltacells.open_corpus` takes them) into the folder ``output``, under its last path component, with its
    genes in the vocabulary's order, as ``deltacells corpus align``: every cell and obs column of the member, its
    genes outside the vocabulary left out. Returns the aligned members' paths, in the members' order.

    A corpus opened over them with the same ``genes`` and ``gene_key`` reads the same rows, but moves each row to
    the vocabulary's columns by renumbering it, where members whose genes are in orders of their own (as
    ``deltacells convert`` stores them, by decreasing total) have every row re-ordered as it is read, which costs
    about as much as decoding it. For training over many epochs the one pass pays back within the first epochs;
    the copies take more bytes (genes in the vocabulary's order compress less well). Each member is written as a
    :func:`subset`: an interrupted run is completed by running it again. Runs without the GIL."""
    if isinstance(genes, str):
        space: str | list[str] = genes
    else:
        space = [str(g) for g in genes]
    written = _core.align_corpus([os.fspath(m) for m in members], os.fspath(output), space, gene_key, int(level),
                                 bool(overwrite), storage_options)
    return [out for _, out, _ in written]


@dataclass(frozen=True)
class AppendReport:
    """What :func:`append` did (the same figures as ``deltacells append --json``)."""

    #: The dataset already held these inputs (an earlier append of them): nothing was written.
    already_appended: bool
    #: This run completed an append that had stopped.
    resumed: bool
    #: Cells added.
    cells_added: int
    #: The dataset's cells after the append.
    n_cells: int
    #: The dataset's tiles after the append.
    n_tiles: int
    #: The partial last tile encoded again with the first new cells, if there was one.
    tile_rewritten: int | None
    #: New tile objects.
    tiles_added: int
    #: Bytes of the new and rewritten tiles.
    tile_bytes_written: int
    #: Obs shards written (the one holding the last tile, and new ones; all of them if the schema changed).
    obs_shards_written: list[int] = field(default_factory=list)
    #: Why every obs shard was rewritten, if it was (a column added, codes or numbers widened).
    obs_rewrite_reasons: list[str] = field(default_factory=list)
    #: Genes of the inputs the dataset lacks, dropped with ``drop_new_genes=True``.
    genes_dropped: int = 0
    #: Up to 10 of them.
    genes_dropped_examples: list[str] = field(default_factory=list)
    #: The record the append left in the manifest's ``metadata["appends"]`` (inputs with their sizes and
    #: SHA-256, first cell, cells, time).
    record: dict[str, Any] = field(default_factory=dict)


def append(
    dataset: str | os.PathLike[str], inputs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], *,
    gene_key: str | None = None, drop_new_genes: bool = False, allow_repeat: bool = False, level: int | None = None,
    layer: str | None = None, raw: bool = False, obs_exclude: Sequence[str] = (), threads: int = 0,
    storage_options: dict[str, str] | None = None,
) -> AppendReport:
    """Adds the cells of ``inputs`` (``.h5ad``, 10x ``.h5``, Matrix Market folders, or glob patterns, appended in
    natural order) at the end of ``dataset``, as ``deltacells append``.

    The inputs' genes are placed in the dataset's columns by name, or by the gene-table column ``gene_key`` (e.g.
    ``"gene_ids"``); genes the dataset lacks are refused, listing them, unless ``drop_new_genes=True``. Every full
    tile is left as it is; only the partial last tile is encoded again, with the first new cells. Obs grows with the
    cells: new categories are added at the end of each vocabulary (existing codes keep their meaning), new columns
    are missing for the dataset's cells. The manifest records each append (``metadata["appends"]``): the same inputs
    appended again change nothing (``already_appended``) unless ``allow_repeat=True``. An interrupted append is
    completed by calling this again with the same inputs; a second append is refused while one is under way. A
    reader opened before the append that reads the rewritten last tile raises
    :class:`~deltacells.DatasetChangedError`. Runs without the GIL."""
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    files = resolve_files([os.fspath(p) for p in inputs])
    matrix = f"layer:{layer}" if layer is not None else ("raw" if raw else "X")
    text = _core.append(os.fspath(dataset), files, gene_key, bool(drop_new_genes), bool(allow_repeat),
                        None if level is None else int(level), matrix, [str(c) for c in obs_exclude], int(threads),
                        storage_options)
    return AppendReport(**json.loads(text))


def merge(
    sources: Sequence[str | os.PathLike[str]], output: str | os.PathLike[str], *, level: int | None = None,
    tails_last: bool = False, overwrite: bool = False, storage_options: dict[str, str] | None = None,
) -> dict[str, int]:
    """Writes the cells of the datasets ``sources``, in order, as one dataset at ``output``, as ``deltacells merge``,
    and returns ``{"n_cells", "n_tiles", "tiles_copied", "tiles_encoded", "already_done"}`` (``already_done``:
    ``output`` held this merge, finished, so nothing was written).

    The sources must have the same genes in the same order (datasets with different genes are refused: read them
    together with :func:`deltacells.open_corpus`, or convert their sources with ``genes="union"``). Their tiles are
    copied as they are wherever they fall whole on the new dataset's tiles; after a source whose last tile is
    partial the following cells are cut into tiles anew (``level``: their zstd level, default the first source's),
    unless ``tails_last`` puts the cells of every source's partial last tile after all the full tiles: then every
    full tile is copied and only those cells are encoded again, and the manifest's
    ``metadata["merge"]["segments"]`` (``{"source", "cells": [start, end], "at"}``) says where each source's cells
    went.
    Obs is combined: one vocabulary per category column, columns a source lacks missing for its cells. The manifest
    is written last; an interrupted merge is completed by running it again, and a finished one is left as it
    is. Runs without the GIL."""
    text = _core.merge([os.fspath(s) for s in sources], os.fspath(output), None if level is None else int(level),
                       bool(tails_last), bool(overwrite), storage_options)
    report: dict[str, int] = json.loads(text)
    return report
