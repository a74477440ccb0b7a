"""Shared deterministic training triplets (query, positive, negative).

One triplet file per (dataset, backbone, stage); every method and every optimisation seed
trains on the same file. For each training query and each of its positives (score > 0 in any
qrels file), ``num_negatives`` negatives are drawn:

* ``random`` (default, Search-Adaptor's published setting): uniformly from the corpus, excluding
  every document judged relevant for the query and the query itself where it is a corpus
  document (``self_ids``: the split manifest's ``identical_ids``);
* ``hard``: from the frozen full-dimension top-``hard_pool`` of the query, minus the same
  exclusions (topped up with random negatives when the pool runs short).

The random generator of each (query, positive) pair is seeded by
``sha256(f"{seed}:{query_id}:{positive_id}")`` over the sorted corpus ids, so the triplets do
not depend on file order, on the order queries are processed, or on anything else.

Three switches, all off in the paper's protocol:

* ``max_per_query`` (config ``triplets.max_per_query``): keep at most that many of each query's
  triplets, a uniform sample without replacement seeded by ``sha256(f"{seed}:{query_id}:cap")``
  (file order kept). The same file is shared by every method, so the cap is fair; it is a
  stated deviation for datasets with many positives per query (NFCorpus: ~41, i.e. ~1.1
  million triplets per epoch uncapped).
* ``doc_ids`` narrower than the corpus (the arrival protocol): the known documents, the only ones a
  triplet may hold; a positive that arrives after training is dropped, negatives are drawn from
  the known documents.
* ``excluded_docs`` (the document-disjoint check): documents that may be neither a positive nor
  a negative - every document relevant to a query the stage evaluates. A positive pair whose
  document is excluded is dropped, so the held-out score measures generalisation to documents
  no training triplet contains, for every evaluated query.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from . import records


def pair_rng(seed: int, query_id: str, pos_id: str) -> np.random.Generator:
    digest = hashlib.sha256(f"{seed}:{query_id}:{pos_id}".encode("utf-8")).digest()
    return np.random.Generator(np.random.PCG64(int.from_bytes(digest[:16], "little")))


def _draw(rng: np.random.Generator, pool: Sequence[str], excluded: set[str], n: int) -> list[str]:
    """Up to ``n`` distinct items of ``pool`` not in ``excluded``, in random order."""
    if n <= 0 or not pool:
        return []
    want = min(len(pool), n + len(excluded))
    picked = [pool[i] for i in rng.choice(len(pool), size=want, replace=False)]
    out = [d for d in picked if d not in excluded][:n]
    if len(out) < n and want < len(pool):  # pathological: many exclusions; fall back to a full scan
        allowed = [d for d in pool if d not in excluded and d not in out]
        extra = rng.permutation(len(allowed))[: n - len(out)]
        out += [allowed[i] for i in extra]
    return out


@dataclass
class Triplets:
    query_ids: list[str]
    pos_ids: list[str]
    neg_ids: list[str]
    pos_scores: np.ndarray
    neg_scores: np.ndarray

    def __len__(self) -> int:
        return len(self.query_ids)


def build_triplets(
    qrels: Mapping[str, Mapping[str, int]],
    train_qids: Sequence[str],
    doc_ids: Sequence[str],
    seed: int,
    num_negatives: int = 10,
    mode: str = "random",
    hard_candidates: Mapping[str, Sequence[str]] | None = None,
    max_per_query: int | None = None,
    excluded_docs: set[str] | frozenset[str] = frozenset(),
    self_ids: set[str] | frozenset[str] | None = None,
) -> Triplets:
    """Triplets for ``train_qids``; ``qrels`` is the merged ``{qid: {doc: score}}`` table;
    ``doc_ids``: the documents a triplet may hold (a positive outside them is dropped: the known
    documents of the arrival split; every staged qrels document is a corpus document);
    ``max_per_query`` and ``excluded_docs``: see the module docstring; ``self_ids``: the queries
    that are their own corpus document (the split manifest's ``identical_ids``), whose document
    is never their negative (None: every query whose id is a corpus id, the older rule)."""
    if max_per_query is not None and int(max_per_query) < 1:
        raise ValueError(f"triplets.max_per_query must be >= 1 or null, got {max_per_query}")
    if mode not in ("random", "hard"):
        raise ValueError(f"triplet mode must be 'random' or 'hard', not {mode!r}")
    if mode == "hard" and hard_candidates is None:
        raise ValueError("mode 'hard' needs the frozen top-k candidates of each query")
    pool = sorted(set(doc_ids))
    in_pool = set(pool)
    rows: list[tuple[str, str, str, int, int]] = []
    # sorted: the file (and so every batch order drawn from it) must not depend on the order
    # the training queries were listed in; a query listed twice is used once
    for qid in sorted(set(train_qids)):
        judged = qrels.get(qid, {})
        positives = sorted(d for d, s in judged.items() if s > 0 and d not in excluded_docs and d in in_pool)
        own = {qid} if self_ids is None or qid in self_ids else set()
        excluded = set(positives) | own | set(excluded_docs)
        start = len(rows)
        for pos in positives:
            rng = pair_rng(seed, qid, pos)
            if mode == "hard":
                # a uniform draw from the pool: sorted so it does not depend on its listing order
                cands = sorted({d for d in hard_candidates.get(qid, []) if d not in excluded and d in in_pool})
                negs = _draw(rng, cands, set(), num_negatives)
                negs += _draw(rng, pool, excluded | set(negs), num_negatives - len(negs))
            else:
                negs = _draw(rng, pool, excluded, num_negatives)
            for neg in negs:
                rows.append((qid, pos, neg, judged[pos], min(judged.get(neg, 0), 0)))
        if max_per_query is not None and len(rows) - start > int(max_per_query):
            rng = pair_rng(seed, qid, "cap")
            keep = np.sort(rng.choice(len(rows) - start, size=int(max_per_query), replace=False))
            rows[start:] = [rows[start + i] for i in keep]
    if not rows:
        raise ValueError("no triplets: the training queries have no positives")
    q, p, n, ps, ns = zip(*rows)
    return Triplets(list(q), list(p), list(n), np.asarray(ps, np.float32), np.asarray(ns, np.float32))


def write_triplets(path: str | Path, t: Triplets) -> None:
    """The triplets TSV (:data:`dive_core.records.TABLES` ``triplets_tsv``), written atomically."""
    records.write_tsv("triplets_tsv", path, zip(t.query_ids, t.pos_ids, t.neg_ids, t.pos_scores, t.neg_scores))


def read_triplets(path: str | Path) -> Triplets:
    """The triplets of a TSV written by :func:`write_triplets` (checked: header, types)."""
    cols = records.read_tsv("triplets_tsv", path)
    return Triplets(cols["query_id"], cols["pos_id"], cols["neg_id"], np.asarray(cols["pos_score"], np.float32),
                    np.asarray(cols["neg_score"], np.float32))


def triplet_stats(t: Triplets) -> dict:
    return {
        "triplets": len(t),
        "queries": len(set(t.query_ids)),
        "positive_pairs": len(set(zip(t.query_ids, t.pos_ids))),
        "distinct_negatives": len(set(t.neg_ids)),
    }
