"""Corpora against the source: members converted from h5ad files whose gene lists differ (subsets, orders, format
versions), read through a vocabulary and compared with the sources read by anndata and re-indexed by pandas."""

import pickle
import shutil
import threading
import warnings
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import numpy as np
import pytest
from conftest import require, s3_or_skip

require("anndata")
pd = require("pandas")

import deltacells  # noqa: E402
from corpus_members import obs_truth, truth  # noqa: E402
from deltacells import StoreBackend, open_corpus  # noqa: E402
from deltacells.convert import convert_h5ad  # noqa: E402


def check_batches(corpus, expected, seed):
    rng = np.random.default_rng(seed)
    order = rng.permutation(corpus.n_cells)
    batches = [order[i : i + 23] for i in range(0, len(order), 23)] + [rng.integers(0, corpus.n_cells, 40)]
    for cells in batches:
        b = corpus.get_batch(cells)
        assert b.shape == (len(cells), corpus.n_genes)
        for r in range(b.n_rows):
            cols = b.indices[b.indptr[r] : b.indptr[r + 1]]
            assert (np.diff(cols) > 0).all(), "column indices sorted within each row"
        np.testing.assert_array_equal(b.to_scipy().toarray(), expected[cells])


@pytest.mark.parametrize("genes", ["union", "intersection", "given"])
def test_rows_are_the_sources_reindexed_by_pandas(members, genes):
    roots, sources = members
    if genes == "given":
        union = list(dict.fromkeys(g for s in sources for g in s.var_names))
        vocabulary = ["NOT_A_GENE"] + union[::-3][:700]
        corpus = open_corpus(roots, genes=vocabulary)
        assert corpus.genes == vocabulary
    else:
        corpus = open_corpus(roots, genes=genes)
    want_genes = {
        "union": list(dict.fromkeys(g for s in sources for g in s.var_names)),
        "intersection": [g for g in sources[0].var_names if all(g in set(s.var_names) for s in sources)],
    }
    if genes in want_genes:
        # Members' genes in their stored (sorted by totals) order decide the union's order: compare as sets, and
        # check the order rule on member 0, whose stored order leads.
        assert set(corpus.genes) == set(want_genes[genes])
    assert len(corpus) == corpus.n_cells == 200 and corpus.member_cells == [70, 60, 70]
    expected = truth(sources, corpus.genes)
    check_batches(corpus, expected, seed=1)
    if genes == "given":
        assert corpus.get_batch(range(200)).to_scipy()[:, 0].nnz == 0, "a gene no member has is an empty column"


def test_a_loader_s_slots_hold_corpus_batches_and_their_members(members):
    """The training loader's path: each batch read once into a reused slot the reader chooses by the batch's size
    (a batch no slot holds read again into a new one) holds the rows pandas gives and the member of each row."""
    require("torch")
    import gc

    from deltacells import _batch_slots

    roots, sources = members
    corpus = open_corpus(roots, genes="intersection")
    expected = truth(sources, corpus.genes)
    reader = corpus._reader(1 << 30, 4, io_threads=2, decode_threads=1, verify=True)
    pool = _batch_slots.SlotPool(shared=False)
    rng = np.random.default_rng(11)

    def check(cells, b):
        np.testing.assert_array_equal(b["X"].to_dense().numpy(), expected[cells])
        np.testing.assert_array_equal(b["dataset"].numpy(), corpus.member_of(cells))
        np.testing.assert_array_equal(b["index"].numpy(), cells)

    held = []
    for size in (3, 40, 150, 1500):
        cells = rng.integers(0, corpus.n_cells, size)
        held.append((cells, pool.take(reader, cells, np.float32, corpus.n_genes, {})))
        check(*held[-1])
    assert len(pool.slots) == _batch_slots.MAX_LOCAL_SLOTS
    cells = rng.integers(0, corpus.n_cells, 9)
    assert pool.take(reader, cells, np.float32, corpus.n_genes, {}) is None, "a full pool, every slot held"
    del held[1]
    gc.collect()
    check(cells, pool.take(reader, cells, np.float32, corpus.n_genes, {}))
    for cells_b in held:
        check(*cells_b)


@pytest.mark.parametrize("cached", [1, 3])
def test_random_reads_keep_as_many_tiles_over_all_members_as_one_reader_would(members, cached):
    roots, sources = members  # 3 + 2 + 3 tiles of 32 cells
    corpus = deltacells.open_corpus(roots, max_cached_tiles=cached)
    check_batches(corpus, truth(sources, corpus.genes), seed=11)
    # Given back here, the tiles still held: at most the members' own cache size, across all of them (without the
    # cap each member would keep that many: 3 and 8 here).
    assert corpus._core.release_tiles_except([]) <= cached
    chosen = corpus.where(donor=["d2"])
    chosen.get_batch(np.arange(chosen.n_cells))
    assert chosen._core.release_tiles_except([]) <= cached
    # Unpickled together (as into a DataLoader worker), a corpus and one chosen from it share the cap again.
    whole, part = pickle.loads(pickle.dumps((corpus, chosen)))
    whole.get_batch(np.arange(70, 130))  # member 1's tiles, which the chosen cells (donor d2) do not touch
    part.get_batch(np.arange(part.n_cells))
    assert whole._core.release_tiles_except([]) <= cached


def test_genes_identified_by_a_gene_table_column(members):
    roots, sources = members
    corpus = open_corpus({f"m{i}": r for i, r in enumerate(roots)}, gene_key="gene_ids")
    assert corpus.members == ["m0", "m1", "m2"] and all(g.startswith("ENSG") for g in corpus.genes)
    check_batches(corpus, truth(sources, corpus.genes, by_ids=True), seed=2)
    with pytest.raises(ValueError, match=r'"m0".*no column "nope"'):
        open_corpus({f"m{i}": r for i, r in enumerate(roots)}, gene_key="nope")


def test_members_aligned_to_a_vocabulary_read_the_sources_reindexed_by_pandas(members, tmp_path):
    """align_corpus writes each member with its genes in the vocabulary's order (by gene_ids here, a vocabulary in ID
    order that no member stores): the copies read the same rows, with the obs, and again finds them written."""
    from deltacells.convert import align_corpus

    roots, sources = members
    union = sorted({"ENSG" + g for s in sources for g in s.var_names})
    vocabulary = union[::2] + ["ENSGNOT_A_GENE"]
    aligned = align_corpus(roots, tmp_path / "aligned", genes=vocabulary, gene_key="gene_ids", level=3)
    assert aligned == [str(tmp_path / "aligned" / f"m{i}") for i in range(3)]
    for root, source in zip(aligned, sources):
        stored = deltacells.open_dataset(root).var["gene_ids"].tolist()
        own = {"ENSG" + g for g in source.var_names}
        assert stored == [g for g in vocabulary if g in own], "the member's genes, in the vocabulary's order"
    corpus = open_corpus(aligned, genes=vocabulary, gene_key="gene_ids")
    assert corpus.member_cells == [70, 60, 70]
    check_batches(corpus, truth(sources, vocabulary, by_ids=True), seed=5)
    df = corpus.obs.take_pandas(np.arange(corpus.n_cells), ["donor", "n_genes"], warn=False)
    want = pd.concat([s.obs[["donor", "n_genes"]] for s in sources], ignore_index=True)
    assert df["donor"].astype(str).tolist() == want["donor"].astype(str).tolist()
    np.testing.assert_array_equal(df["n_genes"].to_numpy(dtype=float), want["n_genes"].to_numpy(dtype=float))
    # Again: nothing to write, the same folders.
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "aligned").rglob("*") if p.is_file()}
    assert align_corpus(roots, tmp_path / "aligned", genes=vocabulary, gene_key="gene_ids", level=3) == aligned
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "aligned").rglob("*") if p.is_file()} == before
    with pytest.raises(ValueError, match="no member has any gene of the given vocabulary"):
        align_corpus(roots, tmp_path / "none", genes=["ENSGNOT_A_GENE"], gene_key="gene_ids")


def test_members_aligned_onto_an_object_store(members):
    """align_corpus writes the aligned copies to S3 (the server CI starts), read back through StoreBackends."""
    from deltacells.convert import align_corpus

    roots, sources = members
    url, options = s3_or_skip()
    vocabulary = sorted({g for s in sources for g in s.var_names})[::3]
    aligned = align_corpus(roots, url, genes=vocabulary, level=3, storage_options=options)
    assert aligned == [f"{url}/m{i}" for i in range(3)]
    corpus = open_corpus([StoreBackend(u, options) for u in aligned], genes=vocabulary)
    assert corpus.member_cells == [70, 60, 70]
    check_batches(corpus, truth(sources, vocabulary), seed=6)


def test_gene_orders_and_refusals_as_corpus_md_says(members, tmp_path):
    roots, sources = members
    stored = [list(deltacells.open_dataset(r).var_names) for r in roots]
    # Union: every gene in order of first appearance, member by member in each member's stored order.
    union, seen = [], set()
    for names in stored:
        union += [g for g in names if not (g in seen or seen.add(g))]
    assert list(open_corpus(roots).genes) == union
    # Intersection: the genes every member has, in member 0's order.
    others = [set(n) for n in stored[1:]]
    assert list(open_corpus(roots, genes="intersection").genes) == [g for g in stored[0] if all(g in o for o in others)]
    # A member naming one gene twice (by its gene table's identifiers): refused, naming the member and the gene.
    part = sources[0][:40].copy()
    ids = list(part.var["gene_ids"])
    ids[5] = ids[3]
    part.var["gene_ids"] = ids
    part.write_h5ad(tmp_path / "dup.h5ad")
    dup = str(tmp_path / "dup")
    convert_h5ad(str(tmp_path / "dup.h5ad"), dup, tile_size=32, level=1, log=None)
    with pytest.raises(ValueError, match=f"twice_named.*{ids[3]}|{ids[3]}.*twice_named"):
        open_corpus({"fine": roots[0], "twice_named": dup}, gene_key="gene_ids")
    # A vocabulary naming a gene twice, by name or by ID.
    with pytest.raises(ValueError, match="twice|duplicate"):
        open_corpus(roots, genes=[sources[0].var_names[0], "CD3E", sources[0].var_names[0]])
    with pytest.raises(ValueError, match="twice|duplicate"):
        open_corpus(roots, genes=[ids[0], ids[1], ids[0]], gene_key="gene_ids")
    # Identifiers as h5py reads them (bytes), or None: refused, not turned into text no member uses.
    names = list(sources[0].var_names[:3])
    with pytest.raises(TypeError, match=r"genes\[0\] is .*b'.*decode"):
        open_corpus(roots, genes=np.array([n.encode() for n in names]))
    with pytest.raises(TypeError, match=r"genes\[1\] is None"):
        open_corpus(roots, genes=[names[0], None])
    assert open_corpus(roots, genes=np.array(names)).genes == names  # numpy strings are strings
    # A vocabulary in other identifiers than the members' (symbols for Ensembl IDs): no member keeps a gene, and
    # their cells would be empty rows.
    with pytest.raises(ValueError, match="no member has any gene of the given vocabulary.*gene_key"):
        open_corpus(roots, genes=names, gene_key="gene_ids")
    # One member without any: named.
    with pytest.raises(ValueError, match="member.*m0.* have no gene of the given vocabulary"):
        open_corpus({"m0": roots[0], "m1": roots[1]}, genes=[g for g in stored[1] if g not in set(stored[0])][:5])
    # Split fractions: finite, not negative, some, summing to 1.
    corpus = open_corpus(roots)
    for fractions, message in (({"a": 0.5, "b": 0.4}, "add up"), ({"a": -0.1, "b": 1.1}, "negative"),
                               ({}, "negative|empty|fraction"), ({"a": float("nan"), "b": 1.0}, "finite")):
        with pytest.raises(ValueError, match=message):
            corpus.split(fractions)


def test_member_of_selection_and_errors(members):
    roots, sources = members
    corpus = open_corpus(roots, genes="intersection")
    assert list(corpus.member_of([0, 69, 70, 129, 130, 199])) == [0, 0, 1, 1, 2, 2]
    expected = truth(sources, corpus.genes)
    picked = np.array([199, 3, 100, 3, 150, 69])
    sub = corpus.select(picked)
    assert sub.n_cells == 5 and sub.member_cells == [2, 1, 2]
    np.testing.assert_array_equal(sub.get_batch(range(5)).to_scipy().toarray(), expected[np.unique(picked)])
    half = corpus.select(np.arange(corpus.n_cells) % 2 == 0)
    assert half.n_cells == 100
    check_batches(half, expected[::2], seed=3)
    batch, member = corpus.get_batch_with_members([130, 0, 70])
    assert list(member) == [2, 0, 1] and batch.n_rows == 3
    with pytest.raises(IndexError, match=r"cell 5 \(position 1 of the request\) is out of range: there are 5"):
        sub.get_batch([0, 5])
    with pytest.raises(IndexError, match="cell -1"):
        corpus.get_batch([-1])
    with pytest.raises(ValueError, match="union"):
        open_corpus(roots, genes="everything")
    with pytest.raises(ValueError, match="at least one member"):
        open_corpus([])
    assert "3 members" in repr(corpus) and "200 cells" in repr(corpus)
    # Indices as numpy means them: a boolean mask of n_cells selects, another length is an IndexError, floats a
    # TypeError, for the corpus's rows and its obs alike.
    mask = np.arange(corpus.n_cells) % 7 == 0
    np.testing.assert_array_equal(corpus.get_batch(mask).to_scipy().toarray(), expected[mask])
    by_mask, by_index = corpus.obs.take(mask, "donor"), corpus.obs.take(np.flatnonzero(mask), "donor")
    assert list(by_mask["donor"]) == list(by_index["donor"])
    for bad in (mask[:-1], np.ones(corpus.n_cells + 1, bool)):
        with pytest.raises(IndexError, match="mask"):
            corpus.get_batch(bad)
        with pytest.raises(IndexError, match="mask"):
            corpus.obs.take(bad, "donor")
    with pytest.raises(TypeError):
        corpus.get_batch(np.array([0.0, 1.5]))
    with pytest.raises(TypeError):
        corpus.obs.take([0.5], "donor")


def test_a_member_that_cannot_be_opened_is_named_when_the_corpus_is_opened(members, tmp_path):
    """Missing or malformed, a member is named (by its name in the mapping) with the cause, when the corpus is
    opened rather than when it is first read."""
    roots, _ = members
    with pytest.raises(OSError, match="corpus member 'gone': .*") as e:
        open_corpus({"a": roots[0], "gone": str(tmp_path / "nowhere")})
    assert str(e.value).count("corpus member") == 1
    broken = tmp_path / "broken"
    shutil.copytree(roots[1], broken)
    (broken / "manifest.json").write_text("{ not json")
    with pytest.raises(ValueError, match="corpus member 'broken'.*manifest"):
        open_corpus({"a": roots[0], "broken": str(broken)})


def test_members_on_an_object_store_beside_local_ones(members, tmp_path):
    """Member 1 converted straight to S3 (the server CI starts), read through a StoreBackend beside two local
    members."""
    roots, sources = members
    url, options = s3_or_skip()
    path = tmp_path / "m1.h5ad"
    sources[1].write_h5ad(path)
    # Version 1 on the store too, as the local member 1 is.
    convert_h5ad(str(path), url, tile_size=32, level=3, n_chunks=2, log=None, storage_options=options,
                 format_version=1)
    for genes in ("union", "intersection"):
        corpus = open_corpus({"m0": roots[0], "s3": StoreBackend(url, options), "m2": roots[2]}, genes=genes)
        assert corpus.member_cells == [70, 60, 70] and corpus.datasets[1].manifest.version == 1
        check_batches(corpus, truth(sources, corpus.genes), seed=4)
    # The corpus's loader over the store member (its StoreBackend options reach every worker's reader).
    require("torch")
    from deltacells.torch import make_loader

    corpus = open_corpus({"m0": roots[0], "s3": StoreBackend(url, options)}, genes="intersection")
    expected = truth(sources[:2], corpus.genes)
    for workers in (0, 2):
        seen = {}
        for b in make_loader(corpus, 16, seed=3, num_workers=workers):
            for i, row in zip(b["index"].tolist(), b["X"].to_dense().numpy()):
                seen[i] = row
        assert sorted(seen) == list(range(130))
        np.testing.assert_array_equal(np.stack([seen[i] for i in range(130)]), expected)


def test_members_manifests_and_gene_tables_are_read_concurrently(members):
    """Each member's requests wait until every member has one in flight: an opening that read the members one after
    another would never get there (and time out)."""
    import threading

    roots, sources = members
    n = 6
    opened = threading.Barrier(n, timeout=60)
    tables = threading.Barrier(n, timeout=60)
    reads: list[str] = []

    class Waiting(deltacells.LocalBackend):
        def read(self, name):
            reads.append(name)
            if name == "manifest.json":
                opened.wait()
            elif name == "var.parquet":
                tables.wait()
            return super().read(name)

    corpus = open_corpus({f"m{i}": Waiting(roots[i % 3]) for i in range(n)}, gene_key="gene_ids")
    assert reads.count("manifest.json") >= n and reads.count("var.parquet") >= n
    assert corpus.member_cells == [70, 60, 70] * 2


def test_members_obs_schemas_and_columns_are_read_concurrently(members, tmp_path):
    """As above for the obs: each member's schema read, and its first read of a column's shard when localizing,
    waits until every member has one in flight."""
    import threading

    roots, sources = members
    schemas = threading.Barrier(3, timeout=60)
    shards = threading.Barrier(3, timeout=60)

    class Waiting(deltacells.LocalBackend):
        def __init__(self, root):
            super().__init__(root)
            self.first_shard = True
            self.lock = threading.Lock()

        def read(self, name):
            if name == "obs/schema.json":
                schemas.wait()
            return super().read(name)

        def read_range(self, name, offset, length):
            shard = name.startswith("obs/obs_")
            with self.lock:  # one wait a member, whatever reads it makes at once
                first = shard and self.first_shard
                self.first_shard = self.first_shard and not shard
            if first:
                shards.wait()
            return super().read_range(name, offset, length)

    corpus = open_corpus([Waiting(r) for r in roots], cache_dir=str(tmp_path / "cache"))
    assert "donor" in corpus.obs.columns
    corpus.obs.localize(["donor"])
    want = [d for s in sources for d in s.obs["donor"]]
    assert list(corpus.obs.take_pandas(np.arange(corpus.n_cells), "donor")["donor"]) == want


def test_obs_across_members_match_pandas(members, tmp_path):
    roots, sources = members
    corpus = open_corpus(roots, cache_dir=str(tmp_path / "cache"))
    obs = corpus.obs
    assert set(obs.columns) == {"barcode", "qc_pass", "depth_bin", "donor", "n_genes", "tissue", "obs_names"}
    assert obs.kind("donor") == "category" and obs.kind("n_genes") == "numeric"
    assert sorted(obs.categories("donor")) == ["d1", "d2", "d3", "d4", "d5"], "one vocabulary, each label once"
    truth_df = obs_truth(sources)
    cells = np.random.default_rng(4).integers(0, corpus.n_cells, 60)
    got = obs.take_pandas(cells, ["donor", "tissue", "n_genes", "qc_pass"])
    for c in ["donor", "tissue"]:
        want = [truth_df[c][i] for i in cells]
        assert [None if pd.isna(v) else str(v) for v in got[c]] == want, c
    want_counts = truth_df["n_genes"].to_numpy(np.float64)[cells]
    np.testing.assert_array_equal(np.asarray(got["n_genes"], np.float64), want_counts)
    codes = obs.take(cells, "tissue")["tissue"]
    assert ((np.asarray(codes) == -1) == np.array([truth_df["tissue"][i] is None for i in cells])).all(), \
        "a column a member lacks is missing for its cells"
    with pytest.raises(KeyError, match="nope"):
        obs.take([0], ["nope"])


def test_obs_columns_of_open_corpus_are_the_corpus_s_and_take_gives_numpy_as_a_dataset_does(members, tmp_path):
    roots, sources = members
    cache = str(tmp_path / "cache")
    # Member 1 has no "tissue": its cells are missing there, the corpus opens.
    corpus = open_corpus(roots, cache_dir=cache, obs_columns=["tissue", "barcode"])
    truth_df = obs_truth(sources)
    cells = np.random.default_rng(5).permutation(corpus.n_cells)[:80]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # localized when the corpus opened: nothing is fetched now
        got = corpus.obs.take(cells, ["tissue", "barcode"])
    tissue = got["tissue"]
    assert isinstance(tissue, np.ndarray)
    assert ((tissue == -1) == np.array([truth_df["tissue"][i] is None for i in cells])).all()
    vocabulary = corpus.obs.categories("tissue")
    assert [None if c < 0 else vocabulary[c] for c in tissue] == [truth_df["tissue"][i] for i in cells]
    barcodes = got["barcode"]
    assert isinstance(barcodes, np.ndarray) and barcodes.dtype == object
    assert list(barcodes) == [truth_df["barcode"][i] for i in cells]
    # The same kinds of arrays a member's own obs gives.
    own = deltacells.open_dataset(roots[0], cache_dir=cache).obs.take([0, 1], ["barcode", "tissue"], warn=False)
    for c in ["barcode", "tissue"]:
        assert type(own[c]) is type(got[c]) and own[c].dtype.kind == got[c].dtype.kind, c
    with pytest.raises(KeyError, match="nope"):
        open_corpus(roots, cache_dir=cache, obs_columns="nope")


def test_where_and_split_choose_cells_as_pandas_would(members, tmp_path):
    roots, sources = members
    corpus = open_corpus(roots, cache_dir=str(tmp_path / "cache"))
    df = obs_truth(sources)
    chosen = corpus.where(tissue=["lung", "gut"], n_genes=(500, 2500))
    mask = df["tissue"].isin(["lung", "gut"]) & df["n_genes"].astype(float).between(500, 2500)
    want = np.flatnonzero(mask.to_numpy())
    assert 0 < chosen.n_cells == len(want) < corpus.n_cells
    np.testing.assert_array_equal(chosen.get_batch(range(chosen.n_cells)).to_scipy().toarray(),
                                  corpus.get_batch(want).to_scipy().toarray())
    with pytest.raises(KeyError):
        corpus.where(nope=[1])
    with pytest.raises(ValueError, match="number column"):
        corpus.where(donor=(1, 2))
    parts = corpus.split({"train": 0.6, "val": 0.2, "test": 0.2}, by="donor", seed=1)
    assert list(parts) == ["train", "val", "test"] and sum(p.n_cells for p in parts.values()) == corpus.n_cells
    owners = {}
    for name, part in parts.items():
        for d in part.obs.take_pandas(range(part.n_cells), "donor")["donor"]:
            assert owners.setdefault(d, name) == name, f"donor {d} in two parts"
    again = corpus.split({"train": 0.6, "val": 0.2, "test": 0.2}, by="donor", seed=1)
    # The same cells, not only as many of each member: their rows and obs, in order.
    for k in parts:
        a, b = parts[k], again[k]
        assert a.n_cells == b.n_cells and a._selection == b._selection
        np.testing.assert_array_equal(a.get_batch(range(a.n_cells)).to_scipy().toarray(),
                                      b.get_batch(range(b.n_cells)).to_scipy().toarray())
        assert list(a.obs.take_pandas(range(a.n_cells), "n_genes")["n_genes"]) == \
            list(b.obs.take_pandas(range(b.n_cells), "n_genes")["n_genes"])
    # A selection of a selection: the split of a where, and where on a split part, stay in corpus order.
    lung = parts["train"].where(tissue=["lung"])
    assert all(v == "lung" for v in lung.obs.take_pandas(range(lung.n_cells), "tissue")["tissue"])


def _read_in_child(corpus):
    return corpus.get_batch([0, 99, 37]).to_scipy().toarray()


def test_a_corpus_pickles_and_reads_in_another_process(members):
    roots, sources = members
    corpus = open_corpus(roots).select(np.arange(0, 200, 2))
    again = pickle.loads(pickle.dumps(corpus))
    assert again.genes == corpus.genes and again.n_cells == 100
    np.testing.assert_array_equal(_read_in_child(again), _read_in_child(corpus))
    with ProcessPoolExecutor(1) as pool:
        np.testing.assert_array_equal(pool.submit(_read_in_child, corpus).result(), _read_in_child(corpus))
    # The selection travels as its compact bytes; bytes that are not a selection are refused, not trusted.
    state = corpus.__getstate__()
    assert isinstance(state["_selection"], bytes) and len(state["_selection"]) < 1_000
    state["_selection"] = state["_selection"][:-3]
    broken = object.__new__(type(corpus))
    broken.__setstate__(state)
    with pytest.raises(ValueError, match="selection"):
        broken.get_batch([0])


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_a_corpus_pickles_under_every_protocol(members, protocol):
    roots, _ = members
    corpus = open_corpus(roots).select(np.arange(0, 200, 2))
    again = pickle.loads(pickle.dumps(corpus, protocol))
    assert again.n_cells == 100
    np.testing.assert_array_equal(_read_in_child(again), _read_in_child(corpus))


def test_threads_asking_at_once_share_one_root(members, monkeypatch):
    """The gathering thread and the caller reaching a fresh process's corpus together build its Rust corpus once."""
    roots, _ = members
    corpus = pickle.loads(pickle.dumps(open_corpus(roots)))  # its Rust corpus not built yet in this process
    built = []
    real = deltacells._core.Corpus
    barrier = threading.Barrier(4)

    def counting(*args):
        built.append(1)
        return real(*args)

    monkeypatch.setattr(deltacells._core, "Corpus", counting)

    def read(_):
        barrier.wait(timeout=30)
        return corpus.get_batch([0, 150]).to_scipy().toarray()

    with ThreadPoolExecutor(4) as pool:
        rows = list(pool.map(read, range(4)))
    assert len(built) == 1
    for r in rows[1:]:
        np.testing.assert_array_equal(r, rows[0])


def test_a_member_that_cannot_be_opened_again_is_named(members, tmp_path):
    """A member gone before a process opens its reader (a worker's, after unpickling): the error names it."""
    roots, _ = members
    moved = tmp_path / "moved"
    shutil.copytree(roots[1], moved)
    corpus = open_corpus({"a": roots[0], "b": str(moved)})
    pickled = pickle.dumps(corpus)
    shutil.rmtree(moved)
    with pytest.raises(OSError, match="corpus member 'b'"):
        pickle.loads(pickled).get_batch([0])


def test_open_corpus_is_exported():
    assert deltacells.open_corpus is open_corpus and deltacells.Corpus.__doc__
