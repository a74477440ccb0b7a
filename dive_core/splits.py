"""Query-disjoint train/validation/test splits by the SHA-256 rank rule (SPEC section 2).

Stages: ``select`` trains on ``train`` and evaluates on ``validation``; ``final`` trains on
``train + validation`` and evaluates on ``test``.
"""

from __future__ import annotations

import hashlib
import math
from fractions import Fraction
from typing import Iterable, Mapping, Sequence

from .data import BeirDataset

ROLES = ("train", "validation", "test")
STAGES = {
    "select": {"train_roles": ("train",), "eval_role": "validation"},
    "final": {"train_roles": ("train", "validation"), "eval_role": "test"},
}

RULE_TEXT = (
    "Judged queries are the query ids with at least one qrels row of score > 0 in any qrels "
    "file. Each is ranked by sha256(f'{seed}:{query_id}') (hex digest, ascending); the first "
    "floor(f_train * n) are train, the next floor(f_validation * n) validation, the rest test."
)


def judged_queries(relevant: Mapping[str, set[str]]) -> list[str]:
    """Query ids with at least one relevant (score > 0) document, sorted."""
    return sorted(q for q, docs in relevant.items() if docs)


def rank_key(seed: int, query_id: str) -> str:
    return hashlib.sha256(f"{seed}:{query_id}".encode("utf-8")).hexdigest()


def _exact(f: float) -> Fraction:
    """The decimal value a fraction was written as (``0.7`` -> ``7/10``)."""
    return Fraction(repr(float(f)))


def split_ids(
    query_ids: Iterable[str], seed: int, fractions: Sequence[float] = (0.6, 0.2, 0.2)
) -> dict[str, list[str]]:
    """Split ids by the rank rule; each role's list is in rank order. Independent of input order."""
    if len(fractions) != 3 or any(f < 0 for f in fractions) or abs(sum(fractions) - 1) > 1e-9:
        raise ValueError(f"split fractions must be three non-negative numbers summing to 1, got {fractions}")
    ids = sorted(set(query_ids), key=lambda q: (rank_key(seed, q), q))
    n = len(ids)
    # floor(f * n) in exact arithmetic on the fraction as written (0.7 -> 7/10): binary floats
    # would give floor(0.7 * 90) = floor(62.99999999999999) = 62 instead of 63.
    n_train = math.floor(_exact(fractions[0]) * n)
    n_val = math.floor(_exact(fractions[1]) * n)
    return {
        "train": ids[:n_train],
        "validation": ids[n_train:n_train + n_val],
        "test": ids[n_train + n_val:],
    }


def train_queries(manifest: Mapping, stage: str) -> list[str]:
    return [q for role in STAGES[stage]["train_roles"] for q in manifest["ids"][role]]


def eval_queries(manifest: Mapping, stage: str) -> list[str]:
    return list(manifest["ids"][STAGES[stage]["eval_role"]])


def seen_queries(
    relevant: Mapping[str, set[str]], reference: Iterable[str], evaluated: Iterable[str],
    self_ids: Iterable[str] = (),
) -> list[str]:
    """Evaluated queries with a relevant doc that is also a positive of a reference query, or -
    where queries are corpus documents (``self_ids``: the queries that are their own corpus
    document) - whose own document is such a positive (the trained pair reversed)."""
    seen_docs = set().union(*(relevant[q] for q in reference)) if reference else set()
    self_ids = set(self_ids)
    return [q for q in evaluated if relevant[q] & seen_docs or (q in self_ids and q in seen_docs)]


def _norm(text: str) -> str:
    return " ".join(str(text).split())


def identical_ids(ds: BeirDataset, queries: Iterable[str], queries_in_corpus: bool | None) -> dict:
    """Which queries are their own corpus document (so that document is never retrieved for
    them, never their negative, and a training positive equal to them makes them `seen`).

    ``queries_in_corpus`` is the registry key: True (ArguAna, Quora, CQADupStack) - every query
    whose id is a corpus id; False - none; None (key absent) - a rule that cannot misfire on
    collections that number queries and documents independently: the id is a corpus id AND the
    query text equals that document's text (or title + text), whitespace-normalised."""
    corpus = ds.corpus
    if queries_in_corpus is True:
        rule, ids = "registry: queries are corpus documents", [q for q in queries if q in corpus]
    elif queries_in_corpus is False:
        rule, ids = "registry: query and document ids are unrelated", []
    else:
        rule = "same id and same text"
        ids = [q for q in queries if q in corpus and _norm(ds.queries.get(q, "")) in
               (_norm(corpus[q].get("text", "")), _norm(ds.doc_text(q)))]
    return {"rule": rule, "queries_in_corpus": queries_in_corpus, "n": len(ids), "ids": sorted(ids)}


def make_manifest(
    ds: BeirDataset, dataset: str, seed: int, fractions: Sequence[float] = (0.6, 0.2, 0.2),
    queries_in_corpus: bool | None = None,
) -> dict:
    relevant = ds.relevant()
    merged = ds.all_qrels()
    ids = split_ids(judged_queries(relevant), seed, fractions)
    empty = [r for r in ROLES if not ids[r]]
    if empty:
        raise ValueError(
            f"{dataset}: splitting its {sum(map(len, ids.values()))} judged queries with fractions "
            f"{list(fractions)} (config split.fractions) leaves role(s) {', '.join(empty)} empty; every role needs "
            "at least one query (train: fitting, validation: selection, test: held-out tables)")
    same = identical_ids(ds, [q for r in ROLES for q in ids[r]], queries_in_corpus)
    overlap = {}
    for stage, spec in STAGES.items():
        reference = [q for r in spec["train_roles"] for q in ids[r]]
        role = spec["eval_role"]
        seen = seen_queries(relevant, reference, ids[role], same["ids"])
        positives = set().union(*(relevant[q] for q in reference)) if reference else set()
        overlap[role] = {
            "stage": stage,
            "reference_roles": list(spec["train_roles"]),
            "n_queries": len(ids[role]),
            "n_seen": len(seen),
            "n_unseen": len(ids[role]) - len(seen),
            # seen only because the query itself is a training positive (the pair reversed)
            "n_seen_reversed": sum(1 for q in seen if not relevant[q] & positives),
            "seen_ids": seen,
        }
    return {
        "dataset": dataset,
        "seed": seed,
        "fractions": dict(zip(ROLES, fractions)),
        "rule": RULE_TEXT,
        "counts": {r: len(ids[r]) for r in ROLES},
        "n_judged": sum(len(v) for v in ids.values()),
        "source_fingerprint": ds.fingerprint,
        "stages": {s: {"train_roles": list(v["train_roles"]), "eval_role": v["eval_role"]}
                   for s, v in STAGES.items()},
        "document_overlap": overlap,
        "identical_ids": same,
        "ids": ids,
        # evaluation (and training) qrels of each role: all rows, any qrels file
        "qrels": {r: {q: dict(sorted(merged[q].items())) for q in ids[r]} for r in ROLES},
    }


def role_qrels(manifest: Mapping, roles: Iterable[str]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for r in roles:
        out.update(manifest["qrels"][r])
    return out
