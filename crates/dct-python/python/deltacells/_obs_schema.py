"""Obs schemas and frames, fingerprints, the cache directory rule and the gene table's conversions: what writing
and reading obs share (``deltacells.obs`` is the public face)."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from deltacells import _core

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    import pyarrow as pa

log = logging.getLogger("deltacells.obs")

#: Categorical columns with more categories than this (over all inputs) are stored as strings.
DEFAULT_MAX_CATEGORIES = 20_000
SCHEMA_FORMAT = "deltacells-obs"
SCHEMA_VERSION = 1
KINDS = ("category", "numeric", "bool", "string")


# ---------------------------------------------------------------------------------------------- frames


def _kind_of(name: str, s: Any, strict: bool = True) -> str:
    """The obs kind of a pandas Series (categorical, bool, numeric, string), or ``ValueError``. ``strict=False``
    (gene tables, which have always stored them so) takes an object column of non-strings as strings."""
    import pandas as pd
    from pandas.api import types as pt

    dt = s.dtype
    if isinstance(dt, pd.CategoricalDtype):
        return "category"
    if pt.is_bool_dtype(dt):
        return "bool"
    if pt.is_numeric_dtype(dt) and not pt.is_complex_dtype(dt) and not pt.is_timedelta64_dtype(dt):
        return "numeric"
    if pt.is_string_dtype(dt) or dt == object:  # noqa: E721 (dtype equality: numpy dtypes compare equal to `object`)
        if dt == object:  # noqa: E721
            held = pd.api.types.infer_dtype(s, skipna=True)
            # Booleans with gaps: pandas holds True/False with None or NaN as objects.
            if held == "boolean":
                return "bool"
            if held == "bytes":
                _text(name, next(v for v in s if isinstance(v, (bytes, np.bytes_))))  # says how to decode them
            if strict and held not in ("string", "empty"):
                # Numbers, dates or lists held as objects are not text: storing their str() would change them
                # silently (anndata refuses to write such a column too).
                raise ValueError(
                    f"obs column {name!r} is an object column of {held} values, not strings: convert it (numbers "
                    "with pd.to_numeric, text with .astype(str)) or exclude it"
                )
        return "string"
    raise ValueError(
        f"obs column {name!r} has unsupported dtype {dt}; exclude it (supported: categorical, numeric, bool, string)"
    )


_NUMPY_OF_ARROW = {
    "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64, "uint8": np.uint8, "uint16": np.uint16,
    "uint32": np.uint32, "uint64": np.uint64, "float": np.float32, "double": np.float64,
}


def _column_tuple(
    name: str, s: Any, kind: str | None = None, arrow_type: str | None = None, strict: bool = True
) -> tuple[str, str, Any, Any]:
    """One pandas Series as a frame item for the Rust core: ``(kind, name, values, extra)``. With the stored
    ``arrow_type`` of a numeric column, integral floats (integers that pandas holds as float64 with NaN for
    missing values) are given as that integer type."""
    import pandas as pd

    own = _kind_of(name, s, strict)
    if kind is not None and _all_missing(s) and (s.dtype == object or own != kind):  # noqa: E721
        # No values to take a type from: the schema's (a column of this kind keeps its own dtype, float32 say).
        return _missing_column(name, len(s), kind, _NUMPY_OF_ARROW.get(arrow_type or "", np.float64))
    if kind in ("string", "bool") and own != kind and not (kind == "string" and own == "category"):
        # Values of another kind for a string or bool column would be turned into text, or into truth values,
        # silently (a numeric column refuses them in the Rust core).
        raise ValueError(
            f"obs column {name!r} is a {kind} column in the schema but holds {own} values (dtype {s.dtype}); "
            f"convert them first"
        )
    kind = kind or own
    if kind == "category":
        if isinstance(s.dtype, pd.CategoricalDtype):
            codes = np.ascontiguousarray(s.cat.codes.to_numpy(), dtype=np.int32)
            categories = [_text(name, c) for c in s.cat.categories]
            return ("category", name, codes, categories, bool(s.cat.ordered))  # type: ignore[return-value]
        # Plain labels for a category column: sent as strings, the schema's vocabulary codes them.
        kind = "string"
    if kind == "string":
        values = s.astype(object).to_numpy()
        return ("string", name, [None if _missing(v) else _text(name, v) for v in values], None)
    missing = np.asarray(s.isna().to_numpy(), dtype=bool)
    mask = np.ascontiguousarray(missing) if missing.any() else None
    if kind == "bool":
        values = np.array([False if m else bool(v) for v, m in zip(s.astype(object).to_numpy(), missing)], dtype=bool)
        return ("bool", name, values, mask)
    dt = s.dtype
    if isinstance(dt, np.dtype):
        values = s.to_numpy()
        if values.dtype == np.float16:
            values = values.astype(np.float32)
    else:  # pandas nullable numbers (Int64, Float32, ...)
        values = s.to_numpy(dtype=_numpy_dtype(name, dt), na_value=0)
    target = _NUMPY_OF_ARROW.get(arrow_type or "")
    if target is not None and np.issubdtype(target, np.integer) and np.issubdtype(values.dtype, np.floating):
        filled = np.where(missing, 0, values)
        info = np.iinfo(cast("type[np.integer[Any]]", target))  # an integer type: checked just above
        if np.all(np.isfinite(filled)) and np.all(filled == np.round(filled)) and (
            len(filled) == 0 or (filled.min() >= info.min and filled.max() <= info.max)
        ):
            values = filled.astype(target)
    elif target is np.float32 and values.dtype == np.float64:
        filled = np.where(missing, 0.0, values)
        narrow = filled.astype(np.float32)
        if np.array_equal(narrow.astype(np.float64), filled, equal_nan=True):
            values = narrow  # float32 values that pandas widened (a missing value makes float64 NaN)
    return ("numeric", name, np.ascontiguousarray(values), mask)


def _all_missing(s: Any) -> bool:
    """Whether a series holds no value at all (None, NaN, NA; a float column of NaN is how pandas and anndata hold
    an empty column): a column of no kind in this frame. A categorical keeps its kind from its categories."""
    import pandas as pd

    return bool(not isinstance(s.dtype, pd.CategoricalDtype) and s.isna().all())


def _missing_column(name: str, n: int, kind: str, dtype: Any) -> tuple[str, str, Any, Any]:
    """A frame item of ``n`` missing values of ``kind`` (numbers of numpy ``dtype``)."""
    mask = np.ones(n, dtype=bool)
    if kind == "category":
        return ("category", name, np.full(n, -1, dtype=np.int32), [])
    if kind == "string":
        return ("string", name, [None] * n, None)
    if kind == "bool":
        return ("bool", name, np.zeros(n, dtype=bool), mask)
    return ("numeric", name, np.zeros(n, dtype=dtype), mask)


def _numbers_dtype(s: Any) -> Any:
    """The numpy dtype a numeric series is sent as."""
    dt = s.dtype if isinstance(s.dtype, np.dtype) else _numpy_dtype(str(s.name), s.dtype)
    return np.dtype(np.float32) if dt == np.float16 else dt


def _numpy_dtype(name: str, dt: Any) -> np.dtype[Any]:
    """The numpy dtype of a pandas extension dtype of numbers (Int64, Float32, ...); ``ValueError`` naming the
    column for any other (strings, sparse arrays)."""
    inner = getattr(dt, "numpy_dtype", None)
    if inner is None or np.dtype(inner).kind not in "iufb":
        hint = " (densify it: s.sparse.to_dense())" if "Sparse" in type(dt).__name__ else ""
        raise ValueError(f"obs column {name!r} has dtype {dt}, which a numeric column cannot take{hint}")
    return np.dtype(inner)


def _text(name: str, v: Any) -> str:
    """A label or string value as text; bytes (as h5py reads strings) are refused, not stored as "b'...'"."""
    if isinstance(v, (bytes, np.bytes_)):
        raise ValueError(f"obs column {name!r} holds bytes ({v!r}): decode them first, e.g. s.str.decode('utf-8')")
    return str(v)


def _missing(v: Any) -> bool:
    if v is None:
        return True
    try:
        import pandas as pd

        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


def _check_column_names(df: Any, names: Sequence[Any]) -> None:
    """The obs columns ``names`` of ``df`` are strings, each one column of it (``ValueError`` naming those that are
    not); other columns of the frame are not looked at."""
    others = [c for c in names if not isinstance(c, str)]
    if others:
        raise ValueError(f"obs column names must be strings, not {others[:5]!r}: rename them, e.g. "
                         "df.columns = df.columns.astype(str)")
    wanted = set(names)
    twice = sorted({c for c in df.columns[df.columns.duplicated()] if c in wanted})
    if twice:
        raise ValueError(f"obs columns {twice!r} appear more than once: rename or drop the copies")


def _frame(df: Any, names: Sequence[str], schema: ObsSchema | None = None) -> list[tuple[str, str, Any, Any]]:
    """The columns ``names`` of a pandas frame as a frame for the Rust core (in the stored kinds and types of
    ``schema`` when given)."""
    _check_column_names(df, names)
    if schema is None:
        return [_column_tuple(n, df[n]) for n in names]
    return [_column_tuple(n, df[n], schema[n].kind, schema[n].arrow_type) for n in names]


def _table_frame(table: Any, schema: ObsSchema) -> list[tuple[str, str, Any, Any]]:
    """An Arrow table already in a schema's stored form (``ObsSchema.encode``) as a frame."""
    out: list[tuple[str, str, Any, Any]] = []
    for c in schema.columns:
        col = table.column(c.name)
        missing = np.asarray(col.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        mask = missing if missing.any() else None
        if c.kind == "category":
            codes = np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.int32)
            item = ("category", c.name, np.ascontiguousarray(codes), list(c.categories or []), c.ordered)
            out.append(item)  # type: ignore[arg-type]
        elif c.kind == "string":
            out.append(("string", c.name, col.to_pylist(), None))
        elif c.kind == "bool":
            values = np.asarray(col.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)
            out.append(("bool", c.name, np.ascontiguousarray(values), mask))
        else:
            values = col.fill_null(0).to_numpy(zero_copy_only=False) if mask is not None else col.to_numpy()
            out.append(("numeric", c.name, np.ascontiguousarray(values), mask))
    return out


# ---------------------------------------------------------------------------------------------- schema


@dataclass
class ColumnSpec:
    """One obs column: its name, kind (``category``, ``numeric``, ``bool``, ``string``), stored Arrow type
    (``int8``/``int16``/``int32`` codes for categories, ``int64``, ``double``, ``float``, ``bool``, ``string``,
    ...) and, for categories, the global vocabulary and whether it is ordered (pandas ``ordered=True``)."""

    name: str
    kind: str
    arrow_type: str
    categories: list[str] | None = None
    ordered: bool = False

    def pa_type(self) -> pa.DataType:
        """The Arrow type (needs pyarrow)."""
        import pyarrow as pa

        return pa.type_for_alias(self.arrow_type)


class ObsSchema:
    """The obs columns of a dataset (``obs/schema.json``): kinds, stored types and global vocabularies."""

    def __init__(self, columns: Sequence[ColumnSpec]) -> None:
        self.columns: list[ColumnSpec] = list(columns)
        names = [c.name for c in self.columns]
        if len(set(names)) != len(names):
            raise ValueError("duplicate obs column names")
        for c in self.columns:
            if c.kind not in KINDS:
                raise ValueError(f"unknown column kind {c.kind!r}")
            if (c.kind == "category") != (c.categories is not None):
                raise ValueError(f"column {c.name!r}: categories are required for (and only for) kind 'category'")
        self._json = _core.schema_json(
            [(c.name, c.kind, c.arrow_type, c.categories, bool(c.ordered)) for c in self.columns]
        )

    @property
    def names(self) -> list[str]:
        """Column names, in order."""
        return [c.name for c in self.columns]

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def __iter__(self) -> Iterator[str]:
        """The column names, in order (as iterating a mapping gives its keys)."""
        return iter(self.names)

    def __len__(self) -> int:
        """The number of columns."""
        return len(self.columns)

    def __getitem__(self, name: str) -> ColumnSpec:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(f"unknown obs column {name!r}; available: {self.names}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ObsSchema) and self.to_json() == other.to_json()

    def __repr__(self) -> str:
        return f"ObsSchema({', '.join(f'{c.name}: {c.kind}' for c in self.columns)})"

    def to_json(self) -> str:
        """The exact text of ``obs/schema.json`` (byte-equal to the original package's for the same schema)."""
        return self._json

    @classmethod
    def from_json(cls, text: str | bytes) -> ObsSchema:
        """Parses ``obs/schema.json`` text (``ValueError`` if it is not an obs schema)."""
        raw = text.decode() if isinstance(text, bytes) else text
        try:
            _, columns = _core.parse_schema(raw)
        except ValueError as e:
            raise ValueError(f"not a deltacells obs schema (or an unsupported version): {e}") from None
        return cls([ColumnSpec(n, k, t, c, o) for n, k, t, c, o in columns])

    def arrow_schema(self) -> pa.Schema:
        """The Arrow schema of the stored columns (needs pyarrow)."""
        import pyarrow as pa

        return pa.schema([(c.name, c.pa_type()) for c in self.columns])

    @classmethod
    def infer(
        cls,
        frames: Iterable[pd.DataFrame],
        *,
        max_categories: int = DEFAULT_MAX_CATEGORIES,
        columns: Sequence[str] | None = None,
        exclude: Sequence[str] = (),
    ) -> ObsSchema:
        """The schema of obs frames (pandas DataFrames, e.g. one per input file): columns in the first frame's
        order (or ``columns``), minus ``exclude``; categorical columns get the union of every frame's categories
        in order of first appearance and become strings above ``max_categories``; numbers are widened to hold
        every frame's values. Objects that are booleans with gaps (``None``/``NaN``) are a bool column; a frame
        whose column holds no value at all takes the kind the other frames give it. One DataFrame is taken as a
        list of one."""
        if hasattr(frames, "columns") and hasattr(frames, "dtypes"):
            frames = [cast("pd.DataFrame", frames)]
        frames_seen: list[Any] = []
        names: list[str] | None = None
        kinds: dict[str, str] = {}
        typed: dict[str, Any] = {}  # each column's first series with values
        for k, df in enumerate(frames):
            wanted = [c for c in (columns if columns is not None else list(df.columns)) if c not in set(exclude)]
            _check_column_names(df, wanted)
            if columns is not None:
                missing = [c for c in wanted if c not in df.columns]
                if missing:
                    raise ValueError(f"obs frame {k} lacks columns {missing}")
            if names is None:
                names = wanted
            elif columns is None and wanted != names:
                raise ValueError(f"obs frame {k} has different columns than the first one")
            for n in names:
                if _all_missing(df[n]):
                    continue  # values of no kind: the other frames decide the column's
                kind = _kind_of(n, df[n])
                seen = kinds.setdefault(n, kind)
                if seen != kind and {seen, kind} != {"category", "string"}:
                    raise ValueError(f"obs column {n!r} is {seen!r} in some frames and {kind!r} in others")
                typed.setdefault(n, df[n])
            frames_seen.append(df)
        if names is None:
            raise ValueError("no obs frames given")
        items = [
            [
                _missing_column(n, len(df), kinds[n], _numbers_dtype(typed[n]) if kinds[n] == "numeric" else None)
                # A frame of no value whose dtype is of the column's kind still brings its type (all-NaN float64
                # next to integers makes a double column, as the original package infers).
                if n in kinds and _all_missing(df[n]) and _kind_of(n, df[n]) != kinds[n]
                else _column_tuple(n, df[n])
                for n in names
            ]
            for df in frames_seen
        ]
        text = _core.infer_schema(items, int(max_categories))
        return cls.from_json(text)

    def encode(self, df: pd.DataFrame) -> pa.Table:
        """The frame in stored form as an Arrow table of this schema (category columns as global codes, -1 for
        missing; needs pyarrow). The frame's columns must be exactly the schema's."""
        import pyarrow as pa

        have, want = set(df.columns), set(self.names)
        if have != want:
            missing, extra = sorted(want - have), sorted(have - want)
            raise ValueError(f"obs columns do not match the schema (missing: {missing}, unexpected: {extra})")
        try:
            stored = _core.encode_frame(self.to_json(), _frame(df, self.names, self), len(df))
        except ValueError as e:
            raise ValueError(_vocabulary_message(str(e))) from None
        arrays = []
        for c in self.columns:
            v = stored[c.name]
            if isinstance(v, list):
                arrays.append(pa.array(v, type=c.pa_type()))
            elif c.kind != "category" and v.dtype == np.float64 and c.arrow_type != "double":
                arrays.append(pa.array(v, type=c.pa_type(), from_pandas=True))
            else:
                arrays.append(pa.array(v, type=c.pa_type(), from_pandas=c.kind != "category"))
        return pa.Table.from_arrays(arrays, schema=self.arrow_schema())


def _vocabulary_message(message: str) -> str:
    # The Rust converter says which label or category is missing from the vocabulary; the original package's
    # wording ("not in the dataset's vocabulary") is what users match on.
    if "vocabulary" in message or "categories" in message:
        return f"{message} (not in the dataset's vocabulary)"
    return message


def obs_fingerprint(schema_json: str, tile_cells: Sequence[int], shard_sha256: Sequence[str]) -> str:
    """The obs fingerprint (24 hex digits) of a schema text, the tiles' cell counts and the shards' SHA-256s."""
    return _core.obs_fingerprint(schema_json, [int(n) for n in tile_cells], list(shard_sha256))


def resolve_cache_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The cache root: ``cache_dir``, else ``$DELTACELLS_CACHE``, ``$XDG_CACHE_HOME/deltacells`` or
    ``~/.cache/deltacells`` (the same rule as the Rust crate and the CLI)."""
    explicit = os.path.expanduser(os.fspath(cache_dir)) if cache_dir else None
    return Path(os.path.expanduser(str(_core.cache_root(explicit))))


# ---------------------------------------------------------------------------------------------- var


def _var_frame(got: Any, url: str = "var.parquet") -> pd.DataFrame | None:
    """The gene table read by the Rust core (from ``url``) as a pandas DataFrame, its stored index restored."""
    import pandas as pd

    if got is None:
        return None
    columns, metadata = got
    try:
        meta = json.loads(metadata.get("pandas", "null") or "null") or {}
        if not isinstance(meta, dict):
            raise ValueError(f"an object was expected, not {type(meta).__name__}")
    except ValueError as e:
        raise _core.FormatError(
            f"{url}: its pandas metadata (the \"pandas\" key of the schema metadata) is not a JSON object ({e}); "
            "write the gene table again (deltacells.obs.write_var_table)"
        ) from None
    index_names = meta.get("index_columns") or []
    index_field = index_names[0] if index_names and isinstance(index_names[0], str) else None
    data: dict[str, Any] = {}
    index = None
    for name, values in columns:
        if isinstance(values, tuple):  # ("categorical", codes, categories, ordered)
            _, codes, categories, ordered = values
            data[name] = pd.Categorical.from_codes(codes, categories=categories, ordered=ordered)
            continue
        arr = np.asarray(values, dtype=object) if isinstance(values, list) else values
        if name == index_field:
            index = arr
        else:
            data[name] = arr
    df = pd.DataFrame(data)
    if index is not None:
        df.index = pd.Index(index, name=None if index_field == "__index_level_0__" else index_field)
    for entry in meta.get("columns", []):
        # Labels stored as strings but marked categorical (written by other tools): made categorical here.
        name = entry.get("name")
        if entry.get("pandas_type") == "categorical" and name in df.columns and df[name].dtype == object:
            df[name] = pd.Categorical(df[name])
    return df


def _var_bytes(var: pd.DataFrame) -> bytes:
    """``var.parquet`` bytes of a gene table (categorical columns kept categorical: codes and categories)."""
    import pandas as pd

    if var.index.nlevels != 1:
        raise ValueError("var must have a single-level index")
    index = [str(v) for v in var.index]
    columns = []
    ordered = []
    for name in var.columns:
        s = var[name]
        columns.append(_column_tuple(str(name), s, _kind_of(str(name), s, strict=False), strict=False))
        if isinstance(s.dtype, pd.CategoricalDtype) and s.dtype.ordered:
            ordered.append(str(name))
    index_name = var.index.name if isinstance(var.index.name, str) else None
    return bytes(_core.encode_var_table(index_name, index, columns, ordered))


# Public under `deltacells.obs`: help() and pickles name them there.
for _public in (ColumnSpec, ObsSchema):
    _public.__module__ = "deltacells.obs"
del _public
