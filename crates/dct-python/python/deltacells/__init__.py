"""deltacells: compact, cloud-friendly tiles of single-cell count matrices.

The Rust reader, decoder, writer, obs cache and converter behind the original package's API: ``open_dataset`` and
``DeltaCellsDataset.get_batch`` for random batches by global cell index, ``open_corpus`` for many datasets read
through one gene vocabulary, ``Tile`` / ``read_tile`` for single tiles, ``DatasetWriter`` / ``encode_tile`` for
writing, ``deltacells.obs`` for per-cell metadata, ``deltacells.convert``
for h5ad conversion and ``deltacells.cli`` (``python -m deltacells``) for the command line.
"""

from deltacells import _core, cli, obs  # noqa: F401 - the submodules, there after `import deltacells` as convert is
from deltacells.backends import (
    Backend,
    CountingBackend,
    GCSBackend,
    LocalBackend,
    RangeFile,
    StoreBackend,
    ThrottledBackend,
    open_backend,
)
from deltacells.convert import AppendReport, append
from deltacells.corpus import Corpus, open_corpus
from deltacells.dataset import DeltaCellsDataset, open_dataset
from deltacells.format import FormatError, TileInfo
from deltacells.manifest import Manifest
from deltacells.reader import DecodedTile, SparseBatch, Tile, read_tile
from deltacells.report import Report
from deltacells.timeline import Timeline
from deltacells.writer import DatasetWriter, encode_tile, permute_columns, write_tile

__version__: str = _core.__version__

#: What was read no longer belongs to the dataset this reader opened (a tile, a side file): the dataset was appended
#: to or written again since. Open it again. A subclass of ``RuntimeError``.
DatasetChangedError = _core.DatasetChangedError

__all__ = [
    "AppendReport",
    "Backend",
    "Corpus",
    "CountingBackend",
    "DatasetChangedError",
    "DatasetWriter",
    "DecodedTile",
    "DeltaCellsDataset",
    "FormatError",
    "GCSBackend",
    "LocalBackend",
    "Manifest",
    "RangeFile",
    "Report",
    "SparseBatch",
    "StoreBackend",
    "ThrottledBackend",
    "Tile",
    "TileInfo",
    "Timeline",
    "append",
    "encode_tile",
    "open_backend",
    "open_corpus",
    "open_dataset",
    "permute_columns",
    "read_tile",
    "write_tile",
]
