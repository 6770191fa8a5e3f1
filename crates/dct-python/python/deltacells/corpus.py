"""Corpora: many datasets with different genes, read as one matrix in one gene vocabulary.

``open_corpus(members, genes=..., gene_key=...)`` opens every member's reader and places each member's genes in the
corpus's vocabulary (the union of the members' genes, their intersection, or a given list such as a model's);
``Corpus.get_batch`` then reads cells of any members as rows in the vocabulary's column order. The gene map, the
reading and the selections are Rust's (``dct_corpus``); this module opens the members and holds the pieces so a
corpus can be pickled into ``DataLoader`` workers and rebuilt after ``fork``.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Union

import numpy as np

from deltacells import _core
from deltacells._indices import cell_indices
from deltacells._obs_store import _as_numpy
from deltacells._seeds import as_seed
from deltacells._tiles import SparseBatch, as_values_dtype
from deltacells.backends import Backend, backend_or_path
from deltacells.dataset import DeltaCellsDataset, _SharedThreads

__all__ = ["Corpus", "CorpusObs", "open_corpus"]

#: A member as given: a path, a store URL or a :class:`~deltacells.backends.Backend`.
MemberUri = Union[str, "os.PathLike[str]", Backend]

def _member_name(uri: MemberUri) -> str:
    found = backend_or_path(uri)
    return found if isinstance(found, str) else found.describe()


def _plain_condition(value: Any) -> Any:
    """A ``where`` condition with numpy's and pandas' values as the Python values they hold (a ``numpy.bool_`` as a
    ``bool``, an array as a list); a tuple stays a range, a single value is a list of it."""

    def plain(v: Any) -> Any:
        return v.item() if isinstance(v, np.generic) else v

    value = plain(value)
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    if isinstance(value, (str, bytes, bool, int, float)):
        return [value]
    if hasattr(value, "tolist"):  # numpy arrays, pandas Series, Index and Categorical
        return list(value.tolist())
    if isinstance(value, Iterable):
        return [plain(v) for v in value]
    return value


def _on_members(f: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
    """``f`` of each of ``items``, in order, run at once for up to as many members as their gene tables are read
    at once in Rust: opening a member reads its manifest, so a corpus of many members on an object store opens in
    the time of a few round trips rather than one per member."""
    if len(items) <= 1:
        return [f(x) for x in items]
    with ThreadPoolExecutor(max_workers=min(_core.CORPUS_OPEN_CONCURRENCY, len(items))) as pool:
        return list(pool.map(f, items))


def _naming_member(name: str, error: Exception) -> Exception:
    """``error`` of the same type with the corpus member named first (its cause once), or ``error`` itself with the
    member in a note when its type cannot be made from a message."""
    try:
        return type(error)(f"corpus member {name!r}: {error}")
    except Exception:  # noqa: BLE001 - an exception type of another signature: keep it, name the member beside it
        if hasattr(error, "add_note"):
            error.add_note(f"(corpus member {name!r})")
        return error


def _member_readers(datasets: Sequence[DeltaCellsDataset], names: Sequence[str]) -> list[Any]:
    """The members' Rust readers of this process, opened concurrently (as :func:`open_corpus` opens them); a
    member that cannot be opened again here (a worker's, say), or changed since the corpus was opened, is an error
    naming it, with the cause."""

    def reader(member: tuple[DeltaCellsDataset, str]) -> Any:
        dataset, name = member
        try:
            return dataset._core
        except (_core.DatasetChangedError, OSError) as e:
            raise _naming_member(name, e) from None

    return _on_members(reader, list(zip(datasets, names)))


class Corpus:
    """Member datasets read as one matrix whose columns are the corpus's gene vocabulary (see
    :func:`open_corpus`).

    Attributes: ``n_cells`` (selected cells), ``n_genes``, ``genes`` (the vocabulary, in column order),
    ``members`` (member names, in cell order), ``member_cells`` (selected cells of each member), and ``len()``.
    Cell ``i`` of a corpus is the ``i``-th selected cell in member order: member 0's cells, then member 1's, ...

    A selection (:meth:`select`) is a new ``Corpus`` over the same member readers; no data is copied. It is kept
    per block of 65,536 cells as runs of selected cells, or as a bitmap where the runs are many: at most about a
    bit per cell of the corpus (12.5 MB for any selection of 10^8 cells), and 8 bytes a run when runs are few.
    """

    def __init__(
        self,
        datasets: Sequence[DeltaCellsDataset],
        names: Sequence[str],
        gene_key: str | None,
        genes: str | Sequence[str],
        selection: bytes | None = None,
        cache_dir: str | None = None,
    ) -> None:
        """Use :func:`open_corpus`; this builds a corpus of datasets already open."""
        self._cache_dir = cache_dir
        self._obs: CorpusObs | None = None
        self._datasets = list(datasets)
        self._names = list(names)
        self._gene_key = gene_key
        self._genes_spec: str | list[str] = genes if isinstance(genes, str) else _vocabulary(genes)
        self._selection = selection
        self._pid = -1
        self._core_obj: Any = None
        self._root = _CoreRoot()
        core = self._core
        self.genes: list[str] = list(core.genes())
        self.members: list[str] = list(core.members())
        self.n_genes: int = len(self.genes)

    @property
    def _core(self) -> Any:
        """The Rust corpus of this process (rebuilt from the members after a fork or unpickling), a selection of
        its root's: corpora chosen from one another share the root, and with it the cap on the tiles their members
        keep, also when unpickled together (into one process, a DataLoader worker)."""
        if self._core_obj is None or self._pid != os.getpid():
            core = self._root.core(self)
            if self._selection is not None:
                core = core.with_selection_bytes(self._selection)
            self._core_obj, self._pid = core, os.getpid()
        return self._core_obj

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_core_obj"] = None
        state["_pid"] = -1
        state["_obs"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    @property
    def n_cells(self) -> int:
        """Cells (selected)."""
        return int(self._core.n_cells())

    def __len__(self) -> int:
        return self.n_cells

    @property
    def member_cells(self) -> list[int]:
        """Selected cells of each member, in member order."""
        return [int(n) for n in self._core.member_cells()]

    @property
    def datasets(self) -> list[DeltaCellsDataset]:
        """The members' readers, in member order."""
        return list(self._datasets)

    def __repr__(self) -> str:
        if "members" not in self.__dict__:  # a corpus whose opening failed (as a traceback's locals show it)
            return "Corpus(not opened)"
        shown = ", ".join(repr(n) for n in self.members[:3]) + (", ..." if len(self.members) > 3 else "")
        return (
            f"Corpus({len(self.members)} members [{shown}], {self.n_cells} cells, {self.n_genes} genes, "
            f"genes={self._genes_spec if isinstance(self._genes_spec, str) else 'given'!r}, "
            f"gene_key={self._gene_key!r})"
        )

    def member_of(self, cells: Sequence[int] | np.ndarray | Iterable[int]) -> np.ndarray:
        """The member index of each of ``cells`` (int64). Out-of-range cells raise ``IndexError``."""
        return self._core.member_of(cell_indices(cells, self.n_cells))

    def get_batch(
        self, cells: Sequence[int] | np.ndarray | Iterable[int], values_dtype: Any = np.float32
    ) -> SparseBatch:
        """The rows of ``cells`` (corpus indices, any order, repeats allowed, or a boolean mask) as a
        :class:`~deltacells.SparseBatch` in request order: columns are the vocabulary's (``corpus.genes``), column
        indices sorted within each row, counts exactly the members'. ``values_dtype`` is float32 or int32.
        Out-of-range cells raise ``IndexError``. The GIL is released while members' tiles are read."""
        dt = as_values_dtype(values_dtype)
        idx = cell_indices(cells, self.n_cells)
        indptr, indices, values, _member = self._core.get_batch(idx, str(dt))
        return SparseBatch(indptr, indices, values, self.n_genes)

    def get_batch_with_members(
        self, cells: Sequence[int] | np.ndarray | Iterable[int], *, values_dtype: Any = np.float32
    ) -> tuple[SparseBatch, np.ndarray]:
        """:meth:`get_batch` and the member index (int64) of each row, from one read."""
        dt = as_values_dtype(values_dtype)
        idx = cell_indices(cells, self.n_cells)
        indptr, indices, values, member = self._core.get_batch(idx, str(dt))
        return SparseBatch(indptr, indices, values, self.n_genes), member

    @property
    def tile_cells(self) -> list[int]:
        """Selected cells in each tile of the members, their tiles laid end to end (what an epoch plans over)."""
        return [int(n) for n in self._core.tile_cells()]

    @property
    def stats(self) -> dict[str, float]:
        """The members' reader counters, summed (the keys of :attr:`deltacells.DeltaCellsDataset.stats`)."""
        return dict(self._core.stats())

    def _reader(self, memory_budget: int, window: int, *, io_threads: int, decode_threads: int, verify: bool,
                held: tuple[int, int, int] = (0, 0, 0)) -> _CorpusReader:
        """Readers of the members for a training loader: cache and prefetch sized for windows of ``window`` tiles
        within ``memory_budget`` bytes, less the ``held`` batches (cells a batch, batches, genes of a dense batch or
        0) the loader keeps (``dct_dataset::TileBudget`` over every member's tiles), all members on one set of
        threads."""
        cached, ahead = self._core.budget_split(int(memory_budget), int(window), *held)
        core = self._core.reopened(cached, ahead, int(io_threads), int(decode_threads), bool(verify))
        return _CorpusReader(core, self.n_genes, cached, ahead)

    def select(self, cells: Sequence[int] | np.ndarray | Iterable[int]) -> Corpus:
        """The cells ``cells`` (corpus indices or a boolean mask of ``n_cells`` entries) as a corpus of their own,
        in corpus order (repeats count once). Nothing is copied; the members' readers are shared."""
        return self._selected(self._core.select(cell_indices(cells, self.n_cells)))

    @property
    def obs(self) -> CorpusObs:
        """The members' obs as one set of columns (:class:`CorpusObs`): the union of the members' columns, one
        vocabulary per category column (the members' categories in order of first appearance), a column a member
        lacks missing for its cells. A column of another kind in another member is a ``ValueError`` naming both."""
        if self._obs is None or self._obs._pid != os.getpid():
            self._obs = CorpusObs(self._core.obs(self._cache_dir), self.n_cells)
        return self._obs

    def where(self, **conditions: Any) -> Corpus:
        """The cells whose obs meet every condition, as a corpus of their own (in corpus order). A list means "one
        of these values" (category labels, strings, numbers, booleans; a single value is that value), a pair
        ``(low, high)`` the numbers from ``low`` to ``high`` inclusive, ``None`` leaving that end open::

            corpus.where(tissue=["lung", "blood"], n_genes=(200, None))

        An unknown column is a ``KeyError``; a condition that does not fit its column (a range on a category
        column) a ``ValueError``. Values may be numpy's (scalars, arrays) or pandas'. The columns are read a block
        of cells at a time."""
        core = self.obs._core.filter([(name, _plain_condition(value)) for name, value in conditions.items()])
        return self._selected(core)

    def split(self, fractions: Mapping[str, float], *, by: str | None = None, seed: int = 0) -> dict[str, Corpus]:
        """Disjoint parts covering every cell, ``{name: Corpus}``, one per ``fractions`` entry (a mapping
        ``name -> fraction``, summing to 1). With ``by`` (an obs column, e.g. ``"donor_id"``) whole groups of cells
        sharing its value go to one part, so no group is in two parts; a member's cells missing the value are one
        group (a member without the column is one group). Groups are dealt member by member, each member's new
        groups to the part furthest below its fraction (of a few seeded orders, the one ending closest to the
        fractions), so each part comes within about one group's cells of its fraction, as the groups' sizes and
        those of earlier members allow (a part of ``0`` gets none; a part of more left empty is warned about).
        Without ``by`` each member's cells, in a seeded order, are cut at the fractions, so each part holds its
        fraction of every member's cells to within one cell. The same ``(fractions, by, seed)`` always gives the
        same parts, also after members are added at the end (they deal only their own cells and new groups);
        ``seed`` as :class:`DeltaCellsIterableDataset` takes it. Memory: one entry per group, and 16 bytes per cell
        of the largest member without ``by``."""
        if not isinstance(fractions, Mapping):
            raise TypeError(f"fractions must be a mapping of part names to fractions, e.g. {{'train': 0.8, "
                            f"'test': 0.2}}, not {type(fractions).__name__}")
        parts = self.obs._core.split([(str(k), float(v)) for k, v in fractions.items()], by, as_seed(seed))
        out = {name: self._selected(core) for name, core in parts}
        empty = [name for name, part in out.items() if part.n_cells == 0 and float(fractions[name]) > 0]
        if empty:
            cause = (f"the groups of obs column {by!r} are too few or too large" if by is not None
                     else "the corpus has too few cells")
            warnings.warn(f"split: the part(s) {empty} got no cells: {cause} for these fractions (a loader over "
                          "such a part is refused)", stacklevel=2)
        return out

    def _selected(self, core: Any) -> Corpus:
        return self._with_selection(core.selection_bytes(), core)

    def _with_selection(self, selection: bytes, core: Any) -> Corpus:
        out = object.__new__(Corpus)
        out.__dict__.update(self.__dict__)
        out._selection = selection
        out._core_obj, out._pid = core, os.getpid()
        out._obs = None
        return out


class _CoreRoot:
    """The Rust corpus of every member cell, built once per process for a corpus and those chosen from it (they
    share this object, so pickled together they share it again); never pickled itself."""

    def __init__(self) -> None:
        self._core: Any = None
        self._pid = -1
        # One root however many threads ask at once (the loader's gathering thread and the caller's, say); a forked
        # child makes its own lock with its root.
        self._lock = threading.Lock()
        self._lock_pid = os.getpid()

    def core(self, corpus: Corpus) -> Any:
        """The root corpus of ``corpus``'s members in this process."""
        if self._lock_pid != os.getpid():
            self._lock, self._lock_pid = threading.Lock(), os.getpid()
        with self._lock:
            if self._core is None or self._pid != os.getpid():
                readers = _member_readers(corpus._datasets, corpus._names)
                # Random reads keep as many decoded tiles across all members as one member's reader would keep,
                # not that many per member (a loader's readers are reopened without the cap: they give tiles back
                # themselves).
                cap = max(d.max_cached_tiles for d in corpus._datasets)
                self._core = _core.Corpus(readers, corpus._names, corpus._gene_key, corpus._genes_spec, cap)
                self._pid = os.getpid()
            return self._core

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        # A new root where it is unpickled, whatever the pickle protocol (an empty state is never restored under
        # protocols 0 and 1).
        return (_CoreRoot, ())


class CorpusObs:
    """The obs of a :class:`Corpus` (its ``obs`` attribute): ``columns``, ``kind``, ``categories``, ``localize``,
    ``take`` and ``take_pandas``, as a dataset's obs has them, over every member."""

    def __init__(self, core: Any, n_cells: int) -> None:
        self._core = core
        self._n_cells = int(n_cells)
        self._pid = os.getpid()
        self._kinds: dict[str, str] = dict(core.columns())
        self._conflicts: dict[str, str] = dict(core.conflicts())
        self._local: set[str] = set()

    @property
    def columns(self) -> list[str]:
        """The union of the members' obs columns: those of one kind in order of first appearance, then those in
        :attr:`conflicts` (reading one of them is a ``ValueError`` naming both members)."""
        return list(self._kinds) + [c for c in self._conflicts if c not in self._kinds]

    @property
    def conflicts(self) -> dict[str, str]:
        """The columns whose kind differs between members (a category in one, numbers in another), each with the
        reason naming both members. (Category labels in one member and strings in another are no conflict: the
        column is a string column.) They come last in :attr:`columns`, and using one is a ``ValueError`` saying
        so; the other columns are unaffected."""
        return dict(self._conflicts)

    def kind(self, column: str) -> str:
        """``"category"``, ``"numeric"``, ``"bool"`` or ``"string"``; ``KeyError`` for an unknown column,
        ``ValueError`` for one whose kind differs between members."""
        if column in self._conflicts:
            raise ValueError(self._conflicts[column])
        if column not in self._kinds:
            raise KeyError(f"unknown obs column {column!r}; the corpus has {self.columns}")
        return self._kinds[column]

    def categories(self, column: str) -> list[str]:
        """The corpus's vocabulary of a category column (codes index it)."""
        cats = self._core.categories(column)
        if cats is None:
            raise ValueError(f"obs column {column!r} is not categorical (it is {self.kind(column)})")
        return list(cats)

    def ordered(self, column: str) -> bool:
        """Whether a category column's categories are ordered (pandas ``ordered=True``): every member that has
        categories for it stores it ordered, with the same categories in the same order."""
        return bool(self._core.ordered(column))

    def localize(self, columns: str | Sequence[str]) -> list[str]:
        """Makes ``columns`` local in every member that has them (once per node); returns those some member
        fetched from its shards rather than found in the node's cache."""
        cols = [columns] if isinstance(columns, str) else list(columns)
        fetched = list(self._core.localize(cols))
        self._local.update(cols)
        return fetched

    def take(
        self, cells: Sequence[int] | np.ndarray, columns: str | Sequence[str], *, warn: bool = True
    ) -> dict[str, Any]:
        """The values of ``columns`` at corpus ``cells`` (localized first), in request order, as numpy arrays as a
        dataset's ``obs.take`` gives them: category columns as codes into the corpus's vocabulary (-1 missing, also
        for cells whose member lacks the column), numbers (NaN missing), booleans, and strings and booleans with
        missing values as object arrays (``None`` missing). Columns some member had to fetch from its shards (not
        in the node's cache yet) give a ``UserWarning`` unless ``warn=False``, as a dataset's ``obs.take`` does."""
        return self._take(cells, [columns] if isinstance(columns, str) else list(columns), warn, 3)

    def _take(self, cells: Sequence[int] | np.ndarray, cols: list[str], warn: bool, stacklevel: int) -> dict[str, Any]:
        for c in cols:
            self.kind(c)
        missing = [c for c in cols if c not in self._local]
        fetched = self.localize(missing) if missing else []
        if fetched and warn:
            warnings.warn(
                f"obs columns {fetched} were not in the local cache of every member; they were fetched now. Call "
                "corpus.obs.localize([...]) (or pass obs_columns=... to the loader) up front to avoid this stall.",
                UserWarning,
                stacklevel=stacklevel,
            )
        got = self._core.take(cell_indices(cells, self._n_cells), cols)
        return {c: _as_numpy(got[c]) for c in cols}

    def take_pandas(
        self, cells: Sequence[int] | np.ndarray, columns: str | Sequence[str], *, warn: bool = True
    ) -> Any:
        """:meth:`take` as a pandas DataFrame in request order; category columns are pandas categoricals with the
        corpus's vocabulary."""
        import pandas as pd

        cols = [columns] if isinstance(columns, str) else list(columns)
        got = self._take(cells, cols, warn, 3)
        frame: dict[str, Any] = {}
        for c in cols:
            if self.kind(c) == "category":
                dtype = pd.CategoricalDtype(self.categories(c), ordered=self.ordered(c))
                frame[c] = pd.Categorical.from_codes(np.asarray(got[c]).astype(np.int64), dtype=dtype)
            else:
                frame[c] = got[c]
        return pd.DataFrame(frame)


class _CorpusReader:
    """A corpus's readers as a training loader uses them (one per process; not pickled)."""

    def __init__(self, core: Any, n_genes: int, cached: int, ahead: int) -> None:
        self._core = core
        self.n_genes = n_genes
        #: Decoded tiles the members' caches hold together at most.
        self.max_cached_tiles = cached
        #: Tiles the members fetch ahead (the loader's prefetch depth).
        self.ahead = ahead

    def prefetch(self, tiles: Sequence[int]) -> int:
        """Starts loading corpus tiles ``tiles``."""
        return int(self._core.prefetch([int(t) for t in tiles]))

    def plan_passes(self, this_pass: Sequence[int], next_pass: Sequence[int]) -> None:
        """Records the order in which this pass and the next first read the corpus tiles (see
        :meth:`deltacells.DeltaCellsDataset.plan_passes`)."""
        self._core.plan_passes([int(t) for t in this_pass], [int(t) for t in next_pass])

    def release_tiles_for(self, ahead: Sequence[int], window: int) -> int:
        """At a new window of ``window`` tiles: gives back the members' cached tiles but ``ahead`` and, once the
        passes are planned, those read soonest within the cache size, so the members' caches together keep to the
        budget and still keep tiles for the next epoch."""
        return int(self._core.release_tiles_for([int(t) for t in ahead], int(window)))

    def get_batch_with_members(self, cells: np.ndarray, values_dtype: Any) -> tuple[SparseBatch, np.ndarray]:
        """The rows of ``cells`` and the member of each."""
        dt = as_values_dtype(values_dtype)
        indptr, indices, values, member = self._core.get_batch(np.ascontiguousarray(cells, np.int64), str(dt))
        return SparseBatch(indptr, indices, values, self.n_genes), member

    def _fill_slot(self, cells: np.ndarray, values: str, slots: list[np.ndarray]
                   ) -> tuple[int, int, int, np.ndarray | None]:
        """The rows of ``cells`` read into the first of ``slots`` that holds them, planned once: ``(slot, nnz, used,
        member of each row)``, ``slot`` -1 (nothing written) when none does (see ``DeltaCellsDataset._fill_slot``)."""
        slot, nnz, used, member = self._core.fill_slot(np.ascontiguousarray(cells, np.int64), values, slots)
        return slot, nnz, used, member if slot >= 0 else None

    @property
    def stats(self) -> dict[str, float]:
        """The members' reader counters, summed."""
        return dict(self._core.stats())

    def __reduce__(self) -> Any:
        raise TypeError("a corpus's loader readers belong to their process; pickle the Corpus instead")


def _vocabulary(genes: Sequence[Any]) -> list[str]:
    """A given vocabulary's identifiers as text: strings (and integers, written in decimal); anything else (bytes as
    h5py reads them, ``None``, floats) would become a spelling no member uses, so it is refused."""
    out: list[str] = []
    for i, g in enumerate(genes):
        if isinstance(g, str):
            out.append(str(g))
        elif isinstance(g, (int, np.integer)) and not isinstance(g, (bool, np.bool_)):
            out.append(str(int(g)))
        else:
            hint = " (decode it: [g.decode() for g in genes])" if isinstance(g, (bytes, np.bytes_)) else ""
            raise TypeError(f"genes[{i}] is {g!r}, a {type(g).__name__}: the vocabulary lists gene identifiers as "
                            f"strings{hint}")
    return out


def open_corpus(
    members: Sequence[MemberUri] | Mapping[str, MemberUri],
    *,
    genes: str | Sequence[str] | None = None,
    gene_key: str | None = None,
    storage_options: dict[str, str] | None = None,
    cache_dir: str | None = None,
    **reader_options: Any,
) -> Corpus:
    """Opens datasets as one corpus.

    Args:
        members: dataset URIs (paths, store URLs, :class:`~deltacells.backends.Backend` objects) in cell order, or
            a mapping ``name -> URI`` (names default to the URI).
        genes: the vocabulary, in column order: ``None`` or ``"union"`` (every gene of any member, in order of first
            appearance), ``"intersection"`` (genes every member has, in member 0's order), or a sequence of
            identifiers (a model's vocabulary: genes no member has are all-zero columns; member genes outside it are
            dropped when rows are read). A member that keeps no gene of the vocabulary is refused (``ValueError``
            naming it): its cells would be empty rows, which means the identifiers do not match (symbols against
            Ensembl IDs), not data.
        gene_key: how genes are identified across members: ``None`` uses each member's ``var_names``; a string
            names a column of each member's gene table (``var.parquet``), e.g. ``"gene_ids"`` for Ensembl IDs. A
            member that lacks it, or names one gene twice, is refused with ``ValueError`` naming the member (and
            the gene).
        storage_options, cache_dir, reader_options: passed to each member's
            :class:`~deltacells.DeltaCellsDataset`, but ``obs_columns``: those are made local across the corpus
            (``corpus.obs.localize``), a member without one missing there; ``KeyError`` for a column no member has.
            ``max_cached_tiles`` bounds the decoded tiles random reads (:meth:`Corpus.get_batch`) keep across all
            the members together, not per member; a training loader sizes its own readers' caches from its
            ``memory_budget``.

    A member whose genes are stored in an order of their own (the converter stores them by decreasing total) has
    each row re-ordered into the vocabulary's order as it is read, which costs about as much as decoding it. For
    training over many epochs, :func:`deltacells.convert.align_corpus` writes the members once in the
    vocabulary's order; a corpus over the copies reads the same rows without re-ordering them (``deltacells corpus
    info`` says which members need it).
    """
    if isinstance(members, (str, bytes, os.PathLike)) or hasattr(members, "read_bytes"):
        raise TypeError(f"open_corpus takes a sequence of dataset URIs (or a mapping name -> URI), not one URI "
                        f"{members!r}: give [{members!r}] for a corpus of one dataset")
    if isinstance(members, Mapping):
        names = [str(n) for n in members]
        uris = list(members.values())
    else:
        uris = list(members)
        names = [_member_name(u) for u in uris]
    if not uris:
        raise ValueError("a corpus needs at least one member")
    spec: str | list[str]
    if genes is None:
        spec = "union"
    elif isinstance(genes, str):
        spec = genes
    elif isinstance(genes, (set, frozenset)):
        # A set's order changes from process to process (string hashing is salted): so would the columns.
        raise TypeError(f"genes is the corpus's column order: give an ordered sequence (a list, a numpy array, a "
                        f"pandas Index), not a {type(genes).__name__}, e.g. sorted(genes) or the model's own list")
    else:
        spec = _vocabulary(genes)

    # The obs columns to localize are the corpus's, not each member's: a member without one is missing there.
    obs_columns = reader_options.pop("obs_columns", None)

    # Every member on one set of threads: hundreds of members, one I/O runtime and one decode pool.
    threads = _SharedThreads(reader_options.get("io_threads", 4), reader_options.get("decode_threads", 1))

    def open_one(member: tuple[str, MemberUri]) -> DeltaCellsDataset:
        name, uri = member
        try:
            return DeltaCellsDataset(uri, storage_options=storage_options, cache_dir=cache_dir, _threads=threads,
                                     **reader_options)
        except (OSError, ValueError, RuntimeError) as e:
            # Missing, unreadable, malformed or changed while read: the member named, with the cause.
            raise _naming_member(name, e) from None

    datasets = _on_members(open_one, list(zip(names, uris)))
    corpus = Corpus(datasets, names, gene_key, spec, cache_dir=cache_dir)
    if obs_columns:
        cols = [obs_columns] if isinstance(obs_columns, str) else list(obs_columns)
        if not corpus.obs.columns:
            raise ValueError("obs_columns were given but no member of the corpus has obs")
        for c in cols:
            corpus.obs.kind(c)  # KeyError for a column no member has, ValueError for one of two kinds
        corpus.obs.localize(cols)
    return corpus
