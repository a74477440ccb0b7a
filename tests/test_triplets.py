"""Shared deterministic triplets: exclusions, counts, determinism, hard negatives, TSV I/O."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest

from dive_core import triplets as T

DOCS = [f"d{i:02d}" for i in range(40)] + ["qx"]  # "qx" is also a query id (ArguAna-style)
QRELS = {
    "q1": {"d01": 1, "d02": 2, "d03": 0},   # d03 judged non-relevant: allowed as a negative
    "q2": {"d05": 1},
    "qx": {"d07": 1},                       # query id equals a corpus id
    "q3": {"d09": 0},                       # no positive: no triplets
    "q4": {"d10": 1, "d11": 1, "d12": 1},
}
TRAIN = ["q1", "q2", "qx", "q3", "q4"]


def rows(t: T.Triplets):
    return list(zip(t.query_ids, t.pos_ids, t.neg_ids, t.pos_scores.tolist(), t.neg_scores.tolist()))


def test_deterministic():
    a = T.build_triplets(QRELS, TRAIN, DOCS, seed=2027, num_negatives=5)
    b = T.build_triplets(QRELS, TRAIN, DOCS, seed=2027, num_negatives=5)
    assert rows(a) == rows(b)
    # 1 query x 2 positives + 1 + 1 + 3 positives = 7 pairs x 5 negatives
    assert len(a) == 35
    assert T.triplet_stats(a)["positive_pairs"] == 7
    assert T.triplet_stats(a)["queries"] == 4


def test_different_seed_different_negatives():
    a = T.build_triplets(QRELS, TRAIN, DOCS, seed=2027, num_negatives=5)
    b = T.build_triplets(QRELS, TRAIN, DOCS, seed=2028, num_negatives=5)
    assert a.neg_ids != b.neg_ids
    assert (a.query_ids, a.pos_ids) == (b.query_ids, b.pos_ids)


def test_independent_of_query_and_corpus_order():
    a = T.build_triplets(QRELS, TRAIN, DOCS, seed=2027, num_negatives=5)
    rng = random.Random(3)
    train, docs = TRAIN[:], DOCS[:]
    rng.shuffle(train)
    rng.shuffle(docs)
    assert train != TRAIN and docs != DOCS
    qrels_rev = {q: dict(reversed(list(r.items()))) for q, r in reversed(list(QRELS.items()))}
    b = T.build_triplets(qrels_rev, train, docs, seed=2027, num_negatives=5)
    assert rows(a) == rows(b)
    # listing a query twice does not duplicate its triplets
    c = T.build_triplets(QRELS, TRAIN + ["q2"], DOCS + ["d00"], seed=2027, num_negatives=5)
    assert rows(c) == rows(a)


def test_exclusions_and_counts():
    for seed in range(30):
        t = T.build_triplets(QRELS, TRAIN, DOCS, seed=seed, num_negatives=10)
        per_pair: dict[tuple[str, str], list[str]] = {}
        for q, p, n, ps, ns in rows(t):
            assert QRELS[q][p] > 0 and ps == QRELS[q][p]
            assert QRELS[q].get(n, 0) <= 0, (q, n)  # never a judged-relevant doc
            assert n != q                            # never the query itself
            assert n in DOCS
            assert ns == 0.0
            per_pair.setdefault((q, p), []).append(n)
        assert set(per_pair) == {("q1", "d01"), ("q1", "d02"), ("q2", "d05"), ("qx", "d07"),
                                 ("q4", "d10"), ("q4", "d11"), ("q4", "d12")}
        for negs in per_pair.values():
            assert len(negs) == 10 and len(set(negs)) == 10


def test_query_id_in_corpus_is_excluded_even_when_likely():
    # tiny corpus: without the exclusion "qx" would be drawn for almost every seed
    docs = ["qx", "a", "b", "c", "pos"]
    for seed in range(20):
        t = T.build_triplets({"qx": {"pos": 1}}, ["qx"], docs, seed=seed, num_negatives=3)
        assert len(t) == 3 and set(t.neg_ids) == {"a", "b", "c"}


def test_small_corpus_gives_all_allowed_docs():
    docs = ["p1", "p2", "n1", "n2", "q"]
    t = T.build_triplets({"q": {"p1": 1, "p2": 1, "n2": 0}}, ["q"], docs, seed=1, num_negatives=10)
    assert Counter(zip(t.pos_ids, t.neg_ids)) == Counter(
        {("p1", "n1"): 1, ("p1", "n2"): 1, ("p2", "n1"): 1, ("p2", "n2"): 1})


def test_negative_scores_of_judged_nonrelevant_docs():
    docs = ["p", "bad", "x"]
    t = T.build_triplets({"q": {"p": 3, "bad": -1}}, ["q"], docs, seed=0, num_negatives=2)
    assert dict(zip(t.neg_ids, t.neg_scores.tolist())) == {"bad": -1.0, "x": 0.0}
    assert t.pos_scores.tolist() == [3.0, 3.0]


def test_no_positives_is_an_error():
    with pytest.raises(ValueError, match="no triplets"):
        T.build_triplets({"q3": {"d09": 0}}, ["q3"], DOCS, seed=0)
    with pytest.raises(ValueError, match="mode"):
        T.build_triplets(QRELS, TRAIN, DOCS, seed=0, mode="semi")
    with pytest.raises(ValueError, match="hard"):
        T.build_triplets(QRELS, TRAIN, DOCS, seed=0, mode="hard")


def test_hard_negatives_from_candidates():
    cands = {"q1": ["d01", "d20", "d03", "d21", "d02", "d22", "d23", "d24", "q1"],
             "q2": ["d05", "d30", "d31"]}
    t = T.build_triplets(QRELS, ["q1", "q2"], DOCS, seed=2027, num_negatives=4, mode="hard",
                         hard_candidates=cands)
    # candidates minus positives and the query id itself (d03 is judged 0: allowed)
    allowed_q1 = {"d20", "d03", "d21", "d22", "d23", "d24"}
    for q, p, n, *_ in rows(t):
        if q == "q1":
            assert n in allowed_q1 and n not in {"d01", "d02"}
    negs = {(q, p): [n for q2, p2, n, *_ in rows(t) if (q2, p2) == (q, p)] for q, p in
            [("q1", "d01"), ("q1", "d02"), ("q2", "d05")]}
    assert all(len(v) == 4 and len(set(v)) == 4 for v in negs.values())
    # q2 has only two usable candidates: both are used, topped up with two random corpus docs
    assert {"d30", "d31"} <= set(negs[("q2", "d05")])
    extra = set(negs[("q2", "d05")]) - {"d30", "d31"}
    assert len(extra) == 2 and all(d in DOCS and d != "d05" for d in extra)
    # candidate order does not matter, and the draw is deterministic
    shuffled = {q: list(reversed(c)) for q, c in cands.items()}
    t2 = T.build_triplets(QRELS, ["q2", "q1"], DOCS, seed=2027, num_negatives=4, mode="hard",
                          hard_candidates=shuffled)
    assert rows(t2) == rows(t)


def test_hard_negatives_exclude_query_id():
    cands = {"qx": ["qx", "d07", "d08"]}
    t = T.build_triplets(QRELS, ["qx"], DOCS, seed=5, num_negatives=3, mode="hard",
                         hard_candidates=cands)
    assert "d08" in t.neg_ids and "qx" not in t.neg_ids and "d07" not in t.neg_ids
    assert len(t) == 3


def test_hard_mode_without_candidates_for_a_query_is_random():
    t = T.build_triplets(QRELS, ["q2"], DOCS, seed=5, num_negatives=6, mode="hard",
                         hard_candidates={})
    assert len(t) == 6 and len(set(t.neg_ids)) == 6 and "d05" not in t.neg_ids


def test_write_read_round_trip(tmp_path):
    t = T.build_triplets(QRELS, TRAIN, DOCS, seed=2027, num_negatives=3)
    p = tmp_path / "sub" / "triplets.tsv"
    T.write_triplets(p, t)
    lines = p.read_text().splitlines()
    assert lines[0] == "query_id\tpos_id\tneg_id\tpos_score\tneg_score"
    assert len(lines) == 1 + len(t) == 1 + 21
    assert lines[1].split("\t")[:2] == [t.query_ids[0], t.pos_ids[0]]
    back = T.read_triplets(p)
    assert rows(back) == rows(t)
    assert back.pos_scores.dtype == np.float32 and back.neg_scores.dtype == np.float32
    assert [x.name for x in p.parent.iterdir()] == ["triplets.tsv"]


def test_read_malformed_line(tmp_path):
    p = tmp_path / "t.tsv"
    p.write_text("query_id\tpos_id\tneg_id\tpos_score\tneg_score\nq\tp\tn\t1\t0\nq\tp\tn2\t1\n")
    with pytest.raises(ValueError, match=r"t\.tsv:3: expected 5 columns, got 4"):
        T.read_triplets(p)
    p.write_text("query_id\tpos_id\tneg_id\tpos_score\tneg_score\nq\tp\tn\t1\t0\nq\tp\tn\tone\t0\n")
    with pytest.raises(ValueError, match=r"t\.tsv:3: scores must be numbers"):
        T.read_triplets(p)
    p.write_text("q\tp\tn\t1\t0\n")
    with pytest.raises(ValueError, match=r"t\.tsv:1: expected header"):
        T.read_triplets(p)


def test_cap_keeps_a_seeded_subset_of_each_querys_triplets():
    full = T.build_triplets(QRELS, TRAIN, DOCS, seed=2027, num_negatives=5)
    capped = T.build_triplets(QRELS, TRAIN, DOCS, seed=2027, num_negatives=5, max_per_query=4)
    per_query = Counter(capped.query_ids)
    # q1: 10 triplets -> 4, q2: 5 -> 4, qx: 5 -> 4, q4: 15 -> 4
    assert per_query == {"q1": 4, "q2": 4, "qx": 4, "q4": 4}
    assert set(rows(capped)) <= set(rows(full))
    kept = [r for r in rows(full) if r in set(rows(capped))]
    assert rows(capped) == kept  # file order kept
    again = T.build_triplets(QRELS, list(reversed(TRAIN)), DOCS, seed=2027, num_negatives=5, max_per_query=4)
    assert rows(again) == rows(capped)
    # a cap above every query's count changes nothing; no cap is the paper's protocol
    assert rows(T.build_triplets(QRELS, TRAIN, DOCS, 2027, 5, max_per_query=100)) == rows(full)
    with pytest.raises(ValueError, match="max_per_query"):
        T.build_triplets(QRELS, TRAIN, DOCS, 2027, 5, max_per_query=0)


def test_doc_disjoint_triplets_never_contain_an_excluded_document():
    excluded = {"d02", "d10"} | {f"d{i:02d}" for i in range(20, 40)}
    t = T.build_triplets(QRELS, TRAIN, DOCS, seed=2027, num_negatives=5, excluded_docs=excluded)
    assert not (set(t.pos_ids) | set(t.neg_ids)) & excluded
    # the positive pairs (q1, d02) and (q4, d10) are dropped, the others kept
    assert sorted(set(zip(t.query_ids, t.pos_ids))) == [("q1", "d01"), ("q2", "d05"), ("q4", "d11"),
                                                         ("q4", "d12"), ("qx", "d07")]
    assert len(t) == 5 * 5


def test_self_ids_decide_the_never_a_negative_exclusion():
    # "qx" is a query id and a corpus id; with self_ids = {} it is another item, so it may be drawn
    drawn = Counter()
    for seed in range(40):
        t = T.build_triplets(QRELS, ["qx"], DOCS, seed=seed, num_negatives=20, self_ids=set())
        drawn.update(t.neg_ids)
    assert drawn["qx"] > 0
    for seed in range(40):
        for self_ids in ({"qx"}, None):  # listed, or the older rule (every id that is a corpus id)
            t = T.build_triplets(QRELS, ["qx"], DOCS, seed=seed, num_negatives=20, self_ids=self_ids)
            assert "qx" not in t.neg_ids
