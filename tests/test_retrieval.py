"""Search (dive_core/retrieval.py): exact top-k against brute force, the self-hit exclusion, and each
encoding of the quality-per-byte frontier against hand-computed rankings."""

from __future__ import annotations

import numpy as np
import pytest

from dive_core import retrieval as R
from dive_core.retrieval import search

DOCS = np.array([[1.0, 0.2, -0.3, 0.5, 0.1, -0.2, 0.4, 0.3],
                 [-1.0, 0.3, 0.2, 0.1, -0.4, 0.2, 0.1, -0.1],
                 [1.2, 0.2, -0.3, 0.6, 0.2, -0.1, 0.5, 0.2],
                 [0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]], dtype=np.float32)
QUERY = np.array([[1.0, 0.1, -0.2, 0.4, 0.2, -0.3, 0.3, 0.2]], dtype=np.float32)
IDS = ["a", "b", "c", "d"]


def test_bytes_per_vector_are_exact():
    assert [R.bytes_per_vector(e, 64) for e in R.ENCODINGS] == [256, 128, 64, 8, 8]
    assert R.bytes_per_vector("binary", 96) == 12 and R.bytes_per_vector("binary", 4) == 1
    for enc in ("float32", "float16", "sq8", "binary"):
        index = R.build_index(DOCS, use_gpu=False, encoding=enc)
        assert index.code_size == R.bytes_per_vector(enc, 8), enc  # what FAISS really stores
    with pytest.raises(ValueError, match="unknown encoding"):
        R.bytes_per_vector("pq", 8)


def test_float_encodings_rank_by_inner_product():
    exact = sorted(range(4), key=lambda i: -float(DOCS[i] @ QUERY[0]))
    assert [IDS[i] for i in exact] == ["c", "a", "d", "b"]  # 1.78, 1.54, 0.17, -1.10
    for enc in ("float32", "float16", "sq8"):
        run = R.search(DOCS, IDS, QUERY, ["q"], top_k=4, use_gpu=False, encoding=enc)
        assert list(run["q"]) == [IDS[i] for i in exact], enc
        if enc != "sq8":
            assert run["q"]["a"] == pytest.approx(float(DOCS[0] @ QUERY[0]), abs=1e-3)


def test_binary_ranks_by_hamming_distance_and_rescoring_restores_the_float_order():
    signs = DOCS > 0
    q = QUERY[0] > 0
    hamming = [int((s != q).sum()) for s in signs]  # a 0, b 5, c 0, d 2 -> a, c (row order), d, b
    assert hamming == [0, 5, 0, 2]
    run = R.search(DOCS, IDS, QUERY, ["q"], top_k=4, use_gpu=False, encoding="binary")
    assert list(run["q"]) == ["a", "c", "d", "b"] and run["q"]["b"] == -5.0
    # top 1 with 4 candidates re-ranked: the exact inner product puts c (1.78) before a (1.54)
    best = max(range(4), key=lambda i: float(DOCS[i] @ QUERY[0]))
    assert IDS[best] == "c"
    run = R.search(DOCS, IDS, QUERY, ["q"], top_k=1, use_gpu=False, encoding="binary_rescore")
    assert list(run["q"]) == [IDS[best]] and run["q"][IDS[best]] == pytest.approx(float(DOCS[best] @ QUERY[0]))
    # the candidates are the Hamming-nearest: with oversample 1 the float order cannot bring in b
    scores, rows = R.index_search(R.build_index(DOCS, False, "binary_rescore"), "binary_rescore", QUERY, 2,
                                  DOCS, oversample=1)
    assert sorted(rows[0].tolist()) == [0, 2]


def test_index_free_search_equals_the_flat_index_without_copying_the_corpus():
    """search() on a CPU runs IndexFlatIP's kernel straight over the matrix (FlatCorpus): the same
    scores and rows, ties included, and no second copy of the corpus."""
    rng = np.random.default_rng(3)
    docs = rng.standard_normal((3000, 48)).astype(np.float32)
    docs[1500] = docs[7]  # an exact tie
    queries = rng.standard_normal((70, 48)).astype(np.float32)
    flat = R.FlatCorpus(docs)
    assert np.shares_memory(flat.docs, docs)
    index = R.build_index(docs, use_gpu=False)
    for k in (1, 10, 100):
        s1, r1 = flat.search(queries, k)
        s2, r2 = index.search(queries, k)
        assert np.array_equal(r1, r2) and np.array_equal(s1, s2)
    assert isinstance(R.search_index(docs, use_gpu="auto"), R.FlatCorpus)
    assert not isinstance(R.search_index(docs, use_gpu="auto", encoding="sq8"), R.FlatCorpus)


def test_rescoring_in_bounded_chunks_gives_the_same_ranking(monkeypatch):
    """Re-scoring gathers the candidates' float32 vectors a few queries at a time (a bounded
    buffer, not queries x candidates x d at once); the scores and order are the same."""
    rng = np.random.default_rng(5)
    docs = rng.standard_normal((500, 32)).astype(np.float32)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    queries = rng.standard_normal((37, 32)).astype(np.float32)
    index = R.build_index(docs, False, "binary_rescore")
    whole = R.index_search(index, "binary_rescore", queries, 10, docs)
    gathered = []
    real_einsum = np.einsum
    monkeypatch.setattr(R.np, "einsum", lambda spec, a, b: (gathered.append(a.nbytes), real_einsum(spec, a, b))[1])
    monkeypatch.setattr(R, "RESCORE_GATHER_BYTES", 5 * 40 * 32 * 4)  # 5 queries' 40 candidates at a time
    chunked = R.index_search(index, "binary_rescore", queries, 10, docs)
    assert max(gathered) <= 5 * 40 * 32 * 4 and len(gathered) == 8  # ceil(37 / 5)
    np.testing.assert_array_equal(whole[1], chunked[1])
    np.testing.assert_allclose(whole[0], chunked[0], rtol=0, atol=1e-6)


# --------------------------------------------------------------------------- exact search


def _data(seed=0, n_docs=60, n_q=7, d=16):
    rng = np.random.default_rng(seed)
    docs = rng.standard_normal((n_docs, d)).astype(np.float32)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    queries = rng.standard_normal((n_q, d)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    return docs, [f"doc{i}" for i in range(n_docs)], queries, [f"q{i}" for i in range(n_q)]


def test_search_equals_bruteforce():
    docs, dids, qs, qids = _data()
    run = search(docs, dids, qs, qids, top_k=10, use_gpu=False, batch_size=3)
    scores = qs @ docs.T
    for i, q in enumerate(qids):
        order = np.argsort(-scores[i], kind="stable")[:10]
        assert list(run[q]) == [dids[j] for j in order]
        np.testing.assert_allclose(list(run[q].values()), scores[i, order], rtol=1e-5, atol=1e-6)
    assert list(run) == qids


def test_search_drops_self_hit_and_keeps_top_k():
    docs, dids, qs, qids = _data(seed=1)
    # query "doc5" is identical to document "doc5": its best hit, which must be dropped
    qs2 = np.vstack([docs[5:6], qs[:2]])
    qids2 = ["doc5", "q0", "q1"]
    run = search(docs, dids, qs2, qids2, top_k=10, use_gpu=False)
    scores = qs2 @ docs.T
    full = [dids[j] for j in np.argsort(-scores[0], kind="stable")]
    assert full[0] == "doc5"
    assert list(run["doc5"]) == full[1:11]
    assert len(run["doc5"]) == 10
    for i, q in enumerate(qids2[1:], start=1):
        assert list(run[q]) == [dids[j] for j in np.argsort(-scores[i], kind="stable")[:10]]
    # without the exclusion the self hit stays
    run2 = search(docs, dids, qs2, qids2, top_k=10, use_gpu=False, exclude_self=False)
    assert list(run2["doc5"]) == full[:10]


def test_search_top_k_larger_than_corpus_and_dim_mismatch():
    docs, dids, qs, qids = _data(n_docs=5)
    run = search(docs, dids, qs, qids, top_k=100, use_gpu=False)
    assert all(len(r) == 5 for r in run.values())
    qids_self = ["doc2"] + qids[1:]
    run = search(docs, dids, qs, qids_self, top_k=100, use_gpu=False)
    assert len(run["doc2"]) == 4 and "doc2" not in run["doc2"]
    with pytest.raises(ValueError, match="dimension mismatch"):
        search(docs, dids, qs[:, :8], qids, use_gpu=False)


def test_search_drops_identical_ids_only_for_listed_queries():
    import numpy as np

    from dive_core.retrieval import search

    docs = np.array([[1.0, 0.0, 0.0], [0.8, 0.6, 0.0], [0.0, 0.0, 1.0]], dtype=np.float32)
    dids, qids = ["1", "2", "3"], ["1", "2"]
    queries = docs[:2].copy()  # query "1" is closest to document "1", query "2" to document "2"
    both = search(docs, dids, queries, qids, top_k=2, use_gpu=False, exclude_self=True)
    assert [list(both[q])[0] for q in qids] == ["2", "1"]  # BEIR convention: own id never retrieved
    listed = search(docs, dids, queries, qids, top_k=2, use_gpu=False, exclude_self=["2"])
    assert list(listed["1"])[0] == "1" and "2" not in listed["2"]  # "1" is another item: kept
    assert len(listed["1"]) == 2 and len(listed["2"]) == 2
    none = search(docs, dids, queries, qids, top_k=2, use_gpu=False, exclude_self=False)
    assert [list(none[q])[0] for q in qids] == ["1", "2"]
