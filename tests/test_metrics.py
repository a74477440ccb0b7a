"""Metrics against trec_eval's own test files and hand-computed MRR@10 (search: test_retrieval.py)."""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from pathlib import Path

import pytest

from dive_core.metrics import METRICS, evaluate, mean_metrics

# trec_eval's own test files, shipped with the repository (source and licence in its README.md)
TREC = Path(__file__).resolve().parent / "data" / "trec_eval"
TREC_SHA256 = {
    "qrels.test": "6c44a070a10bfb14b123cadc597227fc63c1acec109bc6d1e5a6bc4763906698",
    "results.test": "69019319f6cb9ce861b4ad08d90898170d3d2b27da580fb3cba59e557ff2fd20",
    "results.trunc": "4a85d6b7b21b69b59728fa0aa7452199640f70d96529b86d0cca8f9c9292e438",
    "qrels.rel_level": "4430ec2026fcb964851e03bd73df21daf27e7ef4783d20ad63634182bc9df843",
    "out.test": "eec0abb32bfb99fa78d239a3440b2c6cb01b06dead7e2338fd75b5c280d9eba0",
    "out.test.a": "8fd8f08c0b5c9064dc955263dc98ceed34b6d7421ebef363be0043256ccb1d68",
    "out.test.aq": "6e884d1ab060f5cede2e85490fb1f62e6ca664b8da99e7a8dfffeedefe9433eb",
    "out.test.aqc": "43b10538ec11570b8e1d5c12d616aff91bac7c2e1d7efb8b67388dee609eceb0",
    "out.test.aql": "8aaf42d1f0261a8e3f5fa0de2be7a8c46df719617565a3667482eaced620ff91",
}

OURS = {"ndcg_cut_10": "ndcg@10", "recall_10": "recall@10", "recall_100": "recall@100"}


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = defaultdict(dict)
    for line in path.read_text().splitlines():
        if line.strip():
            q, _, d, r = line.split()
            qrels[q][d] = int(r)
    return dict(qrels)


def read_run(path: Path) -> dict[str, dict[str, float]]:
    run: dict[str, dict[str, float]] = defaultdict(dict)
    for line in path.read_text().splitlines():
        if line.strip():
            q, _, d, _rank, score, _tag, *_junk = line.split()  # trec_eval ignores text after the tag
            assert d not in run[q]
            run[q][d] = float(score)
    return dict(run)


def read_out(path: Path) -> dict[tuple[str, str], str]:
    """``{(measure, query or 'all'): value string}`` of a trec_eval output file."""
    out = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3:
            out[(parts[0], parts[1])] = parts[2]
    return out


@pytest.fixture(scope="module")
def trec():
    qrels, run = read_qrels(TREC / "qrels.test"), read_run(TREC / "results.test")
    return qrels, run, evaluate(qrels, run)


def test_shipped_trec_eval_files_are_the_upstream_ones():
    """Byte-identical to trec_eval's test/ directory (tests/data/trec_eval/README.md): no line
    ending or whitespace change slipped in when they were copied or checked out."""
    got = {f: hashlib.sha256((TREC / f).read_bytes()).hexdigest() for f in TREC_SHA256}
    assert got == TREC_SHA256


def test_trec_eval_files_look_as_documented():
    qrels, run = read_qrels(TREC / "qrels.test"), read_run(TREC / "results.test")
    assert sorted(qrels) == sorted(run) == ["301", "302", "303"]
    assert [len(run[q]) for q in ("301", "302", "303")] == [500, 500, 500]
    # the run does contain score ties, so the tie rule is exercised
    assert any(len(set(r.values())) < len(r) for r in run.values())


@pytest.mark.parametrize("measure", sorted(OURS))
def test_per_query_matches_out_test_aq(trec, measure):
    _, _, per_query = trec
    out = read_out(TREC / "out.test.aq")
    for q in ("301", "302", "303"):
        assert f"{per_query[q][OURS[measure]]:.4f}" == out[(measure, q)], (measure, q)


@pytest.mark.parametrize("measure", sorted(OURS))
def test_mean_matches_out_test_a(trec, measure):
    _, _, per_query = trec
    mean = mean_metrics(per_query)
    for name in ("out.test.a", "out.test.aq"):
        out = read_out(TREC / name)
        assert out[("num_q", "all")] == "3"
        assert f"{mean[OURS[measure]]:.4f}" == out[(measure, "all")], (name, measure)


@pytest.mark.parametrize("measure", sorted(OURS))
def test_truncated_run_matches_out_test_aqc(measure):
    """`trec_eval -c -q qrels.test results.trunc`: results.trunc has no line for query 302, which
    trec_eval (-c) averages in as 0 over all judged queries, as mean_metrics does with evaluate's
    zero row for a query without results."""
    qrels, run = read_qrels(TREC / "qrels.test"), read_run(TREC / "results.trunc")
    assert sorted(run) == ["301", "303"]
    per_query = evaluate(qrels, run)
    out = read_out(TREC / "out.test.aqc")
    for q in ("301", "303"):
        assert f"{per_query[q][OURS[measure]]:.4f}" == out[(measure, q)], (measure, q)
    assert per_query["302"][OURS[measure]] == 0.0 and (measure, "302") not in out
    assert out[("num_q", "all")] == "3"
    assert f"{mean_metrics(per_query)[OURS[measure]]:.4f}" == out[(measure, "all")]


def test_readme_ndcg_figures(trec):
    _, _, per_query = trec
    assert [round(per_query[q]["ndcg@10"], 4) for q in ("301", "302", "303")] == [0.1518, 0.7530, 0.0]
    assert round(mean_metrics(per_query)["ndcg@10"], 4) == 0.3016


def test_mrr_at_10_is_recip_rank_cut_at_10(trec):
    _, run, per_query = trec
    out = read_out(TREC / "out.test.aq")
    # first relevant doc within the top 10: identical to trec_eval's uncut recip_rank
    assert f"{per_query['301']['mrr@10']:.4f}" == out[("recip_rank", "301")] == "0.1667"
    assert f"{per_query['302']['mrr@10']:.4f}" == out[("recip_rank", "302")] == "1.0000"
    # 303's first relevant doc is at rank 19 (recip_rank 0.0526): 0 after the cut at 10
    assert out[("recip_rank", "303")] == "0.0526"
    assert per_query["303"]["mrr@10"] == 0.0


# --------------------------------------------------------------------------- hand-computed


def test_mrr_hand_computed():
    qrels = {"a": {"d3": 1}, "b": {"d1": 0, "d9": 2}, "c": {"x": 1}}
    run = {
        "a": {"d1": 0.9, "d2": 0.8, "d3": 0.7, "d4": 0.1},      # rank 3 -> 1/3
        "b": {f"e{i}": 1.0 - i / 100 for i in range(10)} | {"d9": 0.5, "d1": 2.0},  # d9 rank 12
        "c": {"x": 0.1},                                       # rank 1 -> 1
    }
    pq = evaluate(qrels, run)
    assert pq["a"]["mrr@10"] == pytest.approx(1 / 3)
    assert pq["b"]["mrr@10"] == 0.0
    assert pq["c"]["mrr@10"] == 1.0
    assert pq["c"]["ndcg@10"] == 1.0 and pq["c"]["recall@10"] == 1.0


def test_ties_broken_by_doc_id_descending():
    run = {"q": {"a": 1.0, "b": 1.0, "c": 0.5}}
    # tie a/b at 1.0: trec_eval ranks "b" before "a"
    assert evaluate({"q": {"a": 1}}, run)["q"]["mrr@10"] == 0.5
    assert evaluate({"q": {"b": 1}}, run)["q"]["mrr@10"] == 1.0
    # nDCG with the same tie: relevant "a" at rank 2 -> 1/log2(3)
    assert evaluate({"q": {"a": 1}}, run)["q"]["ndcg@10"] == pytest.approx(1 / math.log2(3))


def test_tie_at_the_cutoff():
    # 9 clear leaders, then "d_a" and "d_z" tied at the 10th place: "d_z" wins the tie (id
    # descending), so a relevant "d_a" is at rank 11 -> 0, a relevant "d_z" at rank 10 -> 0.1
    run = {"q": {f"top{i}": 10.0 - i for i in range(9)} | {"d_a": 0.5, "d_z": 0.5}}
    assert evaluate({"q": {"d_a": 1}}, run)["q"]["mrr@10"] == 0.0
    assert evaluate({"q": {"d_z": 1}}, run)["q"]["mrr@10"] == pytest.approx(0.1)
    assert evaluate({"q": {"d_a": 1}}, run)["q"]["recall@10"] == 0.0
    assert evaluate({"q": {"d_z": 1}}, run)["q"]["recall@10"] == 1.0
    assert evaluate({"q": {"d_a": 1}}, run)["q"]["recall@100"] == 1.0


def test_graded_ndcg_and_recall_denominator():
    qrels = {"q": {"a": 2, "b": 1, "c": 1, "z": 0}}
    run = {"q": {"b": 3.0, "a": 2.0, "x": 1.0}}
    pq = evaluate(qrels, run)["q"]
    dcg = 1 / math.log2(2) + 2 / math.log2(3)
    idcg = 2 / math.log2(2) + 1 / math.log2(3) + 1 / math.log2(4)
    assert pq["ndcg@10"] == pytest.approx(dcg / idcg)
    assert pq["recall@10"] == pytest.approx(2 / 3)  # c was never retrieved: still counted
    assert pq["mrr@10"] == 1.0


def test_queries_without_retrieved_docs_score_zero():
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"c": 1}}
    run = {"q1": {"a": 1.0}, "q3": {}, "unjudged": {"a": 1.0}}
    pq = evaluate(qrels, run)
    assert sorted(pq) == ["q1", "q2", "q3"]
    assert pq["q1"] == {m: 1.0 for m in METRICS}
    assert pq["q2"] == {m: 0.0 for m in METRICS}
    assert pq["q3"] == {m: 0.0 for m in METRICS}
    assert mean_metrics(pq)["ndcg@10"] == pytest.approx(1 / 3)
    assert mean_metrics(pq, ["q1"])["recall@10"] == 1.0
    assert all(math.isnan(v) for v in mean_metrics(pq, []).values())
