"""Vector files (dive_core.vectors): every format read and written in row chunks, the same ids and
values back, and a file that is not what it should be refused naming the file."""

from __future__ import annotations

import numpy as np
import pytest

from dive_core import vectors
from dive_core.vectors import VectorFile, VectorFileError, VectorWriter

IDS = [f"doc{i}" for i in range(7)]


def _mat(n=7, d=5, seed=0):
    return np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)


def _read_all(vf: VectorFile, rows=3):
    ids, mats = [], []
    for i, m in vf.chunks(rows):
        ids += i
        mats.append(m)
    return ids, np.concatenate(mats)


@pytest.mark.parametrize("ext", [".parquet", ".npy", ".h5"])
def test_every_format_round_trips_in_chunks(tmp_path, ext):
    mat = _mat()
    path = tmp_path / f"v{ext}"
    with VectorWriter(path, len(IDS), 5, metadata={"note": "x"}) as w:
        w.write(IDS[:4], mat[:4])  # chunks of another size than the reader's
        w.write(IDS[4:], mat[4:])
    vf = vectors.open_vectors(path)
    assert (vf.format, vf.n, vf.dim, vf.dtype) == ({".parquet": "parquet", ".npy": "npy", ".h5": "h5"}[ext], 7, 5,
                                                   "float32")
    ids, got = _read_all(vf)
    assert ids == IDS and got.dtype == np.float32 and np.array_equal(got, mat)
    if ext == ".npy":
        assert (tmp_path / "v.ids.txt").read_text() == "".join(f"{i}\n" for i in IDS)


@pytest.mark.parametrize("value", ["float16", "float64"])
def test_parquet_lists_of_any_float_width_fixed_or_variable(tmp_path, value):
    import pyarrow as pa
    import pyarrow.parquet as pq

    mat = _mat().astype(value)
    for fixed in (True, False):
        col = (pa.FixedSizeListArray.from_arrays(pa.array(mat.reshape(-1)), 5) if fixed
               else pa.array([list(r) for r in mat], pa.list_(pa.from_numpy_dtype(mat.dtype))))
        path = tmp_path / f"{value}-{fixed}.parquet"
        pq.write_table(pa.table({"doc_id": IDS, "vec": col}), path, row_group_size=3)
        vf = VectorFile(path, id_column="doc_id", vector_column="vec")
        assert vf.dim == 5 and vf.dtype == value
        ids, got = _read_all(vf, rows=2)
        assert ids == IDS and np.array_equal(got, mat.astype(np.float32))


def test_an_embeddings_file_is_read_per_group_and_exported(tmp_path):
    from dive_core.embeddings import write_embeddings

    docs, queries = _mat(), _mat(3, 5, seed=1)
    h5 = tmp_path / "embeddings.h5"
    write_embeddings(h5, IDS, docs, ["q1", "q2", "q3"], queries, {"dataset": "t"})
    with pytest.raises(VectorFileError, match="groups .*corpus.* have them: choose one"):
        VectorFile(h5)
    assert _read_all(VectorFile(h5, group="queries"))[0] == ["q1", "q2", "q3"]
    for fmt in ("parquet", "npy", "h5"):
        out = vectors.export_embeddings(h5, tmp_path / fmt, fmt)
        ids, got = _read_all(vectors.open_vectors(out["corpus"]))
        assert ids == IDS and np.array_equal(got, docs)
        assert np.array_equal(_read_all(vectors.open_vectors(out["queries"]))[1], queries)


def test_what_cannot_be_read_is_refused_naming_the_file(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    with pytest.raises(VectorFileError, match=r"x\.csv: unknown vector file type '\.csv'"):
        VectorFile(tmp_path / "x.csv")
    with pytest.raises(VectorFileError, match="no such vector file"):
        VectorFile(tmp_path / "none.parquet")
    p = tmp_path / "cols.parquet"
    pq.write_table(pa.table({"id": IDS, "vector": [[1.0]] * 7}), p)
    with pytest.raises(VectorFileError, match=r"cols\.parquet: no column\(s\) \['embedding'\]; it has \['id', 'vector'\]"):
        VectorFile(p)
    p = tmp_path / "ragged.parquet"
    pq.write_table(pa.table({"id": IDS, "embedding": [[1.0, 2.0]] * 5 + [[1.0]] + [[1.0, 2.0]]}), p)
    with pytest.raises(VectorFileError, match=r"ragged\.parquet: 1 vector\(s\) .* another length than 2 .*'doc5'"):
        _read_all(VectorFile(p))
    p = tmp_path / "null.parquet"
    pq.write_table(pa.table({"id": IDS, "embedding": [[1.0]] * 6 + [None]}), p)
    with pytest.raises(VectorFileError, match=r"null\.parquet: 1 null vector\(s\).*'doc6'"):
        _read_all(VectorFile(p))
    p = tmp_path / "m.npy"
    np.save(p, _mat())
    with pytest.raises(VectorFileError, match=r"no id list m\.ids\.txt beside it"):
        VectorFile(p)
    (tmp_path / "m.ids.txt").write_text("a\nb\n")
    with pytest.raises(VectorFileError, match=r"m\.ids\.txt: 2 ids for the 7 rows of m\.npy"):
        VectorFile(p)


def test_a_writer_that_fails_or_stops_short_leaves_no_file(tmp_path):
    for ext in (".parquet", ".npy", ".h5"):
        path = tmp_path / f"out{ext}"
        with pytest.raises(ValueError, match="3 of 7 rows written"):
            with VectorWriter(path, 7, 5) as w:
                w.write(IDS[:3], _mat()[:3])
        with pytest.raises(RuntimeError):
            with VectorWriter(path, 7, 5) as w:
                w.write(IDS[:3], _mat()[:3])
                raise RuntimeError("killed")
        assert sorted(p.name for p in tmp_path.iterdir()) == []


# -- ingesting a family: vectors backbone --------------------------------------------------------
DOCS = [f"d{i}" for i in range(10)]
JUDGED = ["q0", "q1", "q2"]
KNOWN = {"q0", "q1", "q2", "q3", "q4"}  # q3, q4: staged queries that no qrels row judges


def _files(tmp_path, ext=".parquet", docs=None, queries=None, d=6, corpus_rows=None, query_rows=None):
    rng = np.random.default_rng(3)
    docs = docs or DOCS
    queries = queries or ["q4", "q2", "q0", "q1"]
    paths = {}
    for role, ids, rows in (("corpus", docs, corpus_rows), ("queries", queries, query_rows)):
        mat = rng.standard_normal((len(ids), d)).astype(np.float32) if rows is None else rows
        paths[role] = tmp_path / f"{role}{ext}"
        with VectorWriter(paths[role], len(ids), mat.shape[1]) as w:
            w.write(ids, mat)
    spec = {"family": "vectors", "dim": d, "corpus": str(paths["corpus"]), "queries": str(paths["queries"])}
    return spec, paths


def _ingest(spec, out, dataset="ds", rows=4):
    return vectors.ingest("vec", spec, dataset, DOCS, JUDGED, KNOWN, out, {"dataset": dataset}, rows=rows)


@pytest.mark.parametrize("ext", [".parquet", ".npy", ".h5"])
def test_ingesting_puts_the_vectors_in_the_staged_order_with_the_encoders_record(tmp_path, ext):
    from dive_core.embeddings import read_embeddings, write_embeddings

    shuffled = DOCS[::-1]
    spec, paths = _files(tmp_path, ext, docs=shuffled)
    done = _ingest(spec, tmp_path / "embeddings.h5")
    emb = read_embeddings(tmp_path / "embeddings.h5", normalize=False)
    assert emb.doc_ids == DOCS and emb.query_ids == JUDGED  # unjudged q4 skipped
    raw = {role: dict(zip(*(lambda c: (sum((i for i, _ in c), []), np.concatenate([m for _, m in c])))(
        list(vectors.open_vectors(paths[role]).chunks())))) for role in ("corpus", "queries")}
    assert np.array_equal(emb.docs, np.stack([raw["corpus"][i] for i in DOCS]))
    assert np.array_equal(emb.queries, np.stack([raw["queries"][q] for q in JUDGED]))
    # the same content hash as an encoder's file of the same vectors
    assert done["content_sha256"] == emb.attrs["content_sha256"] == write_embeddings(
        tmp_path / "native.h5", DOCS, emb.docs, JUDGED, emb.queries, {})
    assert emb.attrs["family"] == "vectors" and emb.attrs["sources"]["corpus"]["sha256"] == \
        vectors.sha256_file(paths["corpus"])


def test_a_pinned_sha256_is_checked_and_the_dataset_fills_the_path(tmp_path):
    (tmp_path / "ds").mkdir()
    spec, paths = _files(tmp_path / "ds")
    spec = dict(spec, corpus=str(tmp_path / "{dataset}" / "corpus.parquet"),
                sha256={"corpus": {"ds": vectors.sha256_file(paths["corpus"])}, "queries": "0" * 64})
    with pytest.raises(VectorFileError, match=r"queries\.parquet: sha256 [0-9a-f]{64}, but backbones\.vec\.sha256\."
                                              r"queries pins 0{64}"):
        _ingest(spec, tmp_path / "e.h5")
    spec["sha256"]["queries"] = vectors.sha256_file(paths["queries"])
    assert _ingest(spec, tmp_path / "e.h5")["sources"]["corpus"]["path"] == str(paths["corpus"])


BAD = {
    "unknown and missing ids": (dict(docs=DOCS[:8] + ["x1", "x2"]),
                                r"corpus\.parquet: cannot be ingested as backbone 'vec' of dataset 'ds':\n"
                                r"  - 2 id\(s\) not among the staged documents \(first: 'x1', 'x2'\)\n"
                                r"  - 2 staged documents missing \(first: 'd8', 'd9'\)"),
    "duplicates": (dict(docs=DOCS + ["d3"]), r"  - 1 duplicate id\(s\) \(first: row 10 \(id 'd3'\) repeating row 3\)"),
    "NaN": (dict(corpus_rows=np.where(np.arange(60).reshape(10, 6) == 13, np.nan, 1.0).astype(np.float32)),
            r"  - 1 vector\(s\) with NaN or Inf \(first: row 2 \(id 'd2'\)\)"),
    "zero": (dict(corpus_rows=np.where(np.arange(10)[:, None] == 4, 0.0, np.ones((10, 6))).astype(np.float32)),
             r"  - 1 all-zero vector\(s\) \(first: row 4 \(id 'd4'\)\)"),
    "missing judged query": (dict(queries=["q0", "q1", "q3"]), r"queries\.parquet: cannot be ingested .*\n"
                                                               r"  - 1 judged queries missing \(first: 'q2'\)"),
    "unknown query": (dict(queries=JUDGED + ["zz"]), r"  - 1 id\(s\) not among the staged queries \(first: 'zz'\)"),
    "dimension": (dict(d=5), r"corpus\.parquet: row 0 \(id 'd0'\) has 5 dimensions, as every row of the file, but "
                             r"backbones\.vec\.dim is 6"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_file_that_is_not_the_collection_is_refused_and_nothing_is_written(tmp_path, case):
    kwargs, message = BAD[case]
    spec, _ = _files(tmp_path, **kwargs)
    spec["dim"] = 6
    with pytest.raises(VectorFileError, match=message):
        _ingest(spec, tmp_path / "out" / "embeddings.h5")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize("ext", [".parquet", ".npy", ".h5"])
def test_a_row_range_reads_only_those_rows_and_npy_metadata_sits_beside_the_file(tmp_path, ext):
    import pyarrow.parquet as pq

    n = 23
    ids, mat = [f"r{i}" for i in range(n)], _mat(n, 4)
    path = tmp_path / f"v{ext}"
    with VectorWriter(path, n, 4, metadata={"k": "v"}) as w:
        for s in range(0, n, 5):  # Parquet: one row group per write, so a range starts mid-file
            w.write(ids[s:s + 5], mat[s:s + 5])
    if ext == ".parquet":
        assert pq.ParquetFile(path).metadata.num_row_groups == 5
    vf = vectors.open_vectors(path)
    for start, stop, rows in ((0, n, 4), (7, 19, 3), (11, 12, 8), (20, 99, 2), (5, 5, 3)):
        got = list(vf.chunks(rows, start=start, stop=stop))
        assert sum((i for i, _ in got), []) == ids[start:stop]
        assert all(len(i) <= rows for i, _ in got)
        if got:
            assert np.array_equal(np.concatenate([m for _, m in got]), mat[start:stop])
    if ext != ".h5":
        assert vf.meta.get("k") == "v"
    assert ((tmp_path / "v.meta.json").exists()) == (ext == ".npy")


def test_skipped_unjudged_queries_are_not_checked_and_int8_codes_are_refused(tmp_path):
    rows = np.ones((4, 6), dtype=np.float32)
    rows[0] = np.nan  # q4: a staged query that no qrels row judges, skipped
    spec, _ = _files(tmp_path, query_rows=rows)
    assert _ingest(spec, tmp_path / "e.h5")["sources"]["queries"]["rows"] == 4
    spec, paths = _files(tmp_path / "codes")
    with VectorWriter(tmp_path / "codes" / "corpus.h5", 10, 6, encoding="int8") as w:
        w.write(DOCS, np.ones((10, 6)))
    spec["corpus"] = str(tmp_path / "codes" / "corpus.h5")
    with pytest.raises(VectorFileError, match=r"corpus\.h5: int8 codes .*not float vectors"):
        _ingest(spec, tmp_path / "e2.h5")
