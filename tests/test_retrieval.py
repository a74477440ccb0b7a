"""Search under each encoding of the quality-per-byte frontier, against hand-computed rankings."""

from __future__ import annotations

import numpy as np
import pytest

from dive_core import retrieval as R

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
