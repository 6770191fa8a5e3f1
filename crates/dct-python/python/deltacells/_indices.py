"""Cell indices as numpy means them: integers (any integer dtype), or a boolean mask with one entry per cell."""

from __future__ import annotations

from typing import Any

import numpy as np


def cell_indices(indices: Any, n_cells: int, what: str = "cell") -> np.ndarray:
    """``indices`` as a contiguous int64 array of cell indices (or of ``what``: a tile's rows), for the Rust
    readers.

    A boolean array (or list of booleans) of length ``n_cells`` selects the cells where it is true; a boolean mask
    of any other length is an ``IndexError``, as in numpy; so are indices of more than one dimension (a batch is
    a list of cells). Floats (and other non-integer values) are a ``TypeError`` rather than being truncated, also
    in an empty array of them (an empty list is no cells). Whether each cell is in ``[0, n_cells)`` is checked
    once, by the reader that takes them (an ``IndexError`` naming the cell and its position).
    """
    if isinstance(indices, range):
        idx = np.arange(indices.start, indices.stop, indices.step, dtype=np.int64)
    else:
        given = indices.dtype if isinstance(indices, np.ndarray) else None
        if not isinstance(indices, np.ndarray):
            is_iterator = hasattr(indices, "__next__") or (
                hasattr(indices, "__iter__") and not hasattr(indices, "__len__")
            )
            indices = np.asarray(list(indices) if is_iterator else indices)
        if indices.ndim > 1:
            raise IndexError(f"{what} indices are one-dimensional, not of shape {indices.shape}; flatten them "
                             "(.ravel()) if one list of them is what you mean")
        arr = indices.ravel() if indices.ndim != 1 else indices
        if arr.dtype == np.bool_:
            if indices.ndim != 1 or len(arr) != n_cells:
                raise IndexError(
                    f"a boolean mask selects {what}s with one entry per {what}: it has {indices.shape} entries, "
                    f"and there are {n_cells} {what}s"
                )
            idx = np.flatnonzero(arr).astype(np.int64)
        elif arr.size == 0 and (given is None or given.kind in "iu"):
            idx = np.zeros(0, np.int64)
        elif arr.dtype.kind in "iu":
            if arr.dtype == np.uint64 and int(arr.max()) > np.iinfo(np.int64).max:
                # Not representable as int64 (so past any dataset's end): said as the readers say it.
                position = int(np.argmax(arr > np.iinfo(np.int64).max))
                raise _out_of_range(what, int(arr[position]), position, n_cells)
            idx = np.ascontiguousarray(arr, dtype=np.int64)
        elif arr.dtype == object and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in arr):
            # Python integers past int64 (numpy keeps them as objects): out of range of any dataset.
            position = next(i for i, v in enumerate(arr) if not -(2**63) <= int(v) < 2**63)
            raise _out_of_range(what, int(arr[position]), position, n_cells)
        else:
            example = f" (e.g. {arr[0]!r})" if arr.size else ""
            raise TypeError(
                f"{what} indices must be integers or a boolean mask, not {arr.dtype}{example}; convert them with "
                ".astype(int) if truncation is what you mean"
            )
    return idx


def _out_of_range(what: str, index: int, position: int, n: int) -> IndexError:
    """The error for an index no reader can take, said as the readers say it."""
    return IndexError(f"{what} {index} (position {position} of the request) is out of range: there are {n} {what}s")
