"""A dataset's report: one self-contained HTML page (style and plots inline, no network) of its facts, cells,
tiles, chunks, genes and obs, as ``deltacells report`` writes it. Made by :meth:`DeltaCellsDataset.report`; shows
inline in Jupyter and saves the same page."""

from __future__ import annotations

import json
import os
from typing import Any

__all__ = ["Report"]


class Report:
    """The page of a dataset's report (:attr:`html`) and the numbers it shows (:attr:`facts`).

    In Jupyter the object shows the page inline; :meth:`save` writes it to a file that opens in any browser
    without the network.
    """

    def __init__(self, html: str, facts: dict[str, Any]) -> None:
        #: The whole HTML document.
        self.html = html
        #: ``{"facts": ..., "sample": ..., "obs": ...}``: the manifest's facts (the numbers of
        #: ``deltacells info --json``), the tiles and cells sampled and how, and per obs column its kind and missing
        #: cells (and for a category column, ``categories`` in its vocabulary and ``top``, the ``[label, cells]`` of
        #: the 30 most frequent, ties by label; for a string column, ``distinct`` values among the ``read`` first
        #: present ones, at most 200,000, and their ``top`` 30 likewise).
        self.facts = facts

    def _repr_html_(self) -> str:
        return self.html

    def save(self, path: str | os.PathLike[str]) -> str:
        """Writes the page to ``path`` (atomically: a temporary file renamed) and returns the path written."""
        path = os.fspath(path)
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(self.html)
        os.replace(tmp, path)
        return path

    def __repr__(self) -> str:
        f = self.facts.get("facts", {})
        return (f"<deltacells Report: {f.get('n_cells')} cells x {f.get('n_genes')} genes; "
                f"{self.facts.get('sample', {}).get('how', '')}>")

    @classmethod
    def _from_core(cls, made: tuple[str, str]) -> Report:
        html, facts = made
        parsed: dict[str, Any] = json.loads(facts)
        return cls(html, parsed)
