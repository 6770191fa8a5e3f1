"""When each batch of a loader arrived: the timeline a report draws (``Dataset.report(bench=...)``,
``deltacells report --bench FILE``) beside or instead of ``deltacells bench --json``'s."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["Timeline"]


def _cells(batch: Any) -> int:
    """Cells of a batch: ``batch["X"]``'s rows for the loaders' dicts, else the batch's own rows or length."""
    x = batch["X"] if isinstance(batch, dict) and "X" in batch else batch
    shape = getattr(x, "shape", None)
    return int(shape[0]) if shape is not None else len(x)


class Timeline:
    """Iterates ``loader`` as it is and records, per batch, when it arrived (seconds since the iteration started),
    how long it took since the one before, and its cells::

        timeline = Timeline(make_loader(path, 1024))
        for batch in timeline:
            train_step(batch)
        ds.report(bench=timeline.to_json()).save("report.html")

    The time between batches includes the caller's own work on the batch before (what a training step leaves the
    loader to hide), so a stall shows as a peak."""

    def __init__(self, loader: Iterable[Any]) -> None:
        self.loader = loader
        #: ``[seconds since the start, seconds since the batch before, cells]`` per batch.
        self.batches: list[list[float]] = []

    def __iter__(self) -> Iterator[Any]:
        self.batches = []
        start = last = time.perf_counter()
        for batch in self.loader:
            now = time.perf_counter()
            self.batches.append([now - start, now - last, float(_cells(batch))])
            last = now
            yield batch

    def to_json(self) -> dict[str, Any]:
        """``{"source": "loader", "batch_timeline": [...], "batch_cells": ..., "batch_seconds": ...,
        "batch_cells_per_second": ...}``: what a report's reading section takes."""
        cells = sum(b[2] for b in self.batches)
        seconds = self.batches[-1][0] if self.batches else 0.0
        return {"source": "loader", "batch_timeline": self.batches, "batch_cells": cells, "batch_seconds": seconds,
                "batch_cells_per_second": cells / seconds if seconds > 0 else None}

    def save(self, path: str | os.PathLike[str]) -> str:
        """Writes :meth:`to_json` to ``path`` (for ``deltacells report --bench``) and returns the path."""
        path = os.fspath(path)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_json(), f)
        return path
