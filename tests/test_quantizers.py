"""The index quantizers (dive_core.quantizers) as the frontier uses them: names, bytes, the grid of a
dimension, our indexes against FAISS's own built the plain way, determinism, and a frontier row
through the evaluation path."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

from dive_core import config as dcfg
from dive_core import efficiency
from dive_core import quantizers as Q

faiss = pytest.importorskip("faiss")
REPO = Path(__file__).resolve().parent.parent


def unit(n, d, seed):
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_names_factory_strings_and_bytes_by_hand():
    """pq16 of 64d: 16 one-byte codes; pq16x4: 16 x 4 bits = 8 bytes; opq8: 8 bytes after the rotation;
    RaBitQ of 64d: 64 bits (8 bytes) + FAISS's two float factors (8 bytes) = 16; its 4-bit form
    4 x 64 / 8 = 32 bytes + 20 bytes of factors = 52 (what FAISS 1.15 stores); sq4: 64 x 4 bits = 32."""
    assert Q.factory_string("pq16", 64) == "PQ16x8" and Q.factory_string("opq8", 64) == "OPQ8,PQ8x8"
    assert Q.factory_string("pq16x4", 64) == "PQ16x4" and Q.factory_string("rabitq4", 64) == "RaBitQ4"
    assert Q.factory_string("rabitq", 64) == "RaBitQ" and Q.factory_string("sq4", 64) == "SQ4"
    assert {n: Q.code_bytes(n, 64) for n in ("pq16", "pq16x4", "opq8", "rabitq", "rabitq4", "sq4")} == {
        "pq16": 16, "pq16x4": 8, "opq8": 8, "rabitq": 16, "rabitq4": 52, "sq4": 32}
    assert Q.min_training_points("pq8") == 39 * 256 and Q.min_training_points("pq8x4") == 39 * 16
    assert Q.min_training_points("rabitq") is None
    with pytest.raises(ValueError, match="unknown quantizer 'ivf16'"):
        Q.parse("ivf16")
    with pytest.raises(ValueError, match="12 sub-quantizers do not divide the dimension 64"):
        Q.factory_string("pq12", 64)


def test_grid_keeps_the_m_that_divide_the_dimension_up_to_half_of_it():
    """96d: of 8, 16, 32, 64 the M dividing 96 and at most 48 are 8, 16, 32; 64d: 8, 16, 32 (64 > 32);
    ``divisors``: 4, 6, 8, 12, 16, 24, 32, 48 for 96d."""
    s = {"pq_m": [8, 16, 32, 64], "opq_m": [8, 16], "rabitq_bits": [1, 4], "sq4": True}
    assert Q.grid(96, s) == ["pq8", "pq16", "pq32", "opq8", "opq16", "rabitq", "rabitq4", "sq4"]
    assert Q.grid(64, {**s, "sq4": False, "rabitq_bits": []}) == ["pq8", "pq16", "pq32", "opq8", "opq16"]
    assert Q.grid(96, {"pq_m": "divisors"}) == [f"pq{m}" for m in (4, 6, 8, 12, 16, 24, 32, 48)]


@pytest.mark.parametrize("name", ["pq8", "opq4", "rabitq", "rabitq4", "sq4", "pq8x4"])
def test_our_index_searches_as_faiss_own_index_built_in_memory(name):
    """Our index (dive_core.quantizers.build) returns what FAISS's index of the same factory string,
    seeded the same way and trained and filled the plain way, returns: the same top 10 and scores."""
    d, seed = 32, 7
    docs, queries = unit(2000, d, 0), unit(20, d, 1)
    ours, info = Q.build(name, docs, seed, opq_niter=3)
    theirs = faiss.index_factory(d, Q.factory_string(name, d), faiss.METRIC_INNER_PRODUCT)
    q = Q.parse(name)
    if q.kind == "pq":
        theirs.do_polysemous_training = False
        theirs.pq.cp.seed = seed
    elif q.kind == "opq":
        opq = faiss.downcast_VectorTransform(theirs.chain.at(0))
        opq.niter = 3
        inner = faiss.downcast_index(theirs.index)
        inner.do_polysemous_training = False
        inner.pq.cp.seed = seed
        opq.pq = inner.pq
    elif q.kind == "rabitq":
        theirs.qb = 0
    theirs.train(docs)
    theirs.add(docs)
    d_ours, i_ours = ours.search(queries, 10)
    d_theirs, i_theirs = theirs.search(queries, 10)
    np.testing.assert_array_equal(i_ours, i_theirs)
    np.testing.assert_allclose(d_ours, d_theirs, rtol=1e-5)  # OPQ: our fit on one thread, theirs on all
    assert ours.sa_code_size() == theirs.sa_code_size() == Q.code_bytes(name, d)
    assert info["train_rows"] == 2000 and info["factory"] == Q.factory_string(name, d)
    assert info["codebook_bytes"] > 0 and info["fit_seconds"] >= 0


def test_pq_scores_are_the_inner_product_with_the_decoded_codes():
    """Asymmetric distance: the query in float32 against each document's reconstruction."""
    docs, queries = unit(1500, 16, 2), unit(5, 16, 3)
    index, _ = Q.build("pq4", docs, 0)
    scores, rows = index.search(queries, 5)
    decoded = index.reconstruct_n(0, index.ntotal)
    np.testing.assert_allclose(scores, np.take_along_axis(queries @ decoded.T, rows, 1), rtol=1e-5, atol=1e-6)


def test_same_inputs_and_seed_give_the_same_bytes_and_another_seed_other_codebooks():
    docs = unit(1500, 16, 4)
    for name in ("pq4", "opq4"):
        a, _ = Q.build(name, docs, 11, opq_niter=2)
        b, _ = Q.build(name, docs, 11, opq_niter=2)
        c, _ = Q.build(name, docs, 12, opq_niter=2)
        assert Q.index_bytes(a) == Q.index_bytes(b)
        assert bytes(faiss.serialize_index(a)) == bytes(faiss.serialize_index(b))
        assert bytes(faiss.serialize_index(a)) != bytes(faiss.serialize_index(c))


def test_codebook_bytes_are_the_trained_empty_index_and_fit_rows_train_it():
    """PQ4 of 16d: 256 centroids x 16 floats = 16,384 bytes of codebooks, plus FAISS's header; the
    index fitted on 1,000 of the rows records 1,000 training rows and still holds every vector."""
    docs = unit(1500, 16, 5)
    index, info = Q.build("pq4", docs, 0, train=docs[:1000])
    assert 256 * 16 * 4 <= info["codebook_bytes"] < 256 * 16 * 4 + 200
    assert info["train_rows"] == 1000 and index.ntotal == 1500
    with pytest.raises(ValueError, match="before any vector is added"):
        Q.codebook_bytes(index)


def test_frontier_rows_of_a_quantizer_equal_the_search_of_its_index():
    """A quantizer's frontier row: the evaluation path over its index (nDCG@10 per query as the
    float32 rows), its bytes what the index holds, and its fit stated; k-sparse codes refuse them."""
    from synthetic import make_problem

    from dive_core.evaluation import evaluate_vectors

    p = make_problem(d=16)
    manifest = _manifest(p)
    rows = efficiency.frontier_rows("frozen", 16, p.docs, p.val_queries, p.doc_ids, manifest, "final", 10,
                                    encodings=("float32",), quantizers=["pq4", "rabitq"], quantizer_seed=3)
    assert [r["encoding"] for r in rows] == ["float32", "pq4", "rabitq"]
    assert [r["bytes_per_vector"] for r in rows] == [64, 4, 2 + 8]
    assert rows[0]["fit_seconds"] is None and rows[1]["train_rows"] == 300 and rows[1]["factory"] == "PQ4x8"
    index, _ = Q.build("pq4", p.docs, 3)
    per_query, summary = evaluate_vectors(p.docs, p.doc_ids, p.val_queries, manifest, "final", 10, use_gpu=False,
                                          encoding="pq4", index=index)
    assert rows[1]["ndcg@10"] == summary["metrics"]["ndcg@10"]
    assert rows[1]["per_query"]["ndcg@10"] == [per_query[q]["ndcg@10"] for q in p.val_ids]
    fitted = efficiency.frontier_rows("frozen", 16, p.docs, p.val_queries, p.doc_ids, manifest, "final", 10,
                                      encodings=(), quantizers=["pq4"], quantizer_seed=3, fit_rows=np.arange(260))
    assert fitted[0]["train_rows"] == 260
    with pytest.raises(ValueError, match="'pq4': 200 training rows for 256 centroids per sub-quantizer"):
        efficiency.frontier_rows("frozen", 16, p.docs, p.val_queries, p.doc_ids, manifest, "final", 10,
                                 encodings=(), quantizers=["pq4"], fit_rows=np.arange(200))
    with pytest.raises(ValueError, match="k-sparse codes are stored as they are"):
        efficiency.frontier_rows("csr", 16, p.docs, p.val_queries, p.doc_ids, manifest, "final", 10, active=4,
                                 quantizers=["pq4"])


def test_frontier_rows_timed_for_a_latency_limit_keep_their_scores_and_time_each_codes_own_index(monkeypatch):
    """latency_queries=5: every encoding's row (float32, fp16, SQ8, 1-bit, re-scored 1-bit, PQ4) holds a
    positive latency_ms and otherwise the same fields as the untimed rows; the timing searches the code's
    own index, the one its evaluation searched (FAISS's exact flat kernel, SQ and binary indexes; the quantizer's), one query at a time on one thread,
    5 timed searches after a warm-up, FAISS's thread count restored; each index is built once. Untimed rows have
    no latency_ms."""
    import faiss
    from synthetic import make_problem

    from dive_core import retrieval

    p = make_problem(d=16)
    manifest = _manifest(p)
    args = ("frozen", 16, p.docs, p.val_queries, p.doc_ids, manifest, "final", 10)
    plain = efficiency.frontier_rows(*args, quantizers=["pq4"], quantizer_seed=3)
    seen, threads = [], faiss.omp_get_max_threads()
    real = retrieval.index_search

    def spy(index, encoding, queries, k, docs=None, **kw):
        seen.append((type(index).__name__, encoding, queries.shape[0], k, faiss.omp_get_max_threads()))
        return real(index, encoding, queries, k, docs, **kw)

    built, build = [], retrieval.build_index

    def counted(docs, use_gpu="auto", encoding="float32"):
        built.append(encoding)
        return build(docs, use_gpu, encoding)

    monkeypatch.setattr(retrieval, "index_search", spy)
    monkeypatch.setattr(retrieval, "build_index", counted)
    monkeypatch.setattr(efficiency, "build_index", counted)
    timed = efficiency.frontier_rows(*args, quantizers=["pq4"], quantizer_seed=3, latency_queries=5)
    assert built == ["float16", "sq8", "binary", "binary_rescore"]  # each index built once, evaluated and timed
    assert [r["encoding"] for r in timed] == ["float32", "float16", "sq8", "binary", "binary_rescore", "pq4"]
    assert all(r["latency_ms"] > 0 for r in timed) and not any("latency_ms" in r for r in plain)
    assert [{k: v for k, v in r.items() if k not in ("latency_ms", "fit_seconds")} for r in timed] == \
        [{k: v for k, v in r.items() if k != "fit_seconds"} for r in plain]
    timing = [x for x in seen if x[2] == 1]
    assert len(timing) == 6 * 6 and {x[3] for x in timing} == {10} and {x[4] for x in timing} == {1}
    assert [x[:2] for x in timing[::6]] == [("FlatCorpus", "float32"), ("IndexScalarQuantizer", "float16"),
                                            ("IndexScalarQuantizer", "sq8"), ("IndexBinaryFlat", "binary"),
                                            ("IndexBinaryFlat", "binary_rescore"), ("IndexPQ", "pq4")]
    assert faiss.omp_get_max_threads() == threads


def _manifest(p):
    """A split manifest whose test role is the problem's validation queries."""
    return {"stages": {}, "ids": {"test": list(p.val_ids), "train": [], "validation": []},
            "qrels": {"test": p.val_qrels, "train": {}, "validation": {}},
            "identical_ids": {"rule": "none", "ids": []},
            "document_overlap": {"test": {"seen_ids": list(p.val_ids[:10])}}}


def test_a_bad_quantizers_setting_is_refused_naming_the_key():
    from jsonschema import Draft202012Validator

    schema = dcfg.load_yaml(REPO / "config" / "schema" / "config.schema.yaml")
    raw = dcfg.load_yaml(REPO / "config" / "config.yaml")
    assert not list(Draft202012Validator(schema).iter_errors(raw))
    for key, value in (("pq_m", "all"), ("opq_niter", 0), ("rabitq_bits", [12]), ("efficiency", ["ivf16"])):
        bad = copy.deepcopy(raw)
        bad["quantizers"][key] = value
        errors = list(Draft202012Validator(schema).iter_errors(bad))
        assert errors and all(list(e.absolute_path)[:2] == ["quantizers", key] for e in errors), key


def test_the_frontier_quantizes_the_primary_dimension_and_frozen():
    """config quantizers.dims [primary]: MiniLM's frozen 384d and every method's 64d get the rows, not
    the 96d of the secondary dimension; with both, every frontier run."""
    from dive_core import plan

    raw = dcfg.load_yaml(REPO / "config" / "config.yaml")
    runs = plan.frontier_quantized(raw, "minilm")
    assert ("frozen", 384) in runs and ("mrl", 64) in runs and ("dive", 64) in runs
    assert not any(k == 96 for _, k in runs)
    both = copy.deepcopy(raw)
    both["quantizers"]["dims"] = ["primary", "secondary"]
    assert plan.frontier_quantized(both, "minilm") == plan.frontier_runs(both, "minilm")
