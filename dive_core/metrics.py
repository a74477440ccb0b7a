"""Retrieval metrics with pytrec_eval (trec_eval 9 semantics), stateless like BEIR's
``EvaluateRetrieval.evaluate``.

* ``ndcg@10``    trec_eval ``ndcg_cut.10`` (gain = relevance value)
* ``recall@10``  trec_eval ``recall.10`` (denominator: all judged-relevant docs of the query)
* ``recall@100`` trec_eval ``recall.100``
* ``mrr@10``     trec_eval ``recip_rank`` on the run cut to its top 10

Documents are ranked by score descending, ties broken by document id descending (trec_eval's
rule). Every query of ``qrels`` is evaluated; a query with no retrieved documents scores 0.
"""

from __future__ import annotations

from typing import Iterable, Mapping

METRICS = ("ndcg@10", "recall@10", "recall@100", "mrr@10")


def _top(run: Mapping[str, float], k: int) -> dict[str, float]:
    ranked = sorted(run.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    return dict(ranked[:k])


def evaluate(
    qrels: Mapping[str, Mapping[str, int]],
    run: Mapping[str, Mapping[str, float]],
) -> dict[str, dict[str, float]]:
    """Per-query metrics ``{qid: {metric: value}}`` for every query in ``qrels``."""
    import pytrec_eval

    qrels = {q: {d: int(s) for d, s in docs.items()} for q, docs in qrels.items()}
    full = {q: {d: float(s) for d, s in run.get(q, {}).items()} for q in qrels}
    ev = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.10", "recall.100"})
    res = ev.evaluate({q: r for q, r in full.items() if r})
    mrr_ev = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"})
    mrr = mrr_ev.evaluate({q: _top(r, 10) for q, r in full.items() if r})
    out: dict[str, dict[str, float]] = {}
    for q in qrels:
        r = res.get(q, {})
        out[q] = {
            "ndcg@10": float(r.get("ndcg_cut_10", 0.0)),
            "recall@10": float(r.get("recall_10", 0.0)),
            "recall@100": float(r.get("recall_100", 0.0)),
            "mrr@10": float(mrr.get(q, {}).get("recip_rank", 0.0)),
        }
    return out


def mean_metrics(per_query: Mapping[str, Mapping[str, float]], qids: Iterable[str] | None = None) -> dict[str, float]:
    qids = list(per_query) if qids is None else list(qids)
    if not qids:
        return {m: float("nan") for m in METRICS}
    return {m: sum(per_query[q][m] for q in qids) / len(qids) for m in METRICS}
