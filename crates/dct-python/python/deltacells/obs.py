"""Per-cell metadata ("obs") and the gene table ("var"): schemas, the node-local column cache, lookups.

Shards, schema text, fingerprints and the cache are those of the Rust crate ``dct-obs`` (byte for byte the same
files, the same cache directory rule); pandas and pyarrow are needed only for the functions that return or take
their objects.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from deltacells import _core
from deltacells._files import write_atomic
from deltacells._obs_schema import (
    DEFAULT_MAX_CATEGORIES,
    KINDS,
    SCHEMA_FORMAT,
    SCHEMA_VERSION,
    ColumnSpec,
    ObsSchema,
    _var_bytes,
    obs_fingerprint,
    resolve_cache_dir,
)
from deltacells._obs_store import ObsStore
from deltacells.dataset import DeltaCellsDataset
from deltacells.manifest import Manifest

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = [
    "DEFAULT_MAX_CATEGORIES",
    "KINDS",
    "SCHEMA_FORMAT",
    "SCHEMA_VERSION",
    "ColumnSpec",
    "ObsSchema",
    "ObsStore",
    "obs_fingerprint",
    "read_var_table",
    "resolve_cache_dir",
    "write_var_table",
]


def write_var_table(root: str | os.PathLike[str], var: pd.DataFrame) -> None:
    """Writes ``var.parquet`` (the gene table, with its pandas index) into the dataset directory ``root``
    atomically. In a complete dataset (one with ``manifest.json``) the table needs one row per gene, in stored
    column order (``ValueError`` otherwise), and the manifest is then rewritten to record it (and its SHA-256),
    last and atomically, so that readers see the table."""
    root = os.fspath(root)
    if "://" in root:
        raise ValueError(f"write_var_table writes a dataset on the local file system, not {root}: write the table "
                         "into a local copy, or give the gene table to the converter or DatasetWriter (var=...)")
    manifest_path = os.path.join(root, _core.MANIFEST_NAME)
    manifest = None
    if os.path.exists(manifest_path):
        with open(manifest_path, "rb") as f:
            manifest = Manifest.from_json(f.read())
        if len(var) != manifest.n_genes:
            raise ValueError(f"the gene table has {len(var)} rows but the dataset at {root} has {manifest.n_genes} "
                             "genes: give one row per gene, in stored column order")
        _check_gene_order(root, var)
    journal = os.path.join(root, _core.APPEND_JOURNAL_NAME)
    if manifest is not None and os.path.exists(journal):
        raise ValueError(f"an append to {root} is under way, or stopped before its manifest ({journal}): run the "
                         "same append again to complete it, then write the gene table")
    data = _var_bytes(var)
    write_atomic(os.path.join(root, _core.VAR_TABLE_NAME), data)
    if manifest is not None and (manifest.version >= 2 or not manifest.has_var_table):
        manifest.has_var_table = True
        # The table's digest recorded (version 2), so that readers take the new table as the dataset's own.
        text = _core.record_side_file(manifest.to_json().encode(), _core.VAR_TABLE_NAME, data)
        write_atomic(manifest_path, text.encode())


def _check_gene_order(root: str, var: pd.DataFrame) -> None:
    """Refuses a table whose index lists the dataset's genes (its names, or its current table's index) in another
    order: a sorted copy, say, which would put every count under another gene's name."""
    from deltacells.format import FormatError

    ds = DeltaCellsDataset(root)
    index = [str(g) for g in var.index]
    try:
        current = ds.var
    except FormatError:  # the table being replaced is damaged (or was changed by other means): nothing to keep to
        current = None
    for what, stored in (("gene names (var_names)", ds.var_names),
                         ("gene table's index", None if current is None else [str(g) for g in current.index])):
        if stored is None:
            continue
        at = _core.same_genes_in_another_order(index, list(stored))
        if at is not None:
            raise ValueError(
                f"the gene table lists the dataset's genes in another order than its {what} (row {at}: "
                f"{index[at]!r}, stored column {at}: {stored[at]!r}); give one row per gene in stored column "
                f"order, e.g. var.loc[ds.var_names] (or reindex by the dataset's gene table)")


def read_var_table(backend: Any) -> pd.DataFrame | None:
    """The gene table of the dataset at ``backend`` (a path, URL or :class:`~deltacells.backends.Backend`) as a
    pandas DataFrame, or ``None``."""
    return DeltaCellsDataset(backend).var
