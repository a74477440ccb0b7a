"""Evaluate a compression method: compress corpus and the evaluated role's queries, exact
inner-product search over the whole corpus, pytrec_eval metrics, per-query rows and the
summary (overall and on the ``seen`` / ``unseen`` subsets of docs/protocol.md#evaluation)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from . import records
from .embeddings import Embeddings
from .metrics import _top, evaluate, mean_metrics
from .retrieval import search
from .sparse import SPARSE_ENCODING, stored_form
from .splits import STAGES, eval_queries, role_qrels


def evaluate_method(method, emb: Embeddings, manifest: Mapping, stage: str, top_k: int = 100,
                    use_gpu: bool | str = "auto", encoding: str = "float32",
                    consume: bool = False) -> tuple[dict[str, dict[str, float]], dict]:
    """Returns ``(per_query, summary)`` for ``method`` on the evaluation role of ``stage``.
    ``consume``: the caller no longer needs ``emb.docs``; an uncompressed method (k = d) then
    writes its vectors over it instead of into a second corpus-sized matrix."""
    qids = eval_queries(manifest, stage)
    t0 = time.perf_counter()
    in_place = consume and method.k == method.d and emb.docs.dtype == np.float32 and emb.docs.flags.writeable
    docs = method.compress(emb.docs, out=emb.docs if in_place else None)
    queries = method.compress(emb.query_rows(qids), side="query")
    if method.sparse_codes and encoding in ("float32", SPARSE_ENCODING):  # k-sparse codes (csr): the corpus
        docs, queries = stored_form(docs, queries)  # as stored (fp16 values), searched
        encoding = SPARSE_ENCODING                                         # exactly (dive_core.sparse)
    compress_seconds = time.perf_counter() - t0
    per_query, summary = evaluate_vectors(docs, emb.doc_ids, queries, manifest, stage, top_k, use_gpu, encoding)
    summary["timings"] = {"compress_seconds": compress_seconds, **summary["timings"]}
    return per_query, summary


def evaluate_vectors(docs, doc_ids, queries, manifest: Mapping, stage: str, top_k: int = 100,
                     use_gpu: bool | str = "auto", encoding: str = "float32", index=None) -> tuple[dict, dict]:
    """The evaluation of already compressed vectors (``queries``: the rows of the evaluated role's
    queries, in manifest order), with the corpus stored under ``encoding``
    (:mod:`dive_core.retrieval`; ``index``: the corpus's index already built under it, e.g. a
    quantizer's, :mod:`dive_core.quantizers`)."""
    role = STAGES[stage]["eval_role"]
    qids = eval_queries(manifest, stage)
    t1 = time.perf_counter()
    same = manifest["identical_ids"]
    run = search(docs, doc_ids, queries, qids, top_k=top_k, use_gpu=use_gpu, encoding=encoding,
                 exclude_self=same["ids"], index=index)
    t2 = time.perf_counter()
    per_query = evaluate(role_qrels(manifest, [role]), run)
    share = train_positive_share(run, training_positives(manifest, stage), qids)
    t3 = time.perf_counter()
    seen_ids = set(manifest["document_overlap"][role]["seen_ids"])
    seen = [q for q in qids if q in seen_ids]
    unseen = [q for q in qids if q not in seen_ids]
    for q in qids:
        per_query[q]["seen"] = int(q in seen_ids)
    summary = {
        "role": role,
        "n_queries": len(qids),
        "metrics": mean_metrics(per_query, qids),
        "subsets": {
            "seen": {"n_queries": len(seen), "metrics": mean_metrics(per_query, seen) if seen else None},
            "unseen": {"n_queries": len(unseen), "metrics": mean_metrics(per_query, unseen) if unseen else None},
        },
        "diagnostics": {"train_positive_share@10": {
            name: (sum(share[q] for q in ids) / len(ids) if ids else None)
            for name, ids in (("all", qids), ("seen", seen), ("unseen", unseen))}},
        "identical_ids": {"rule": same["rule"], "n_queries_dropping_themselves": len(set(same["ids"]) & set(qids))},
        "dim": int(docs.shape[1]),
        "top_k": top_k,
        "encoding": encoding,
        "timings": {"search_seconds": t2 - t1, "metric_seconds": t3 - t2},
    }
    return per_query, summary


def training_positives(manifest: Mapping, stage: str) -> set[str]:
    """Documents relevant (score > 0) to some training query of ``stage``."""
    qrels = role_qrels(manifest, STAGES[stage]["train_roles"])
    return {d for docs in qrels.values() for d, s in docs.items() if s > 0}


def train_positive_share(run: Mapping[str, Mapping[str, float]], positives: set[str],
                         qids: Sequence[str], depth: int = 10) -> dict[str, float]:
    """Per query: the share of its top-``depth`` results (trec_eval order) that are training
    positives. A diagnostic of memorisation: a supervised adapter that learns a document prior
    ("was a training positive") fills the top of every ranking with those documents, which is
    visible on ``unseen`` queries, whose relevant documents are never training positives."""
    return {q: sum(d in positives for d in _top(run.get(q, {}), depth)) / depth for q in qids}


def write_per_query(path: str | Path, per_query: Mapping[str, Mapping[str, float]],
                    order: Sequence[str] | None = None) -> None:
    """The per-query TSV (:data:`dive_core.records.TABLES` ``per_query``): one row per query of
    ``order`` (default: sorted), its metrics and whether it is ``seen``."""
    records.write_tsv("per_query", path, ({**per_query[q], "query_id": q} for q in order or sorted(per_query)))


def read_per_query(path: str | Path) -> dict[str, dict[str, float]]:
    """``{query_id: {metric: value, "seen": 0 | 1}}`` of a per-query TSV (checked: header, types)."""
    cols = records.read_tsv("per_query", path)
    return {row.pop("query_id"): row for row in records.tsv_rows(cols)}


def stratum_means(per_query: Mapping[str, Mapping[str, float]], strata: Mapping[str, Sequence[str]],
                  metric: str = "ndcg@10", path: str | Path = "per-query file",
                  of: str = "queries of the arrival manifest") -> dict[str, float]:
    """``{stratum: mean per-query metric over its queries}`` (NaN for an empty stratum) of one run's
    per-query rows (:func:`read_per_query` of ``path``); ``strata``: ``{stratum: query ids}`` of
    the evaluated role (an arrival manifest's; ``of`` says which, for the error). A query without a row
    is refused, naming ``path``."""
    out = {}
    for s, qids in strata.items():
        missing = [q for q in qids if q not in per_query]
        if missing:
            raise records.RecordError(
                f"{path}: no row for {len(missing)} of the {len(qids)} {s} {of} (first: "
                f"{missing[0]!r}); the run was evaluated on other queries than the arrival manifest's split: "
                "rerun its evaluation, or rule make_arrival")
        out[s] = sum(per_query[q][metric] for q in qids) / len(qids) if qids else float("nan")
    return out
