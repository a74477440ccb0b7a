"""Split rule (docs/protocol.md#query-disjoint-split): sha256(f"{seed}:{query_id}") rank, floor(0.6n)/floor(0.2n)/rest."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import pytest

from dive_core import splits
from dive_core.data import BeirDataset, load_beir


def ids(n: int) -> list[str]:
    return [f"q{i}" for i in range(n)]


def reference_split(qids, seed, n_train, n_val):
    """The rule written out independently of dive_core."""
    ranked = sorted(qids, key=lambda q: hashlib.sha256(f"{seed}:{q}".encode()).hexdigest())
    return ranked[:n_train], ranked[n_train:n_train + n_val], ranked[n_train + n_val:]


@pytest.mark.parametrize("n,expected", [
    (0, (0, 0, 0)), (1, (0, 0, 1)), (2, (1, 0, 1)), (3, (1, 0, 2)), (5, (3, 1, 1)),
    (7, (4, 1, 2)), (10, (6, 2, 2)), (11, (6, 2, 3)), (99, (59, 19, 21)), (1109, (665, 221, 223)),
])
def test_counts_disjoint_union(n, expected):
    qids = ids(n)
    s = splits.split_ids(qids, 2027)
    assert tuple(len(s[r]) for r in splits.ROLES) == expected
    assert expected[0] == n * 6 // 10 and expected[1] == n * 2 // 10
    all_ids = s["train"] + s["validation"] + s["test"]
    assert len(all_ids) == len(set(all_ids)) == n
    assert set(all_ids) == set(qids)


@pytest.mark.parametrize("n", [1, 10, 37, 250])
def test_rank_rule_reproduced_independently(n):
    qids = ids(n)
    s = splits.split_ids(qids, 2027)
    tr, va, te = reference_split(qids, 2027, n * 6 // 10, n * 2 // 10)
    assert (s["train"], s["validation"], s["test"]) == (tr, va, te)


def test_known_assignment():
    # computed by hand from sha256("2027:q<i>") for i < 5: floor(3.0)=3 train, 1 validation, 1 test
    s = splits.split_ids(ids(5), 2027)
    ranked = sorted(ids(5), key=lambda q: hashlib.sha256(f"2027:{q}".encode()).hexdigest())
    assert s == {"train": ranked[:3], "validation": ranked[3:4], "test": ranked[4:]}
    assert splits.rank_key(2027, "q0") == hashlib.sha256(b"2027:q0").hexdigest()


def test_deterministic_and_order_independent():
    qids = ids(200)
    a = splits.split_ids(qids, 2027)
    shuffled = qids[:]
    random.Random(5).shuffle(shuffled)
    assert shuffled != qids
    assert splits.split_ids(shuffled, 2027) == a
    assert splits.split_ids(iter(reversed(qids)), 2027) == a
    assert splits.split_ids(qids + qids[:10], 2027) == a  # duplicates do not count twice
    assert splits.split_ids(qids, 2027) == a


def test_different_seed_different_split():
    qids = ids(200)
    a, b = splits.split_ids(qids, 2027), splits.split_ids(qids, 2028)
    assert a["train"] != b["train"]
    assert set(a["test"]) != set(b["test"])
    assert {k: len(v) for k, v in a.items()} == {k: len(v) for k, v in b.items()}


@pytest.mark.parametrize("fr", [(0.6, 0.2, 0.1), (0.5, 0.5, 0.5), (0.6, 0.4), (1.2, -0.2, 0.0)])
def test_bad_fractions(fr):
    with pytest.raises(ValueError, match="fractions"):
        splits.split_ids(ids(10), 2027, fr)


def test_other_fractions_exact_floor():
    # floor(0.7 * 90) is 63; in binary floating point 0.7 * 90 = 62.99999999999999
    s = splits.split_ids(ids(90), 2027, (0.7, 0.1, 0.2))
    assert (len(s["train"]), len(s["validation"]), len(s["test"])) == (63, 9, 18)
    s = splits.split_ids(ids(10), 1, (0.5, 0.5, 0.0))
    assert (len(s["train"]), len(s["validation"]), len(s["test"])) == (5, 5, 0)


# --------------------------------------------------------------------------- manifest


def _synthetic_dataset(seed: int = 2027) -> tuple[BeirDataset, dict]:
    """Ten judged queries j0..j9 (one of them judged only in train.tsv, one with a score-0 row
    in test.tsv and a score-1 row in train.tsv) plus q_zero (only score-0 rows) and q_unjudged.
    Documents are assigned after the split is computed so that the overlap is known by hand:
    validation: 1 of 2 seen (shares a doc with train);
    test: 2 of 2 seen w.r.t. train + validation (one via train, one via validation)."""
    judged = [f"j{i}" for i in range(10)]
    tr, va, te = reference_split(judged, seed, 6, 2)
    test_rows: dict[str, dict[str, int]] = {}
    train_rows: dict[str, dict[str, int]] = {}
    for i, q in enumerate(tr):
        test_rows[q] = {"shared_t": 1, f"own_{q}": 2}
    test_rows[va[0]] = {"shared_t": 1}          # seen (train positive)
    test_rows[va[1]] = {"shared_v": 1, "own_v": 0}  # unseen for validation
    test_rows[te[0]] = {"shared_t": 2}          # seen via train
    test_rows[te[1]] = {"shared_v": 1}          # seen via validation only
    # a query judged through two files: score 0 in test.tsv, score 1 in train.tsv
    q_two = tr[0]
    test_rows[q_two] = {"zero_doc": 0}
    train_rows[q_two] = {"shared_t": 1, "zero_doc": 1}
    test_rows["q_zero"] = {"shared_t": 0, "own_v": 0}  # only score 0: not judged
    docs = {d for rows in (test_rows, train_rows) for r in rows.values() for d in r} | {"other"}
    corpus = {d: {"title": "", "text": d} for d in sorted(docs)}
    queries = {q: q for q in judged + ["q_zero", "q_unjudged"]}
    ds = BeirDataset(Path("."), corpus, queries, {"test": test_rows, "train": train_rows},
                     {"corpus.jsonl": "c" * 64})
    return ds, {"train": tr, "validation": va, "test": te, "q_two": q_two}


def test_make_manifest_synthetic():
    ds, exp = _synthetic_dataset()
    m = splits.make_manifest(ds, "toy", 2027)
    assert m["ids"] == {"train": exp["train"], "validation": exp["validation"], "test": exp["test"]}
    assert m["counts"] == {"train": 6, "validation": 2, "test": 2}
    assert m["n_judged"] == 10
    all_ids = set(sum(m["ids"].values(), []))
    assert "q_zero" not in all_ids and "q_unjudged" not in all_ids
    assert m["seed"] == 2027
    assert m["fractions"] == {"train": 0.6, "validation": 0.2, "test": 0.2}
    assert m["source_fingerprint"] == {"corpus.jsonl": "c" * 64}
    assert "sha256" in m["rule"] and "floor" in m["rule"]
    ov = m["document_overlap"]
    va, te = exp["validation"], exp["test"]
    assert ov["validation"]["stage"] == "select"
    assert ov["validation"]["reference_roles"] == ["train"]
    assert (ov["validation"]["n_queries"], ov["validation"]["n_seen"], ov["validation"]["n_unseen"]) == (2, 1, 1)
    assert ov["validation"]["seen_ids"] == [va[0]]
    assert ov["test"]["stage"] == "final"
    assert ov["test"]["reference_roles"] == ["train", "validation"]
    assert (ov["test"]["n_queries"], ov["test"]["n_seen"], ov["test"]["n_unseen"]) == (2, 2, 0)
    assert ov["test"]["seen_ids"] == [te[0], te[1]]
    # role qrels: every row of the role's queries from every qrels file, score-0 rows included
    assert m["qrels"]["validation"][va[1]] == {"own_v": 0, "shared_v": 1}
    assert m["qrels"]["train"][exp["q_two"]] == {"shared_t": 1, "zero_doc": 1}
    assert splits.role_qrels(m, ["validation", "test"]) == {
        va[0]: {"shared_t": 1}, va[1]: {"own_v": 0, "shared_v": 1},
        te[0]: {"shared_t": 2}, te[1]: {"shared_v": 1}}
    assert splits.train_queries(m, "select") == exp["train"]
    assert splits.train_queries(m, "final") == exp["train"] + exp["validation"]
    assert splits.eval_queries(m, "select") == exp["validation"]
    assert splits.eval_queries(m, "final") == exp["test"]


def test_manifest_from_files(tmp_path):
    """Judged queries read from qrels files: a score>0 row in any file counts."""
    root = tmp_path / "ds"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(f'{{"_id": "d{i}", "text": "t"}}\n' for i in range(4)))
    (root / "queries.jsonl").write_text("".join(f'{{"_id": "q{i}", "text": "t"}}\n' for i in range(6)))
    (root / "qrels" / "test.tsv").write_bytes(
        b"query-id\tcorpus-id\tscore\r\nq0\td0\t1\r\nq1\td1\t0\r\nq2\td2\t0\r\nq3\td3\t2\r\n")
    (root / "qrels" / "train.tsv").write_bytes(b"query-id\tcorpus-id\tscore\nq1\td0\t1\nq4\td1\t0\n")
    m = splits.make_manifest(load_beir(root), "toy", 7, (0.34, 0.34, 0.32))  # every role non-empty
    assert sorted(sum(m["ids"].values(), [])) == ["q0", "q1", "q3"]
    assert m["counts"] == {"train": 1, "validation": 1, "test": 1}
    q1_role = next(r for r in splits.ROLES if "q1" in m["ids"][r])
    assert m["qrels"][q1_role]["q1"] == {"d0": 1, "d1": 0}


def test_shared_scifact_sanity_counts(shared_scifact):
    m = splits.make_manifest(load_beir(shared_scifact), "scifact", 2027)
    assert m["counts"] == {"train": 665, "validation": 221, "test": 223}
    assert m["document_overlap"]["test"]["n_seen"] == 163
    assert m["document_overlap"]["test"]["n_queries"] == 223


def _numbered_collection() -> BeirDataset:
    """Queries and documents numbered independently ("1", "2", ...), except query "q7", which
    is also corpus document "q7" with the same text (an ArguAna-style item)."""
    corpus = {str(i): {"title": "", "text": f"document {i}"} for i in range(1, 30)}
    corpus["q7"] = {"title": "", "text": "the q7 argument"}
    queries = {str(i): f"query {i}" for i in range(1, 25)}
    queries["q7"] = "the  q7 argument "
    qrels = {q: {str((int(q) % 29) + 1): 1} for q in queries if q != "q7"}
    qrels["3"] = {"3": 1}  # query 3's relevant document is document 3: unrelated items
    qrels["q7"] = {"5": 1}
    qrels["20"] = {"q7": 1}  # a training query whose positive is the query q7 itself
    return BeirDataset(Path("."), corpus, queries, {"test": qrels}, {})


def test_identical_ids_rule_by_registry_key():
    ds = _numbered_collection()
    qids = list(ds.queries)
    # key absent: only same id AND same text ("3" is a corpus id, but another item)
    assert splits.identical_ids(ds, qids, None)["ids"] == ["q7"]
    # queries are corpus documents (ArguAna, Quora, CQADupStack): every id that is a corpus id
    assert splits.identical_ids(ds, qids, True)["ids"] == sorted(q for q in qids if q in ds.corpus)
    assert splits.identical_ids(ds, qids, False)["ids"] == []


def test_reversed_pair_makes_a_query_seen():
    relevant = {"20": {"q7"}, "q7": {"5"}, "4": {"6"}}
    # q7's relevant doc "5" is no training positive, but q7 itself is one (of query 20)
    assert splits.seen_queries(relevant, ["20"], ["q7", "4"], self_ids=["q7"]) == ["q7"]
    assert splits.seen_queries(relevant, ["20"], ["q7", "4"]) == []
    ds = _numbered_collection()
    for seed in range(200):  # a split with q7 a test query and query 20 a training query
        m = splits.make_manifest(ds, "numbered", seed=seed, queries_in_corpus=None)
        if "q7" in m["ids"]["test"] and "20" in splits.train_queries(m, "final"):
            break
    assert m["identical_ids"]["ids"] == ["q7"] and m["identical_ids"]["rule"] == "same id and same text"
    assert "q7" in m["document_overlap"]["test"]["seen_ids"]
    assert m["document_overlap"]["test"]["n_seen_reversed"] == 1
    plain = splits.make_manifest(ds, "numbered", seed=seed, queries_in_corpus=False)
    assert "q7" not in plain["document_overlap"]["test"]["seen_ids"]
