"""dive-compress (dive_core.compress) and the workflow's compress target (rules/compress.smk): a
trained compressor applied to vector files of every format, in chunks and in row-range shards,
with float32, float16 and int8 (FAISS SQ8) outputs and FAISS indexes; refusals; atomic writes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from dive_core import compress as C
from dive_core.embeddings import l2_normalize
from dive_core.resources import compress_resources
from dive_core.methods import Method, new_method
from dive_core.training import TrainLog
from dive_core.vectors import VectorWriter, ids_path, meta_path, open_vectors
from synthetic import make_problem
from test_export import configured

REPO = Path(__file__).resolve().parent.parent
FORMATS = (".parquet", ".npy", ".h5")
RUN = {"dataset": "scifact", "backbone": "minilm", "method": "dive", "stage": "final"}
N = 301  # rows of the test files: not a multiple of any chunk or shard count used here


# --------------------------------------------------------------------------- fixtures and helpers
def make_model(path: Path, seed: int = 3) -> Path:
    """A DIVE compressor (32 -> 8) trained for 2 epochs on the synthetic problem, saved as a
    workflow checkpoint whose meta names its run."""
    p = make_problem()
    m = new_method("dive", p.d, p.k, configured("dive"), seed=seed)
    m.fit(p.train, TrainLog(), progress=False)
    m.save(path, {**RUN, "k": p.k, "seed": seed})
    return path


def raw_vectors(n: int = N, d: int = 32, seed: int = 0) -> tuple[list[str], np.ndarray]:
    """Unnormalised backbone-like vectors (norms far from 1) and ids with spaces and non-ASCII."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((n, d)) * rng.uniform(0.5, 4.0, (n, 1))).astype(np.float32)
    return [f"doc {i} é{i % 7}" for i in range(n)], x


def write_vectors(path: Path, ids, x, encoding: str = "float32") -> Path:
    with VectorWriter(path, len(ids), x.shape[1], encoding=encoding) as w:
        for s in range(0, len(ids), 100):  # several chunks / row groups
            w.write(ids[s:s + 100], x[s:s + 100])
    return path


def write_embeddings_h5(path: Path, sets: dict) -> Path:
    """An HDF5 file in the workflow's embeddings.h5 layout: a group per set with ids and emb."""
    with h5py.File(path, "w", track_order=True) as f:
        for g, (ids, x) in sets.items():
            f.create_dataset(f"{g}/ids", data=ids, dtype=h5py.string_dtype("utf-8"))
            f.create_dataset(f"{g}/emb", data=x)
    return path


def reference(model: Path, x: np.ndarray) -> np.ndarray:
    """What the evaluation computes: Method.compress on the L2-normalised vectors, in one call."""
    return Method.load(model).compress(l2_normalize(x))


def read_all(path: Path, group: str | None = None, raw: bool = False) -> tuple[list[str], np.ndarray]:
    vf = open_vectors(path, group=group)
    ids, mats = [], []
    for i, m in vf.chunks(1000, raw=raw):
        ids += i
        mats.append(m)
    return ids, np.concatenate(mats)


def cli(argv: list, capsys=None) -> tuple[int, str, str]:
    rc = C.main([str(a) for a in argv] + ["--quiet"])
    if capsys is None:
        return rc, "", ""
    out = capsys.readouterr()
    return rc, out.out, out.err


def files_in(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return make_model(tmp_path_factory.mktemp("model") / "model.pt")


@pytest.fixture(scope="module")
def data():
    return raw_vectors()


# --------------------------------------------------------------------------- vectors in, vectors out
@pytest.mark.parametrize("out_ext", FORMATS)
@pytest.mark.parametrize("in_ext", FORMATS)
def test_every_format_in_and_out_equals_method_compress_on_normalised_input(tmp_path, model, data, in_ext, out_ext,
                                                                           capsys):
    ids, x = data
    src = write_vectors(tmp_path / f"in{in_ext}", ids, x)
    out = tmp_path / f"out{out_ext}"
    rc, stdout, err = cli([model, src, out], capsys)
    assert rc == 0, err
    got_ids, y = read_all(out)
    assert got_ids == ids  # every id, in the input's order
    assert y.dtype == np.float32 and y.shape == (N, 8)
    assert np.array_equal(y, reference(model, x))  # bit for bit
    assert f"{out}: {N} vectors 32 -> 8 dimensions, float32" in stdout
    if out_ext == ".parquet":
        import pyarrow.parquet as pq

        assert pq.read_schema(out).names == ["id", "embedding"]
    if out_ext == ".npy":
        assert ids_path(out).read_text(encoding="utf-8").splitlines() == ids
        assert meta_path(out).is_file() and C.read_metadata(out)["encoding"] == "float32"


def test_parquet_id_and_vector_columns_of_the_input(tmp_path, model, data, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids, x = data
    table = pa.table({"doc_id": ids, "vec": pa.array(list(x.astype(np.float64)), pa.list_(pa.float64()))})
    pq.write_table(table, tmp_path / "in.parquet", row_group_size=64)
    rc, _, err = cli([model, tmp_path / "in.parquet", tmp_path / "out.parquet", "--id-column", "doc_id",
                      "--vector-column", "vec"], capsys)
    assert rc == 0, err
    assert pq.read_schema(tmp_path / "out.parquet").names == ["doc_id", "embedding"]
    got = pq.read_table(tmp_path / "out.parquet")
    assert got.column("doc_id").to_pylist() == ids
    # float64 input: read as float32 (as the workflow ingests vectors), then normalised
    y = np.stack(got.column("embedding").to_numpy(zero_copy_only=False))
    assert np.array_equal(y, reference(model, x.astype(np.float64).astype(np.float32)))


def test_chunks_and_shards_do_not_change_a_bit(tmp_path, model, data):
    """Chunks of 7 rows (below the smallest compute batch: padded), 64 rows and one chunk, and the
    row range parts of a 4-shard run gathered: the same file, byte for byte, for every encoding."""
    ids, x = data
    src = write_vectors(tmp_path / "in.h5", ids, x)
    ref = reference(model, x)
    method = Method.load(model)
    for enc in ("float32", "float16", "int8"):
        outs = []
        for rows in (7, 64, None):
            outs.append(C.compress_file(method, src, tmp_path / f"{enc}-{rows}.parquet", enc, rows=rows,
                                        progress=False))
        parts = [C.compress_part(method, src, tmp_path / f"parts-{enc}" / p, p, rows=5, progress=False)
                 for p in ("1of4", "2of4", "3of4", "4of4")]
        outs.append(C.gather(method, src, parts, tmp_path / f"{enc}-gathered.parquet", enc, progress=False))
        first = outs[0].read_bytes()
        assert all(o.read_bytes() == first for o in outs[1:]), enc
        if enc == "float32":
            assert np.array_equal(read_all(outs[0])[1], ref)


def test_shards_beyond_the_rows_and_part_ranges(tmp_path, model, data):
    ids, x = data
    src = write_vectors(tmp_path / "in.npy", ids[:3], x[:3])
    assert [C.part_range(N, f"{i}of4") for i in range(1, 5)] == [(0, 75), (75, 150), (150, 225), (225, 301)]
    parts = [C.compress_part(model, src, tmp_path / "p" / f"{i}of5", f"{i}of5", progress=False) for i in range(1, 6)]
    out = C.gather(model, src, parts, tmp_path / "out.npy", "int8", progress=False)  # two parts hold no row
    direct = C.compress_file(model, src, tmp_path / "direct.npy", "int8", progress=False)
    assert out.read_bytes() == direct.read_bytes()
    assert meta_path(out).read_bytes() == meta_path(direct).read_bytes()
    with pytest.raises(C.CompressError, match="out of order"):
        C.gather(model, src, parts[::-1], tmp_path / "bad.npy", "float32", progress=False)
    assert not (tmp_path / "bad.npy").exists()


def test_hdf5_groups_are_compressed_into_the_same_groups(tmp_path, model, capsys):
    corpus, queries = raw_vectors(200, seed=1), raw_vectors(40, seed=2)
    src = write_embeddings_h5(tmp_path / "embeddings.h5", {"corpus": corpus, "queries": queries})
    out = tmp_path / "compressed.h5"
    rc, _, err = cli([model, src, out, "--encoding", "float16"], capsys)
    assert rc == 0, err
    with h5py.File(out, "r") as f:
        assert list(f) == ["corpus", "queries"]
    for group, (ids, x) in (("corpus", corpus), ("queries", queries)):
        got_ids, y = read_all(out, group, raw=True)
        assert got_ids == ids and y.dtype == np.float16
        assert np.array_equal(y, reference(model, x).astype(np.float16))
        meta = C.read_metadata(out, group)
        assert meta["input"] == {"file": "embeddings.h5", "group": group, "n": len(ids), "dim": 32, "dtype": "float32"}
    # one file holds one set: a Parquet output of both is refused, one group is fine
    rc, _, err = cli([model, src, tmp_path / "both.parquet"], capsys)
    assert rc == 2 and f"{src} holds 2 vector sets (corpus, queries)" in err and "--group" in err
    assert not (tmp_path / "both.parquet").exists()
    rc, _, err = cli([model, src, tmp_path / "queries.parquet", "--group", "queries"], capsys)
    assert rc == 0, err
    assert np.array_equal(read_all(tmp_path / "queries.parquet")[1], reference(model, queries[1]))


# --------------------------------------------------------------------------- encodings and FAISS
def test_float16_and_int8_encodings_match_faiss(tmp_path, model, data):
    import faiss

    ids, x = data
    src = write_vectors(tmp_path / "in.parquet", ids, x)
    ref = reference(model, x)
    assert cli([model, src, tmp_path / "f16.parquet", "--encoding", "float16"])[0] == 0
    got_ids, y16 = read_all(tmp_path / "f16.parquet", raw=True)
    assert got_ids == ids and y16.dtype == np.float16 and np.array_equal(y16, ref.astype(np.float16))

    assert cli([model, src, tmp_path / "sq8.parquet", "--encoding", "int8"])[0] == 0
    got_ids, stored = read_all(tmp_path / "sq8.parquet", raw=True)
    assert got_ids == ids and stored.dtype == np.int8
    # FAISS's own SQ8 over the whole input: the same ranges and the same codes
    index = faiss.IndexScalarQuantizer(8, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT)
    index.train(ref)
    trained = faiss.vector_to_array(index.sq.trained)
    meta = C.read_metadata(tmp_path / "sq8.parquet")
    vmin, vdiff = np.asarray(meta["sq8"]["vmin"], np.float32), np.asarray(meta["sq8"]["vdiff"], np.float32)
    assert np.array_equal(vmin, trained[:8]) and np.array_equal(vdiff, trained[8:])
    codes = index.sa_encode(ref)
    assert np.array_equal(stored.astype(np.int16) + 128, codes)
    # decoding: FAISS's reconstruction within one quantisation step (it differs in the last bit at most)
    step = vdiff / 255
    _, decoded = C.decode(tmp_path / "sq8.parquet")
    assert np.all(np.abs(decoded - index.sa_decode(codes)) <= step * 1e-3 + 1e-7)
    assert np.all(np.abs(decoded - ref) <= step + 1e-7)  # and the vectors it encodes within one step


@pytest.mark.parametrize("encoding", ("float32", "float16", "int8"))
def test_faiss_index_is_faiss_own_and_finds_the_exact_top1(tmp_path, model, data, encoding):
    import faiss

    ids, x = data
    src = write_vectors(tmp_path / "in.npy", ids, x)
    out, index_path = tmp_path / "out.npy", tmp_path / "index.faiss"
    assert cli([model, src, out, "--encoding", encoding, "--faiss", index_path])[0] == 0
    _, y = C.decode(out)  # the vectors OUTPUT holds, as float32
    ref = reference(model, x)
    # the streamed file is byte for byte the index FAISS builds in memory from the same vectors
    if encoding == "float32":
        built = faiss.IndexFlatIP(8)
        built.add(y)
    else:
        qtype = faiss.ScalarQuantizer.QT_fp16 if encoding == "float16" else faiss.ScalarQuantizer.QT_8bit
        built = faiss.IndexScalarQuantizer(8, qtype, faiss.METRIC_INNER_PRODUCT)
        built.train(ref)  # int8: the ranges of the whole (float32) compressed input
        built.add(ref)
    assert index_path.read_bytes() == bytes(faiss.serialize_index(built))
    index = faiss.read_index(str(index_path))
    assert index.ntotal == N and index.d == 8
    rng = np.random.default_rng(5)
    queries = reference(model, x[:50] + rng.standard_normal((50, 32)).astype(np.float32))
    _, top = index.search(queries, 1)
    assert np.array_equal(top[:, 0], np.argmax(queries @ y.T, axis=1))  # exact search over OUTPUT


# --------------------------------------------------------------------------- FAISS factory indexes (--index)
def in_memory_index(spec: str, y: np.ndarray, train_size: int, seed: int):
    """FAISS's own index of ``spec`` built in memory: trained on the seeded sample, every row added at once."""
    import faiss

    index = faiss.index_factory(y.shape[1], spec, faiss.METRIC_INNER_PRODUCT)
    index.train(y[np.sort(np.random.default_rng(seed).choice(len(y), min(train_size, len(y)), replace=False))])
    index.add(y)
    return index


@pytest.mark.parametrize(("spec", "encoding"), [("OPQ2,PQ2x4", "float32"), ("IVF4,PQ2x4", "int8")])
def test_factory_index_is_faiss_own_built_in_memory_from_the_same_sample(tmp_path, model, data, spec, encoding):
    """The streamed index (sample gathered chunk by chunk, rows added in chunks of 64) is byte for byte
    FAISS's index_factory built in memory from OUTPUT's vectors (int8: decoded) and the same seeded
    sample; its top 10 are the same; the output's record says how it was made."""
    import faiss

    ids, x = data
    src = write_vectors(tmp_path / "in.parquet", ids, x)
    out, index_path = tmp_path / "out.parquet", tmp_path / "out.faiss"
    with pytest.warns(UserWarning, match="below the 39 x"):  # 280 rows for 256 (OPQ) or 16 centroids
        assert cli([model, src, out, "--encoding", encoding, "--faiss", index_path, "--index", spec,
                    "--faiss-train-size", 280, "--faiss-seed", 7])[0] == 0
    assert C.read_metadata(out)["faiss_index"] == {
        "factory": spec, "metric": "inner product", "train_size": 280, "train_size_asked": 280, "seed": 7,
        "sample": C.index.SAMPLE_RULE, "faiss": faiss.__version__}
    _, y = C.decode(out)
    index_path.unlink()
    C.write_faiss_index(out, index_path, rows=64)  # other chunks: the same bytes
    built = in_memory_index(spec, y, 280, 7)
    assert index_path.read_bytes() == bytes(faiss.serialize_index(built))
    index = faiss.read_index(str(index_path))
    assert index.ntotal == N and index.metric_type == faiss.METRIC_INNER_PRODUCT
    queries = reference(model, x[:40] + np.random.default_rng(5).standard_normal((40, 32)).astype(np.float32))
    assert np.array_equal(index.search(queries, 10)[1], built.search(queries, 10)[1])


def test_training_sample_is_the_seeded_rows_gathered_across_chunks(tmp_path):
    ids, x = raw_vectors(50, d=3)
    path = write_vectors(tmp_path / "v.npy", ids, x)
    chosen = C.sample_rows(50, 12, 4)
    assert np.array_equal(chosen, np.sort(np.random.default_rng(4).choice(50, 12, replace=False)))
    assert len(set(chosen.tolist())) == 12 and np.all(np.diff(chosen) > 0)
    for rows in (1, 7, 50):
        assert np.array_equal(C.training_sample(path, None, 50, 12, 4, rows), x[chosen]), rows
    assert np.array_equal(C.training_sample(path, None, 50, 10**6, 4, 7), x)  # every row when fewer than asked


@pytest.mark.parametrize(("spec", "need"), [("Flat", 0), ("HNSW8", 0), ("SQ8", 1), ("PQ2x4", 16), ("PQ2", 256),
                                            ("OPQ2,PQ2x4", 256), ("IVF32,PQ2x4", 32), ("IVF8,Flat", 8),
                                            ("RQ2x6", 64)])
def test_fewest_training_rows_of_a_factory_string(spec, need):
    assert C.min_train_rows(C.factory_index(spec, 8)) == need


def test_the_compress_jobs_write_the_factory_index_bytes_of_the_command(tmp_path, model, data):
    """What rules compress_part, compress and compress_index do with an entry's faiss_index (3 shards,
    int8) is what dive-compress writes: the same output (its record names the index) and index."""
    ids, x = data
    src = write_vectors(tmp_path / "in.h5", ids, x)
    assert cli([model, src, tmp_path / "cli.h5", "--encoding", "int8", "--faiss", tmp_path / "cli.faiss",
                "--index", "IVF4,PQ2x4", "--faiss-train-size", 120, "--faiss-seed", 5])[0] == 0
    entry = {**C.ENTRY_DEFAULTS, "model": str(model), "input": str(src), "encoding": "int8", "faiss": True,
             "faiss_index": "IVF4,PQ2x4", "faiss_train_size": 120, "faiss_seed": 5}
    opts = C.index_options(entry["faiss_index"], entry["faiss_train_size"], entry["faiss_seed"], 8, C.open_sets(src),
                           C.option_names("mine"))
    parts = [C.compress_part(model, src, tmp_path / "parts" / p, p, progress=False) for p in ("1of3", "2of3", "3of3")]
    out = C.gather(model, src, parts, tmp_path / "job.h5", "int8", progress=False, faiss_index=opts)
    C.write_faiss_index(out, tmp_path / "job.faiss")
    assert out.read_bytes() == (tmp_path / "cli.h5").read_bytes()
    assert (tmp_path / "job.faiss").read_bytes() == (tmp_path / "cli.faiss").read_bytes()
    assert C.read_metadata(out)["faiss_index"]["factory"] == "IVF4,PQ2x4"
    assert (tmp_path / "job.faiss").read_bytes()[:4] == b"IwPQ"  # FAISS's IndexIVFPQ, not the SQ8 of the file


REFUSED_INDEX = {
    "PQ3": "FAISS refuses this factory string for the compressed vectors (8 dimensions): '!(d % M == 0)' failed",
    "OPQ2,PQ2y": "FAISS refuses this factory string for the compressed vectors (8 dimensions): could not parse",
    "NSG16,Flat": "FAISS's IndexNSGFlat cannot be filled as a stream of row chunks: it builds its graph from every "
                  "vector in one add",
    "IDMap,Flat": "FAISS's IndexIDMap cannot be filled as a stream of row chunks: it adds rows only with ids",
    "HNSW8,PQ2": "FAISS builds this index with another metric than the inner product",
}


@pytest.mark.parametrize("spec", REFUSED_INDEX)
def test_a_factory_string_faiss_refuses_or_cannot_stream_is_refused_before_any_row_is_read(tmp_path, model, data,
                                                                                            spec, capsys, monkeypatch):
    from dive_core.vectors import VectorFile

    ids, x = data
    src = write_vectors(tmp_path / "in.parquet", ids, x)

    def unread(*args, **kwargs):
        raise AssertionError("a row was read")

    monkeypatch.setattr(VectorFile, "chunks", unread)
    monkeypatch.setattr(VectorFile, "id_chunks", unread)
    rc, _, err = cli([model, src, tmp_path / "out.parquet", "--faiss", tmp_path / "out.faiss", "--index", spec],
                     capsys)
    assert rc == 2 and f"dive-compress: error: --index {spec!r}: {REFUSED_INDEX[spec]}" in err, err
    assert files_in(tmp_path) == ["in.parquet"]
    # the workflow's job names the entry's key
    with pytest.raises(C.CompressError, match=rf"^compress\.mine\.faiss_index {re.escape(repr(spec))}: "):
        C.index_options(spec, 100, 0, 8, C.open_sets(src), C.option_names("mine"))


def test_a_sample_too_small_for_the_factory_string_is_refused_naming_the_option(tmp_path, model, data, capsys):
    ids, x = data
    src = write_vectors(tmp_path / "in.parquet", ids, x)
    out, index_path = tmp_path / "out.parquet", tmp_path / "out.faiss"
    rc, _, err = cli([model, src, out, "--faiss", index_path, "--index", "PQ2x4", "--faiss-train-size", 15], capsys)
    assert rc == 2 and ("--index 'PQ2x4' trains on at least 16 rows (one per centroid), but its sample holds 15: "
                        f"--faiss-train-size 15 of {src}'s 301 rows") in err, err
    rc, _, err = cli([model, src, out, "--index", "PQ2x4"], capsys)
    assert rc == 2 and "--index 'PQ2x4': names the index of --faiss PATH; give both" in err
    rc, _, err = cli([model, src, out, "--faiss", index_path, "--index", "PQ2x4", "--faiss-train-size", 0], capsys)
    assert rc == 2 and "--faiss-train-size 0: expected a number of rows, at least 1" in err
    assert files_in(tmp_path) == ["in.parquet"]
    with pytest.raises(C.CompressError, match=r"compress\.mine\.faiss_index 'IVF64,Flat' trains on at least 64 rows.*"
                                              r"compress\.mine\.faiss_train_size 63 of "):
        C.index_options("IVF64,Flat", 63, 0, 8, C.open_sets(src), C.option_names("mine"))
    with pytest.warns(UserWarning, match=r"compress\.mine\.faiss_index 'IVF64,Flat': a sample of 64 rows "
                                         r"\(compress\.mine\.faiss_train_size\) is below the 39 x 64 = 2496"):
        assert C.index_options("IVF64,Flat", 64, 3, 8, C.open_sets(src), C.option_names("mine")) == \
            {"factory": "IVF64,Flat", "train_size": 64, "seed": 3}


def test_factory_index_same_bytes_in_two_processes_and_the_seed_matters(tmp_path, model, data):
    ids, x = data
    src = write_vectors(tmp_path / "in.npy", ids, x)
    exe = Path(sys.executable).parent / "dive-compress"
    made = {}
    for run, seed in (("a", 1), ("b", 1), ("c", 2)):
        proc = subprocess.run([str(exe), str(model), str(src), str(tmp_path / f"{run}.npy"), "--faiss",
                               str(tmp_path / f"{run}.faiss"), "--index", "IVF4,PQ2x4", "--faiss-train-size", "100",
                               "--faiss-seed", str(seed), "--quiet"], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        made[run] = (tmp_path / f"{run}.faiss").read_bytes()
    assert made["a"] == made["b"]
    assert made["c"] != made["a"]  # another sample, other centroids
    assert (tmp_path / "a.npy").read_bytes() == (tmp_path / "c.npy").read_bytes()  # the vectors do not change
    assert C.read_metadata(tmp_path / "c.npy")["faiss_index"]["seed"] == 2


def test_a_graph_index_is_filled_on_one_thread(tmp_path, model, data, monkeypatch):
    """HNSW links each added row to the graph so far: FAISS's threads would give another graph each run."""
    import faiss

    ids, x = data
    src = write_vectors(tmp_path / "in.parquet", ids, x)
    opts = C.index_options("HNSW8", 100, 0, 8, C.open_sets(src))
    out = C.compress_file(model, src, tmp_path / "out.parquet", faiss_index=opts, progress=False)
    threads = []
    real_add = faiss.IndexHNSWFlat.add

    def add(self, x):
        threads.append(faiss.omp_get_max_threads())
        return real_add(self, x)

    monkeypatch.setattr(faiss.IndexHNSWFlat, "add", add)
    before = faiss.omp_get_max_threads()
    C.write_faiss_index(out, tmp_path / "out.faiss", rows=100)
    assert threads == [1, 1, 1, 1] and faiss.omp_get_max_threads() == before
    # the graph depends on the chunks it was added in: FAISS's own, fed the same chunks on one thread
    _, y = C.decode(out)
    monkeypatch.undo()
    built = faiss.index_factory(8, "HNSW8", faiss.METRIC_INNER_PRODUCT)
    faiss.omp_set_num_threads(1)
    try:
        for start in range(0, N, 100):
            built.add(y[start:start + 100])
    finally:
        faiss.omp_set_num_threads(before)
    assert (tmp_path / "out.faiss").read_bytes() == bytes(faiss.serialize_index(built))


# --------------------------------------------------------------------------- refusals and atomicity
def test_refusals_name_the_file(tmp_path, model, data, capsys):
    ids, x = data
    (tmp_path / "vectors.csv").write_text("id,x\n")
    rc, _, err = cli([model, tmp_path / "vectors.csv", tmp_path / "out.parquet"], capsys)
    assert rc == 2 and f"{tmp_path / 'vectors.csv'}: unknown vector file type '.csv'" in err
    good = write_vectors(tmp_path / "good.parquet", ids, x)
    rc, _, err = cli([model, good, tmp_path / "out.txt"], capsys)
    assert rc == 2 and f"{tmp_path / 'out.txt'}: unknown vector file type '.txt'" in err
    rc, _, err = cli([tmp_path / "nothing.pt", good, tmp_path / "out.parquet"], capsys)
    assert rc == 2 and f"{tmp_path / 'nothing.pt'}: no such compressor" in err
    rc, _, err = cli([model, good, good], capsys)
    assert rc == 2 and "would overwrite the input" in err
    assert files_in(tmp_path) == ["good.parquet", "vectors.csv"]


def spoil(case: str, ids: list, x: np.ndarray) -> tuple[list, np.ndarray, str]:
    """The input spoiled as ``case`` says, and what its refusal says after the file's name."""
    ids, x = list(ids), x.copy()
    if case == "duplicated id":
        ids[200] = ids[57]
        return ids, x, (f"row 200 (id {ids[57]!r}) repeats the id of row 57 (--allow-duplicate-ids, a compress: "
                        "entry's allow_duplicate_ids: true, lets such rows through)")
    if case == "all-zero row":
        x[123] = 0.0
        return ids, x, (f"row 123 (id {ids[123]!r}) is all zeros: it has no direction to normalise "
                        "(--allow-zero-rows, a compress: entry's allow_zero_rows: true, lets such rows through)")
    if case in ("NaN", "Inf"):
        row = 42 if case == "NaN" else 250
        x[row, 3] = np.nan if case == "NaN" else -np.inf
        return ids, x, f"row {row} (id {ids[row]!r}) holds NaN or Inf"
    return ids, x[:, :16], (f"row 0 (id {ids[0]!r}) has 16 dimensions, as every row of the file, but the "
                            "compressor {model} maps 32 -> 8 dimensions: these are not the vectors it was trained on")


REFUSED = ("duplicated id", "all-zero row", "NaN", "Inf", "wrong dimension")


@pytest.mark.parametrize("encoding", ("float32", "int8"))  # int8: through compress_part and gather
@pytest.mark.parametrize("case", REFUSED)
def test_dive_compress_refuses_a_bad_input_naming_file_row_and_id_and_writes_nothing(tmp_path, model, data, case,
                                                                                     encoding, capsys):
    ids, x, said = spoil(case, *data)
    src = write_vectors(tmp_path / "in" / "corpus.parquet", ids, x)
    out = tmp_path / "out"
    out.mkdir()
    rc, _, err = cli([model, src, out / "corpus.parquet", "--encoding", encoding, "--faiss", out / "c.faiss"], capsys)
    assert rc == 2
    assert f"dive-compress: error: {src}: {said.format(model=model)}" in err, err
    assert files_in(out) == [] and files_in(src.parent) == ["corpus.parquet"]


@pytest.mark.parametrize("case", REFUSED)
def test_the_compress_jobs_refuse_a_bad_input_naming_file_row_and_id_and_write_nothing(tmp_path, model, data, case):
    """What rules compress_part and compress run (workflow_scripts/compress.py): each part checks the
    whole input's ids and its own rows; the part whose rows are bad, or every part for repeated ids
    or another dimension, is refused and leaves no folder, so there is nothing to gather."""
    ids, x, said = spoil(case, *data)
    src = write_vectors(tmp_path / "corpus.npy", ids, x)
    method = C.load_model(model)
    parts, refused = tmp_path / "corpus.parts", []
    for part in ("1of2", "2of2"):
        try:
            C.compress_part(method, src, parts / part, part, progress=False)
        except C.CompressError as exc:
            assert str(exc) == f"{src}: {said.format(model=model)}"
            refused.append(part)
    assert refused == (["2of2"] if case == "Inf" else ["1of2"] if case == "all-zero row" or case == "NaN" else
                       ["1of2", "2of2"])
    done = files_in(parts) if parts.exists() else []
    assert done == sorted({"1of2", "2of2"} - set(refused))
    with pytest.raises(C.CompressError, match="the parts end at row|out of order|dimensions"):  # a part is missing
        C.gather(method, src, [parts / p for p in done], tmp_path / "out.npy")
    assert not (tmp_path / "out.npy").exists() and not (tmp_path / "out.ids.txt").exists()
    with pytest.raises(C.CompressError) as err:  # an entry without shards: one job, compress_file
        C.compress_file(method, src, tmp_path / "one.npy", progress=False)
    assert str(err.value) == f"{src}: {said.format(model=model)}"
    assert not (tmp_path / "one.npy").exists() and not (tmp_path / "one.ids.txt").exists()


@pytest.mark.parametrize("case", ("duplicated id", "all-zero row"))
def test_rows_let_through_on_purpose_are_compressed_and_recorded(tmp_path, model, data, case, capsys):
    ids, x, _ = spoil(case, *data)
    src = write_vectors(tmp_path / "in.parquet", ids, x)
    option = "--allow-duplicate-ids" if case == "duplicated id" else "--allow-zero-rows"
    name = option[2:].replace("-", "_")
    rc, _, err = cli([model, src, tmp_path / "out.parquet", option], capsys)
    assert rc == 0, err
    got_ids, y = read_all(tmp_path / "out.parquet")
    assert got_ids == ids and np.array_equal(y, reference(model, x))
    assert C.read_metadata(tmp_path / "out.parquet")["input"]["allowed"] == [name]
    # the jobs: parts and gather agree on what they let through, and the output records it
    parts = [C.compress_part(model, src, tmp_path / "parts" / p, p, progress=False, **{name: True})
             for p in ("1of2", "2of2")]
    with pytest.raises(C.CompressError, match=r"1of2: a part that let through \['" + name + r"'\] on purpose, but "
                                              r"this gather allows nothing"):
        C.gather(model, src, parts, tmp_path / "g.parquet", progress=False)
    assert not (tmp_path / "g.parquet").exists()
    C.gather(model, src, parts, tmp_path / "g.parquet", progress=False, **{name: True})
    assert (tmp_path / "g.parquet").read_bytes() == (tmp_path / "out.parquet").read_bytes()
    # without the option, the same input is refused
    rc, _, err = cli([model, src, tmp_path / "no.parquet"], capsys)
    assert rc == 2 and option in err and not (tmp_path / "no.parquet").exists()


@pytest.mark.parametrize("encoding", ("float32", "int8"))
@pytest.mark.parametrize("out_ext", FORMATS)
def test_an_interrupted_write_leaves_no_output(tmp_path, model, data, out_ext, encoding):
    """Killed after two chunks: no output file (nor a .npy's ids or metadata), no temporary file,
    and a previous output under the same name unchanged."""
    ids, x = data
    src = write_vectors(tmp_path / "in.h5", ids, x)
    out = tmp_path / "results" / f"out{out_ext}"
    method = Method.load(model)
    inner, calls = method.compress, []

    def dying(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return inner(*args, **kwargs)

    method.compress = dying
    with pytest.raises(KeyboardInterrupt):
        C.compress_file(method, src, out, encoding, rows=64, progress=False)
    assert len(calls) == 3 and files_in(out.parent) == []
    # a good output first, then an interrupted run over it
    method.compress = inner
    C.compress_file(method, src, out, encoding, progress=False)
    before = {p.name: p.read_bytes() for p in out.parent.iterdir()}
    calls.clear()
    method.compress = dying
    with pytest.raises(KeyboardInterrupt):
        C.compress_file(method, src, out, encoding, rows=64, progress=False)
    assert {p.name: p.read_bytes() for p in out.parent.iterdir()} == before


def test_an_interrupted_part_leaves_no_folder(tmp_path, model, data):
    ids, x = data
    src = write_vectors(tmp_path / "in.parquet", ids, x)
    method = Method.load(model)
    inner = method.compress
    calls = []

    def dying(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return inner(*args, **kwargs)

    method.compress = dying
    with pytest.raises(KeyboardInterrupt):
        C.compress_part(method, src, tmp_path / "parts" / "1of2", "1of2", rows=64, progress=False)
    assert files_in(tmp_path / "parts") == []


def test_rechunk_keeps_every_row_in_order():
    rng = np.random.default_rng(0)
    sizes = [3, 0, 10, 1, 4, 9]
    chunks, start = [], 0
    for n in sizes:
        chunks.append(([str(i) for i in range(start, start + n)], rng.standard_normal((n, 2)).astype(np.float32)))
        start += n
    blocks = list(C.rechunk(chunks, 4))
    assert [len(i) for i, _ in blocks] == [4, 4, 4, 4, 4, 4, 3]
    assert sum((i for i, _ in blocks), []) == [str(i) for i in range(27)]
    assert np.array_equal(np.concatenate([m for _, m in blocks]), np.concatenate([m for _, m in chunks]))


# --------------------------------------------------------------------------- the compressor's provenance
def test_provenance_is_printed_and_recorded(tmp_path, model, data, capsys):
    ids, x = data
    src = write_vectors(tmp_path / "in.parquet", ids, x)
    rc, _, err = cli([model, src, tmp_path / "out.parquet"], capsys)
    assert rc == 0
    sha = Method.load(model).state_sha256()
    assert f"compressor: dive 32 -> 8 dimensions, seed 3, weights sha256 {sha} (checkpoint)" in err
    assert "trained by the workflow: dataset scifact, backbone minilm, method dive, stage final" in err
    rec = C.read_metadata(tmp_path / "out.parquet")
    assert rec["format"] == "dive-compressed/1" and rec["encoding"] == "float32"
    assert {k: rec["compressor"][k] for k in ("type", "d", "k", "seed", "weights_sha256", *RUN)} == \
        {"type": "dive", "d": 32, "k": 8, "seed": 3, "weights_sha256": sha, **RUN}


def test_an_exported_folder_is_a_model(tmp_path, model, data, capsys):
    from dive_core.export import export, save_compressor

    ids, x = data
    src = write_vectors(tmp_path / "in.parquet", ids, x)
    folder = export(model, tmp_path / "export")  # what rule export writes (no sentence-transformers backbone)
    rc, _, err = cli([folder, src, tmp_path / "out.parquet"], capsys)
    assert rc == 0, err
    assert f"weights sha256 {Method.load(model).state_sha256()} (export)" in err
    got_ids, y = read_all(tmp_path / "out.parquet")
    assert got_ids == ids and np.array_equal(y, reference(model, x))
    save_compressor(Method.load(model), tmp_path / "alone", RUN)  # a bare compressor folder with its run
    rc, _, err = cli([tmp_path / "alone", src, tmp_path / "alone.npy"], capsys)
    assert rc == 0 and "dataset scifact, backbone minilm, method dive, stage final" in err
    assert np.array_equal(read_all(tmp_path / "alone.npy")[1], reference(model, x))
    (tmp_path / "empty").mkdir()
    rc, _, err = cli([tmp_path / "empty", src, tmp_path / "x.parquet"], capsys)
    assert rc == 2 and f"{tmp_path / 'empty'}: not a usable compressor folder" in err


def test_console_script_is_installed(tmp_path, model, data):
    ids, x = data
    src = write_vectors(tmp_path / "in.parquet", ids, x)
    exe = Path(sys.executable).parent / "dive-compress"
    assert exe.is_file(), "pip install -e . declares it (pyproject.toml [project.scripts])"
    proc = subprocess.run([str(exe), str(model), str(src), str(tmp_path / "out.h5")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"compress: 100%\|.*\| 301/301 \[.*vec/s\]", proc.stderr)  # the progress bar, on stderr
    assert np.array_equal(read_all(tmp_path / "out.h5")[1], reference(model, x))


# --------------------------------------------------------------------------- the workflow's config
def test_config_entries_outputs_and_refusals():
    from dive_core import paths
    from dive_core.config import ConfigError

    cfg = {"compress": {"a": {"model": "m.pt", "input": "/data/c.NPY", "shards": 3, "faiss": True},
                        "b": {"model": "export", "input": "v.parquet", "encoding": "int8"}}}
    C.check_config(cfg)
    assert C.entry(cfg, "b") == {**C.ENTRY_DEFAULTS, "model": "export", "input": "v.parquet", "encoding": "int8"}
    assert C.targets(cfg) == ["results/compressed/a.npy", "results/compressed/a.ids.txt",
                              "results/compressed/a.meta.json", "results/compressed/a.faiss",
                              "results/compressed/b.parquet"]
    assert C.output_files("a", C.entry(cfg, "a")) == [paths.COMPRESSED_STEM.format(name="a") + ext
                                                      for ext in paths.COMPRESSED_NPY_EXTS]  # rule compress_npy's
    assert C.part_dirs(cfg, "a") == [f"results/compressed/a.parts/{i}of3" for i in (1, 2, 3)]
    assert C.part_dirs(cfg, "b") == []
    assert C.job_inputs(cfg, "a") == {"model": "m.pt", "vectors": ["/data/c.NPY", "/data/c.ids.txt"]}
    with pytest.raises(ConfigError, match=r"results/compressed/b.h5: compress.b reads v.parquet; its output is "
                                          r"results/compressed/b.parquet"):
        C.job_inputs(cfg, "b", "h5")
    with pytest.raises(ConfigError, match="no compress.c"):
        C.entry(cfg, "c")
    assert C.entry(cfg, "a")["faiss_index"] is None and C.entry(cfg, "a")["faiss_train_size"] == 100_000
    with pytest.raises(ConfigError, match=r"^config: compress.b.faiss_index = 'OPQ16,PQ16' names the index of "
                                          r"results/compressed/b.faiss: set compress.b.faiss: true too$"):
        C.check_config({"compress": {"b": {**cfg["compress"]["b"], "faiss_index": "OPQ16,PQ16"}}})
    with pytest.raises(ConfigError, match=r"compress.x.input: v.csv: unknown vector file type"):
        C.check_config({"compress": {"x": {"model": "m.pt", "input": "v.csv"}}})
    refusals = {"encoding": ("int4", r"compress.b.encoding = 'int4': expected one of \('float32', "),
                "side": ("both", r"compress.b.side = 'both': expected one of \['document', 'query'\]"),
                "model": ("results/compressed/a.npy", r"compress.b.model: results/compressed/a.npy is a compressed "
                                                      r"output, not a compressor")}
    for key, (value, message) in refusals.items():
        with pytest.raises(ConfigError, match=message):
            C.check_config({"compress": {"b": {**cfg["compress"]["b"], key: value}}})
    small, big = compress_resources(1000, 10, 1), compress_resources(1_000_000, 10, 4, attempt=2)
    assert small["mem_mb"] == 2040 and big["mem_mb"] == 3060  # bounded: not the input's size
    assert big["runtime"] > small["runtime"]


def snakemake(workdir: Path, config: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
           "--configfile", str(config), "--cores", "2", *args]
    proc = subprocess.run(cmd, cwd=workdir, env=dict(os.environ), capture_output=True, text=True, timeout=900)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc


def job_counts(log: str) -> dict[str, int]:
    """Rule -> jobs of the run's first "Job stats" table."""
    jobs = {}
    for line in log.split("Job stats:")[1].splitlines()[3:]:
        m = re.match(r"^(\w+)\s+(\d+)$", line.strip())
        if not m:
            break
        jobs[m.group(1)] = int(m.group(2))
    jobs.pop("total", None)
    return jobs


def compress_setup(root: Path) -> tuple[Path, dict]:
    """A trained compressor, its export, three input files and a config with one entry each:
    Parquet int8 in 3 shards with a FAISS index, an embeddings.h5 (corpus, queries) float16 in 2
    shards, a .npy float32 in one job through the exported folder."""
    from dive_core.export import export

    model = make_model(root / "models" / "model.pt")
    folder = export(model, root / "models" / "export")
    ids, x = raw_vectors()
    inputs = root / "vectors"
    inputs.mkdir()
    write_vectors(inputs / "corpus.parquet", ids, x)
    write_vectors(inputs / "corpus.npy", ids, x)
    write_embeddings_h5(inputs / "embeddings.h5",
                        {"corpus": raw_vectors(200, seed=1), "queries": raw_vectors(40, seed=2)})
    entries = {
        "pq8": {"model": str(model), "input": str(inputs / "corpus.parquet"), "shards": 3, "encoding": "int8",
                "faiss": True},
        "emb16": {"model": str(model), "input": str(inputs / "embeddings.h5"), "shards": 2, "encoding": "float16"},
        "plain": {"model": str(folder), "input": str(inputs / "corpus.npy"), "faiss": True, "faiss_index": "IVF4,PQ2x4",
                  "faiss_train_size": 150, "faiss_seed": 9},
    }
    config = root / "compress.yaml"
    config.write_text(json.dumps({"compress": entries}), encoding="utf-8")  # JSON is YAML
    return config, entries


def cli_outputs(entries: dict, out: Path) -> dict[str, Path]:
    """What dive-compress writes for each entry (and the FAISS index where asked)."""
    out.mkdir()
    done = {}
    for name, e in entries.items():
        dest = out / (name + Path(e["input"]).suffix)
        argv = [e["model"], e["input"], dest, "--encoding", e.get("encoding", "float32")]
        if e.get("faiss"):
            argv += ["--faiss", out / f"{name}.faiss"]
        if e.get("faiss_index"):
            argv += ["--index", e["faiss_index"], "--faiss-train-size", e["faiss_train_size"], "--faiss-seed",
                     e["faiss_seed"]]
        assert cli(argv)[0] == 0
        done[name] = dest
    return done


@pytest.mark.workflow
def test_workflow_compress_target_gathers_the_bytes_dive_compress_writes(tmp_path):
    config, entries = compress_setup(tmp_path)
    expected = cli_outputs(entries, tmp_path / "cli")
    wd = tmp_path / "wd"
    wd.mkdir()
    # the target needs nothing else of the workflow: no data, no embedding, no training
    proc = snakemake(wd, config, "compress_all")
    assert job_counts(proc.stdout + proc.stderr) == {"compress_part": 5, "compress": 2, "compress_npy": 1,
                                                     "compress_index": 2, "compress_all": 1}
    got = wd / "results" / "compressed"
    for name, dest in expected.items():
        assert (got / dest.name).read_bytes() == dest.read_bytes(), name
    assert (got / "plain.ids.txt").read_bytes() == (tmp_path / "cli" / "plain.ids.txt").read_bytes()
    assert (got / "plain.meta.json").read_bytes() == (tmp_path / "cli" / "plain.meta.json").read_bytes()
    assert (got / "pq8.faiss").read_bytes() == (tmp_path / "cli" / "pq8.faiss").read_bytes()
    assert (got / "plain.faiss").read_bytes() == (tmp_path / "cli" / "plain.faiss").read_bytes()  # faiss_index
    assert sorted(p.name for p in got.iterdir()) == ["emb16.h5", "plain.faiss", "plain.ids.txt", "plain.meta.json",
                                                     "plain.npy", "pq8.faiss", "pq8.parquet"]  # parts: temporary
    assert sorted(p.name for p in wd.iterdir() if not p.name.startswith(".")) == ["logs", "results"]
    assert sorted(p.name for p in (wd / "results").iterdir()) == ["compressed"]
    # an output under another extension than the input's is refused, naming the right one
    proc = snakemake(wd, config, "-n", "results/compressed/pq8.h5", check=False)
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    assert "compress.pq8 reads" in text and "its output is results/compressed/pq8.parquet" in text


def test_sq8_codes_saturate_beyond_the_calibrated_range_and_never_wrap():
    """Hand-computed: code = int(255 * clip((y - vmin) / vdiff, 0, 1)) - 128. Values past the range a
    file was calibrated on (drift: a corpus that grew) land on -128 / 127, never wrap to the other end."""
    from dive_core.compress import sq8_decode, sq8_encode

    vmin = np.array([0.0, -1.0, 0.5], np.float32)
    vdiff = np.array([1.0, 2.0, 0.0], np.float32)  # the third coordinate is constant in calibration
    y = np.array([[0.0, -1.0, 0.5],        # the lower ends
                  [1.0, 1.0, 0.5],         # the upper ends
                  [0.5, 0.0, 0.5],         # the middle: int(127.5) = 127 -> -1
                  [1.5, 3.0, 9.0],         # past the top
                  [-7.0, -100.0, -9.0],    # past the bottom
                  [1e30, -1e30, 0.5]], np.float32)
    codes = sq8_encode(y, vmin, vdiff)
    assert codes.dtype == np.int8
    assert codes.tolist() == [[-128, -128, -128], [127, 127, -128], [-1, -1, -128],
                              [127, 127, -128], [-128, -128, -128], [127, -128, -128]]
    back = sq8_decode(codes, vmin, vdiff)
    np.testing.assert_allclose(back[3, :2], vmin[:2] + 255.5 / 255 * vdiff[:2], rtol=1e-6)  # the top cell, not the bottom


def test_a_code_index_refuses_sparse_codes_and_unknown_encodings_by_name(tmp_path):
    """dive_core.compress.cli.code_index (rule budget_index): a k-sparse code has no FAISS index, and an
    encoding that is neither a frontier encoding nor an index quantizer is named; nothing is written."""
    from dive_core.compress.errors import CompressError
    from dive_core.compress.cli import code_index

    with pytest.raises(CompressError, match="a k-sparse code has no FAISS index"):
        code_index(tmp_path / "m.pt", tmp_path / "e.h5", "sparse", tmp_path / "v.h5", tmp_path / "i.faiss")
    with pytest.raises(CompressError, match="encoding 'int4'"):
        code_index(tmp_path / "m.pt", tmp_path / "e.h5", "int4", tmp_path / "v.h5", tmp_path / "i.faiss")
    assert not list(tmp_path.iterdir())


def test_a_1bit_code_index_is_faiss_binary_index_of_the_sign_codes(tmp_path, model, data):
    """code_index with a 1-bit pick (rule budget_index): the float32 vectors dive-compress writes, and
    beside them FAISS's IndexBinaryFlat of their sign bits (x > 0, packed as numpy packs them), the
    index the frontier searched; no dive-compress command (it writes no 1-bit index)."""
    import faiss

    from dive_core.compress.cli import code_index

    ids, x = data
    emb = write_embeddings_h5(tmp_path / "embeddings.h5", {"corpus": (ids, x)})
    vectors, index_path = tmp_path / "corpus.h5", tmp_path / "index.faiss"
    assert code_index(model, emb, "binary", vectors, index_path) == {"command": None, "factory": None}
    got_ids, y = read_all(vectors, group="corpus")
    assert got_ids == ids
    np.testing.assert_array_equal(y, reference(model, x))  # the float32 vectors of the map
    built = faiss.IndexBinaryFlat(8)  # k = 8 dimensions, 1 byte a vector
    built.add(np.packbits(y > 0, axis=1))
    index = faiss.read_index_binary(str(index_path))
    assert index.ntotal == N and index.code_size == 1
    assert bytes(faiss.serialize_index_binary(index)) == bytes(faiss.serialize_index_binary(built))
