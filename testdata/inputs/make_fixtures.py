"""Regenerates the dct-input test fixtures in this folder. Tests never run this (they need no Python).

Usage (needs numpy, scipy, h5py, anndata, pandas; e.g. in a throwaway venv):
    python make_fixtures.py /path/to/shared/data/pbmc3k_raw.h5ad
    python make_fixtures.py --only nullable_obs   # one synthetic fixture (layouts, nullable_obs); the rest untouched

Everything is deterministic (fixed seeds, fixed cell selection).
"""

import gzip
import json
import os
import sys

import anndata as ad
import h5py
import numpy as np
import pandas as pd
import scipy.io
import scipy.sparse as sp

HERE = os.path.dirname(os.path.abspath(__file__))


def truth(m):
    """Independent statistics of a cells x genes scipy matrix (duplicates summed, zeros dropped)."""
    m = sp.csr_matrix(m, dtype=np.int64)
    m.sum_duplicates()
    m.eliminate_zeros()
    m.sort_indices()
    return m, {
        "n_cells": int(m.shape[0]),
        "n_genes": int(m.shape[1]),
        "nnz": int(m.nnz),
        "total": int(m.sum()),
        "cell_totals": [int(x) for x in np.asarray(m.sum(axis=1)).ravel()],
        "gene_totals": [int(x) for x in np.asarray(m.sum(axis=0)).ravel()],
        "cell_nnz": [int(x) for x in np.diff(m.indptr)],
        "gene_nnz": [int(x) for x in np.bincount(m.indices, minlength=m.shape[1])],
    }


def triplets(m):
    """Canonical cell-major triplets [cell, gene, count] of a csr matrix in truth() form."""
    coo = m.tocoo()
    order = np.lexsort((coo.col, coo.row))
    return [[int(coo.row[i]), int(coo.col[i]), int(coo.data[i])] for i in order]


def write_tenx_h5(path, m_cells_by_genes, barcodes, ids, names, types, genome="hg19"):
    """A CellRanger v3-style .h5: CSC genes x barcodes, i.e. one indptr slice per barcode."""
    csr = sp.csr_matrix(m_cells_by_genes)  # rows = cells; CSC of the transpose has the same arrays
    csr.sort_indices()
    kw = dict(compression="gzip", shuffle=True)
    with h5py.File(path, "w") as f:
        f.attrs["filetype"] = "matrix"
        f.attrs["library_ids"] = np.array([b"fixture"])
        g = f.create_group("matrix")
        g.create_dataset("barcodes", data=np.array([b.encode() for b in barcodes]), **kw)
        g.create_dataset("data", data=csr.data.astype(np.int32), **kw)
        g.create_dataset("indices", data=csr.indices.astype(np.int64), **kw)
        g.create_dataset("indptr", data=csr.indptr.astype(np.int64), **kw)
        g.create_dataset("shape", data=np.array([csr.shape[1], csr.shape[0]], dtype=np.int32))
        fe = g.create_group("features")
        fe.create_dataset("_all_tag_keys", data=np.array([b"genome"]))
        fe.create_dataset("id", data=np.array([s.encode() for s in ids]), **kw)
        fe.create_dataset("name", data=np.array([s.encode() for s in names]), **kw)
        fe.create_dataset("feature_type", data=np.array([s.encode() for s in types]), **kw)
        fe.create_dataset("genome", data=np.array([genome.encode()] * len(ids)), **kw)


def write_mtx_dir(path, m_cells_by_genes, barcodes, ids, names, types, gz=True):
    """A 10x v3 folder: matrix.mtx (genes x cells, sorted by barcode then feature), features, barcodes."""
    os.makedirs(path, exist_ok=True)
    coo = sp.coo_matrix(sp.csr_matrix(m_cells_by_genes).T)
    order = np.lexsort((coo.row, coo.col))
    opener = (lambda p: gzip.open(p + ".gz", "wt", compresslevel=9)) if gz else (lambda p: open(p, "w"))
    with opener(os.path.join(path, "matrix.mtx")) as f:
        f.write("%%MatrixMarket matrix coordinate integer general\n")
        f.write('%metadata_json: {"software_version": "fixture"}\n')
        f.write(f"{coo.shape[0]} {coo.shape[1]} {coo.nnz}\n")
        for i in order:
            f.write(f"{coo.row[i] + 1} {coo.col[i] + 1} {int(coo.data[i])}\n")
    with opener(os.path.join(path, "features.tsv")) as f:
        for i, n, t in zip(ids, names, types):
            f.write(f"{i}\t{n}\t{t}\n")
    with opener(os.path.join(path, "barcodes.tsv")) as f:
        for b in barcodes:
            f.write(b + "\n")


def pbmc200(src):
    a = ad.read_h5ad(src)
    cells = np.linspace(0, a.n_obs - 1, 200).round().astype(int)
    a = a[cells].copy()
    # Keep the gene table small (vlen strings are stored uncompressed): the 2,000 genes with the highest totals in
    # these cells plus 500 others chosen at random (mostly all-zero genes), in source order.
    totals = np.asarray(a.X.sum(axis=0)).ravel()
    top = np.argsort(-totals, kind="stable")[:2000]
    rest = np.setdiff1d(np.arange(a.n_vars), top)
    other = np.random.default_rng(7).choice(rest, 500, replace=False)
    a = a[:, np.sort(np.concatenate([top, other]))].copy()
    a.X = sp.csr_matrix(a.X, dtype=np.float32)
    a.obs = a.obs[["barcode", "qc_pass", "depth_bin"]]
    out = os.path.join(HERE, "pbmc200")
    os.makedirs(out, exist_ok=True)
    a.write_h5ad(os.path.join(out, "pbmc200.h5ad"), compression="gzip")
    barcodes = list(a.obs_names)
    ids = list(a.var["gene_ids"])
    names = list(a.var["gene_symbols"])
    types = ["Gene Expression"] * a.n_vars
    write_tenx_h5(os.path.join(out, "pbmc200_10x.h5"), a.X, barcodes, ids, names, types)
    write_mtx_dir(os.path.join(out, "mtx"), a.X, barcodes, ids, names, types)
    m, t = truth(a.X)
    t["barcodes"] = barcodes
    t["var_index_first"] = list(a.var_names[:5])
    t["gene_ids_first"] = ids[:5]
    t["gene_names_first"] = names[:5]
    t["gene_order_by_decreasing_total"] = [int(i) for i in np.argsort(-np.array(t["gene_totals"]), kind="stable")]
    t["rows"] = {str(c): {"genes": [int(x) for x in m.indices[m.indptr[c]:m.indptr[c + 1]]],
                          "counts": [int(x) for x in m.data[m.indptr[c]:m.indptr[c + 1]]]} for c in (0, 1, 99, 199)}
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(t, f)


def random_counts(rng, n_cells, n_genes, density):
    m = sp.random(n_cells, n_genes, density=density, format="csr", random_state=rng,
                  data_rvs=lambda k: rng.integers(1, 40, size=k)).astype(np.int64)
    m = m.tolil()
    m[0, :] = 0          # first cell empty
    m[n_cells - 1, :] = 0  # last cell empty
    m[3, 7] = 70000      # above 65535
    m[5, n_genes - 1] = 2**31 - 1  # largest count
    return sp.csr_matrix(m)


def sorted_counts(rng, n_cells, n_genes, density, below, dtype):
    """Random counts in 1..below-1 as a CSR matrix of ``dtype`` with sorted indices."""
    counts = sp.random(n_cells, n_genes, density=density, format="csr", random_state=rng,
                       data_rvs=lambda k: rng.integers(1, below, size=k)).astype(dtype)
    counts.sort_indices()
    return counts


def layouts():
    rng = np.random.default_rng(20240531)
    n_cells, n_genes, n_raw = 40, 300, 320
    base = random_counts(rng, n_cells, n_genes, 0.08)
    raw = sp.hstack([base, random_counts(rng, n_cells, n_raw - n_genes, 0.1)]).tocsr()

    # X: CSR float32 with unsorted indices and one duplicated entry (cell 2) and an explicit zero (cell 4).
    x = sp.csr_matrix(base, dtype=np.float64)
    data, indices, indptr = x.data.tolist(), x.indices.tolist(), x.indptr.tolist()
    rows = [list(zip(indices[indptr[r]:indptr[r + 1]], data[indptr[r]:indptr[r + 1]])) for r in range(n_cells)]
    rows[2] = rows[2][::-1]                             # unsorted
    g, v = rows[2][0]
    rows[2] = rows[2][:1] + [(g, 0.0)] + rows[2][1:]    # explicit zero, same gene (stays a duplicate)
    rows[6] = list(reversed(rows[6])) + [(rows[6][0][0], 5.0)]  # duplicate gene: summed
    rows[4] = rows[4] + [(0, 0.0)] if all(gg != 0 for gg, _ in rows[4]) else rows[4]
    indptr = np.cumsum([0] + [len(r) for r in rows])
    xi = np.array([gg for r in rows for gg, _ in r], dtype=np.int32)
    xd = np.array([vv for r in rows for _, vv in r], dtype=np.float64)
    x_truth = sp.csr_matrix((xd, xi, indptr), shape=(n_cells, n_genes))
    # float32 cannot hold 2^31-1 exactly: keep that count out of the float X
    xd32 = xd.copy()
    xd32[xd32 > 2**24] = 16777216.0
    X = sp.csr_matrix((xd32.astype(np.float32), xi, indptr), shape=(n_cells, n_genes))
    assert not X.has_canonical_format

    var = pd.DataFrame(index=pd.Index([f"Gene{i}" for i in range(n_genes)], name="symbol"))
    var["gene_ids"] = [f"ENSG{i:011d}" for i in range(n_genes)]
    var["chrom"] = pd.Categorical([["chr1", "chr2", "chrX", "chrM"][i % 4] for i in range(n_genes)])
    var["length"] = np.arange(n_genes, dtype=np.int64) * 10 + 100
    var["gc"] = np.linspace(0.3, 0.6, n_genes)
    var["highly_variable"] = np.arange(n_genes) % 3 == 0
    nullable = pd.array(list(range(n_genes)), dtype="Int64")
    nullable[1] = pd.NA
    var["n_cells_nullable"] = nullable
    var["feature_types"] = pd.Categorical(["Gene Expression"] * n_genes)

    obs = pd.DataFrame(index=[f"CELL{i:03d}-1" for i in range(n_cells)])
    obs["batch"] = pd.Categorical(["a", "b"] * (n_cells // 2))
    a = ad.AnnData(X=X, obs=obs, var=var)
    a.layers["counts_csc"] = sp.csc_matrix(base, dtype=np.int64)
    a.layers["dense_u32"] = base.toarray().astype(np.uint32)
    dense_f64 = base.toarray().astype(np.float64)
    a.layers["dense_f64"] = dense_f64
    norm = sp.csr_matrix(base, dtype=np.float32)
    norm.data = np.log1p(norm.data)
    a.layers["normalized"] = norm
    neg = sp.csr_matrix(base, dtype=np.int32).tolil()
    neg[10, 20] = -3
    a.layers["negative"] = sp.csr_matrix(neg)
    rawvar = pd.DataFrame(index=pd.Index([f"Gene{i}" for i in range(n_raw)]))
    rawvar["gene_ids"] = [f"ENSG{i:011d}" for i in range(n_raw)]
    a.raw = ad.AnnData(X=sp.csr_matrix(raw, dtype=np.int32), obs=obs, var=rawvar)
    a.write_h5ad(os.path.join(HERE, "layouts.h5ad"))

    xt, xs = truth(x_truth.astype(np.int64).tocsr().copy())
    xt32, _ = truth(X.astype(np.int64))
    bt, bs = truth(base)
    rt, rs = truth(raw)
    exp = {
        "cell_names": list(obs.index),
        "X": {"stats": truth(X.astype(np.int64))[1], "triplets": triplets(xt32)},
        "base": {"stats": bs, "triplets": triplets(bt)},
        "raw": {"stats": rs, "triplets": triplets(rt)},
        "var": {
            "index_name": "symbol",
            "index": list(var.index),
            "gene_ids": list(var["gene_ids"]),
            "chrom_codes": [int(c) for c in var["chrom"].cat.codes],
            "chrom_categories": list(var["chrom"].cat.categories),
            "length": [int(v) for v in var["length"]],
            "gc": [float(v) for v in var["gc"]],
            "highly_variable": [bool(v) for v in var["highly_variable"]],
            "n_cells_nullable": [None if pd.isna(v) else int(v) for v in var["n_cells_nullable"]],
        },
        "raw_var_index": list(rawvar.index),
    }
    with open(os.path.join(HERE, "layouts.expected.json"), "w") as f:
        json.dump(exp, f)

    # Mixed feature types (10x with antibody capture features interleaved), 10x h5 + mtx, and 10x v2 .h5.
    n_feat = 60
    ab = {5, 17, 18, 40, 59}
    types = ["Antibody Capture" if i in ab else "Gene Expression" for i in range(n_feat)]
    ids = [f"AB{i}" if i in ab else f"ENSG{i:011d}" for i in range(n_feat)]
    names = [f"CD{i}_TotalSeqB" if i in ab else f"Gene{i}" for i in range(n_feat)]
    mixed = random_counts(rng, 30, n_feat, 0.2)
    barcodes = [f"AAAC{i:04d}-1" for i in range(30)]
    write_tenx_h5(os.path.join(HERE, "mixed_10x.h5"), mixed, barcodes, ids, names, types)
    write_mtx_dir(os.path.join(HERE, "mixed_mtx"), mixed, barcodes, ids, names, types, gz=False)
    mt, ms = truth(mixed)
    with open(os.path.join(HERE, "mixed.expected.json"), "w") as f:
        json.dump({"barcodes": barcodes, "ids": ids, "names": names, "types": types,
                   "stats": ms, "triplets": triplets(mt)}, f)

    # 10x Cell Ranger 2 .h5: one group per genome holding genes, gene_names, barcodes, data, indices, indptr, shape.
    gex = [i for i in range(n_feat) if i not in ab]
    v2 = sp.csr_matrix(mixed)[:, gex]
    v2.sort_indices()
    with h5py.File(os.path.join(HERE, "tenx_v2.h5"), "w") as f:
        g = f.create_group("GRCh38")
        g.create_dataset("barcodes", data=np.array([b.encode() for b in barcodes]))
        g.create_dataset("data", data=v2.data.astype(np.int32))
        g.create_dataset("indices", data=v2.indices.astype(np.int64))
        g.create_dataset("indptr", data=v2.indptr.astype(np.int64))
        g.create_dataset("shape", data=np.array([v2.shape[1], v2.shape[0]], dtype=np.int32))
        g.create_dataset("genes", data=np.array([ids[i].encode() for i in gex]))
        g.create_dataset("gene_names", data=np.array([names[i].encode() for i in gex]))

    # A legacy (anndata < 0.7) file: X is a group with h5sparse attributes, obs/var are compound datasets.
    with h5py.File(os.path.join(HERE, "legacy.h5ad"), "w") as f:
        small = sp.csr_matrix(base[:5, :10], dtype=np.float32)
        g = f.create_group("X")
        g.attrs["h5sparse_format"] = "csr"
        g.attrs["h5sparse_shape"] = np.array([5, 10])
        g.create_dataset("data", data=small.data)
        g.create_dataset("indices", data=small.indices)
        g.create_dataset("indptr", data=small.indptr)
        f.create_dataset("obs", data=np.array([(f"c{i}".encode(),) for i in range(5)], dtype=[("index", "S8")]))
        f.create_dataset("var", data=np.array([(f"g{i}".encode(),) for i in range(10)], dtype=[("index", "S8")]))


def nullable_obs():
    """pandas nullable columns in obs and var, as anndata writes them (a `string` column as nullable-string-array)."""
    n_cells, n_genes = 30, 20
    counts = sorted_counts(np.random.default_rng(20250212), n_cells, n_genes, 0.3, 10, np.int32)

    obs = pd.DataFrame(index=[f"NCELL{i:02d}" for i in range(n_cells)])
    note = [["plain", "é", "", "mixed Ünïcode ✓", "x"][i % 5] for i in range(n_cells)]
    obs["note"] = pd.array(note, dtype="string")
    obs.loc[obs.index[[1, 6, 7, 20, 29]], "note"] = pd.NA  # first, last and neighbouring missing values
    obs["all_present"] = pd.array([f"s{i % 4}" for i in range(n_cells)], dtype="string")
    obs["label"] = np.array([f"lab{i % 7}" for i in range(n_cells)], dtype=object)
    n_nullable = pd.array([int(i * 3) for i in range(n_cells)], dtype="Int64")
    n_nullable[[0, 11, 12]] = pd.NA
    obs["n_nullable"] = n_nullable
    flag = pd.array([i % 2 == 0 for i in range(n_cells)], dtype="boolean")
    flag[[3, 28]] = pd.NA
    obs["flag"] = flag
    cell_type = pd.Categorical([["T", "B", "NK"][i % 3] for i in range(n_cells)])
    cell_type[[2, 14]] = np.nan
    obs["cell_type"] = cell_type

    var = pd.DataFrame(index=[f"NGene{i}" for i in range(n_genes)])
    var["gene_ids"] = [f"ENSG{i:011d}" for i in range(n_genes)]
    gene_note = pd.array([f"g{i}é" for i in range(n_genes)], dtype="string")
    gene_note[[0, 13]] = pd.NA
    var["gene_note"] = gene_note

    a = ad.AnnData(X=counts, obs=obs, var=var)
    with ad.settings.override(allow_write_nullable_strings=True):
        # Keep the object column as strings (anndata would otherwise store it as a categorical).
        a.write_h5ad(os.path.join(HERE, "nullable_obs.h5ad"), convert_strings_to_categoricals=False)

    def values(col):
        if isinstance(col.dtype, pd.CategoricalDtype) or col.dtype == object or isinstance(col.dtype, pd.StringDtype):
            return [None if pd.isna(v) else str(v) for v in col]
        if isinstance(col.dtype, pd.BooleanDtype):
            return [None if pd.isna(v) else bool(v) for v in col]
        return [None if pd.isna(v) else int(v) for v in col]

    exp = {
        "n_cells": n_cells,
        "n_genes": n_genes,
        "cell_names": list(obs.index),
        "obs_columns": list(obs.columns),
        "obs": {c: values(obs[c]) for c in obs.columns},
        "cell_type_categories": [str(c) for c in obs["cell_type"].cat.categories],
        "var_index": list(var.index),
        "var": {c: values(var[c]) for c in var.columns},
        "triplets": triplets(truth(counts)[0]),
    }
    with open(os.path.join(HERE, "nullable_obs.expected.json"), "w") as f:
        json.dump(exp, f, ensure_ascii=False)


def heap_tail():
    """An h5ad whose last global-heap collection (var names) ends in 8 bytes of leftover data, too few for an object
    header, which the HDF5 library takes as free space: what editing names in place leaves. Written by anndata, one
    var name then replaced by h5py with a string as long as leaves 8 bytes, and junk put in those 8 bytes; h5py (the
    HDF5 library) must still read every name."""
    import shutil
    import struct

    import h5py

    n_cells, n_genes = 12, 3000
    counts = sorted_counts(np.random.default_rng(20261207), n_cells, n_genes, 0.05, 20, np.float32)
    obs = pd.DataFrame(index=[f"HCELL{i:02d}" for i in range(n_cells)])
    var = pd.DataFrame(index=[f"HeapGene{i}" for i in range(n_genes)])
    path = os.path.join(HERE, "heap_tail.h5ad")
    fresh = path + ".fresh"
    ad.AnnData(X=counts, obs=obs, var=var).write_h5ad(fresh)

    def last_collection_tail(file):
        """(start, end, bytes left after the last object) of the file's last global-heap collection."""
        data = open(file, "rb").read()
        start = data.rfind(b"GCOL")
        end = start + struct.unpack_from("<Q", data, start + 8)[0]
        pos = start + 16
        while pos + 16 <= end:
            index, _, _, n = struct.unpack_from("<HHIQ", data, pos)
            if index == 0:
                break
            pos += 16 + ((n + 7) & ~7)
        return start, end, end - pos

    _, _, free = last_collection_tail(fresh)
    for length in range(max(8, free - 64), free + 64, 8):
        shutil.copy(fresh, path)
        with h5py.File(path, "r+") as f:
            f["var/_index"][1] = "Q" * length
        start, end, left = last_collection_tail(path)
        if left == 8:
            break
    else:
        raise SystemExit("no name length leaves 8 bytes in the last collection")
    os.remove(fresh)
    data = bytearray(open(path, "rb").read())
    data[end - 8:end] = struct.pack("<HHI", 16, 0, 0x2A2A2A2A)  # junk that reads as object 16
    open(path, "wb").write(bytes(data))

    with h5py.File(path, "r") as f:
        names = [v.decode() for v in f["var/_index"][:]]
        cells = [v.decode() for v in f["obs/_index"][:]]
    assert names[0] == "HeapGene0" and names[1] == "Q" * length and cells == list(obs.index)
    exp = {"cell_names": cells, "var_index": names, "n_cells": n_cells, "n_genes": n_genes,
           "triplets": triplets(truth(counts)[0])}
    with open(os.path.join(HERE, "heap_tail.expected.json"), "w") as f:
        json.dump(exp, f)


if __name__ == "__main__":
    # `--only NAME` regenerates one synthetic fixture (layouts, nullable_obs) and leaves the others untouched.
    if len(sys.argv) == 3 and sys.argv[1] == "--only":
        {"layouts": layouts, "nullable_obs": nullable_obs, "heap_tail": heap_tail}[sys.argv[2]]()
    else:
        pbmc200(sys.argv[1])
        layouts()
        nullable_obs()
        heap_tail()
