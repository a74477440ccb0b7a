"""Query-disjoint train/validation/test splits by the SHA-256 rank rule (docs/protocol.md#query-disjoint-split).

Stages: ``select`` trains on ``train`` and evaluates on ``validation``; ``final`` trains on
``train + validation`` and evaluates on ``test``.
"""

from __future__ import annotations

import hashlib
import math
from fractions import Fraction
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

from .hashing import sha256_file

if TYPE_CHECKING:  # annotations only: the data package imports this module (its collection check)
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


# --------------------------------------------------------------------------- documents that arrive
STRATA = ("known", "new", "mixed")
PICK_STRATA = ("all", *STRATA)  # the validation queries an arrival budget study's pick may weigh (``stratum``)

ARRIVAL_RULE_TEXT = (
    "Of the N corpus documents, A = floor(fraction * N) arrive after training; the others are known. "
    "First, the validation and test queries (each role ranked by sha256(f'{seed}:arrival:{query_id}'), "
    "hex digest, ascending) are taken in turns, validation first: every relevant document (score > 0) of "
    "a taken query arrives, unless that would make more than A arrive (then the query is skipped), until "
    "a role has floor(new_query_share * its query count) taken queries or none left. Then the documents "
    "not yet arriving, ranked by sha256(f'{seed}:arrival:{doc_id}'), arrive in that order until A do. "
    "Every fit (triplets, PCA, autoencoder, MRL's corpus stage, SMEC's queue, ...) sees known documents "
    "only; evaluation searches the whole corpus. An evaluated query's stratum: known (every relevant "
    "document known), new (every relevant document arriving) or mixed.")


def arrival_key(seed: int, item_id: str) -> str:
    return hashlib.sha256(f"{seed}:arrival:{item_id}".encode("utf-8")).hexdigest()


def arriving_docs(
    doc_ids: Sequence[str], relevant: Mapping[str, set[str]], eval_roles: Mapping[str, Sequence[str]],
    seed: int, fraction: float = 0.2, new_query_share: float = 0.2,
) -> tuple[list[str], dict[str, list[str]]]:
    """``(arriving documents sorted, {role: the queries taken, in the order taken})`` by
    :data:`ARRIVAL_RULE_TEXT`. ``relevant``: ``{query: relevant documents}``; ``eval_roles``:
    ``{role: its query ids}`` in turn order (validation, test). Independent of listing order."""
    if not 0 < float(fraction) < 1:
        raise ValueError(f"arrival.fraction must be in (0, 1), got {fraction}")
    if not 0 <= float(new_query_share) <= 1:
        raise ValueError(f"arrival.new_query_share must be in [0, 1], got {new_query_share}")
    docs = sorted(set(doc_ids))
    budget = math.floor(_exact(fraction) * len(docs))
    corpus = set(docs)
    queues = {r: sorted(set(qs), key=lambda q: (arrival_key(seed, q), q)) for r, qs in eval_roles.items()}
    want = {r: math.floor(_exact(new_query_share) * len(qs)) for r, qs in queues.items()}
    taken: dict[str, list[str]] = {r: [] for r in queues}
    arriving: set[str] = set()
    pos = {r: 0 for r in queues}
    while any(len(taken[r]) < want[r] and pos[r] < len(queues[r]) for r in queues):
        for r in queues:  # one query per role per turn
            while len(taken[r]) < want[r] and pos[r] < len(queues[r]):
                q = queues[r][pos[r]]
                pos[r] += 1
                rel = set(relevant.get(q, ())) & corpus
                if rel and len(arriving | rel) <= budget:
                    arriving |= rel
                    taken[r].append(q)
                    break
    rest = sorted((d for d in docs if d not in arriving), key=lambda d: (arrival_key(seed, d), d))
    arriving.update(rest[:budget - len(arriving)])
    return sorted(arriving), taken


def stratum(relevant_docs: Iterable[str], arriving: set[str] | frozenset[str]) -> str:
    """``known``, ``new`` or ``mixed``: where an evaluated query's relevant documents are."""
    rel = set(relevant_docs)
    new = len(rel & arriving)
    return "new" if rel and new == len(rel) else ("known" if new == 0 else "mixed")


def make_arrival_manifest(
    ds: BeirDataset, split_manifest: Mapping, seed: int, fraction: float = 0.2, new_query_share: float = 0.2,
    splits_sha256: str = "",
) -> dict:
    """The arrival manifest of a dataset (record kind ``arrival``): which documents arrive after
    training (every fit sees the others only) and the stratum of every query of each role.
    ``splits_sha256``: the sha256 of the split manifest's file, which the manifest depends on."""
    relevant = ds.relevant()
    eval_roles = {r: split_manifest["ids"][r] for r in ("validation", "test")}
    arriving, taken = arriving_docs(ds.doc_ids, relevant, eval_roles, seed, fraction, new_query_share)
    arr = set(arriving)
    strata = {}
    for role in ROLES:
        by = {s: [] for s in STRATA}
        for q in split_manifest["ids"][role]:
            by[stratum(relevant[q], arr)].append(q)
        strata[role] = by
    train_pos = {d for r in STAGES["final"]["train_roles"] for q in split_manifest["ids"][r] for d in relevant[q]}
    return {
        "dataset": split_manifest["dataset"],
        "seed": int(seed),
        "fraction": float(fraction),
        "new_query_share": float(new_query_share),
        "rule": ARRIVAL_RULE_TEXT,
        "source_fingerprint": split_manifest["source_fingerprint"],
        "split_seed": split_manifest["seed"],
        "splits_sha256": splits_sha256,
        "counts": {
            "docs": len(ds.doc_ids), "arriving": len(arriving), "known": len(ds.doc_ids) - len(arriving),
            "taken": {r: len(v) for r, v in taken.items()},
            "strata": {r: {s: len(v) for s, v in by.items()} for r, by in strata.items()},
            # relevant documents of final-stage training queries that no triplet may hold now
            "arriving_train_positives": len(train_pos & arr),
        },
        "taken": taken,
        "strata": strata,
        "arriving": arriving,
    }


def ids_sha256(ids: Iterable[str]) -> str:
    """sha256 of ids as sorted lines (what a fit saw, comparable across runs)."""
    return hashlib.sha256("\n".join(sorted(ids)).encode("utf-8")).hexdigest()


def known_queries(train_qids: Sequence[str], split_manifest: Mapping, arrival: Mapping | None) -> list[str]:
    """The training queries a fit may see: all of ``train_qids``, but under the arrival manifest
    ``arrival`` not a query that is its own corpus document (``identical_ids``: ArguAna, Quora,
    CQADupStack) when that document arrives after training (its vector is the document's)."""
    if arrival is None:
        return list(train_qids)
    gone = set(split_manifest["identical_ids"]["ids"]) & set(arrival["arriving"])
    return [q for q in train_qids if q not in gone]


def known_docs(doc_ids: Sequence[str], arrival: Mapping | None) -> list[str]:
    """The documents a fit may see: all of ``doc_ids`` (in their order), or those that do not
    arrive under the arrival manifest ``arrival``."""
    if arrival is None:
        return list(doc_ids)
    arr = set(arrival["arriving"])
    return [d for d in doc_ids if d not in arr]


def check_arrival(arrival: Mapping, arrival_path, splits_path) -> None:
    """Refuse an arrival manifest made from another split manifest than ``splits_path``'s."""
    if arrival["splits_sha256"] != sha256_file(splits_path):
        raise ValueError(f"{arrival_path}: made from another split manifest than {splits_path}; "
                         f"delete {arrival_path} and rerun (rule make_arrival)")
