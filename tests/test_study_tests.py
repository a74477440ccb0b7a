"""The dynamics table's loss terms and the paired tests of the ablation and heads studies, each
against small hand-computed examples (docs/protocol.md#studies)."""

from __future__ import annotations

import pytest

from dive_core import report
from dive_core.records import run_key
from dive_core.studies import shared
from dive_core.studies.ablation import ablation_study
from dive_core.studies.dynamics import dynamics_study
from dive_core.studies.heads import heads_study

QUERIES = [f"q{i:02d}" for i in range(1, 21)]  # 20 queries: q01-q10 seen, q11-q20 unseen
SEEN = set(QUERIES[:10])


def result(method, dataset, ndcg, seed=2027, heads=4, stage="select", role="validation"):
    return {"dataset": dataset, "backbone": "minilm", "method": method, "method_type": "dive", "k": 64,
            "stage": stage, "seed": seed, "role": role, "n_queries": len(QUERIES),
            "metrics": {"ndcg@10": ndcg, "recall@10": ndcg, "recall@100": 1.0, "mrr@10": ndcg},
            "subsets": {"seen": {"n_queries": 10, "metrics": {"ndcg@10": ndcg}},
                        "unseen": {"n_queries": 10, "metrics": {"ndcg@10": ndcg}}},
            "timings": {"train_seconds": 1.0}, "config": {"hparams": {"heads": heads}}}


def runs(tmp_path, scores, heads=None):
    """Result records and per-query TSVs: ``scores``: ``{(dataset, method, seed): (seen score, unseen
    score)}``, every seen query (q01-q10) scoring the first, every unseen one (q11-q20) the second."""
    from dive_core.evaluation import write_per_query

    results, per_query = [], {}
    for (ds, method, seed), (s, u) in scores.items():
        r = result(method, ds, (s + u) / 2, seed=seed, heads=(heads or {}).get(method, 4))
        path = tmp_path / f"{ds}-{method}-{seed}.tsv"
        write_per_query(path, {q: {"ndcg@10": s if q in SEEN else u, "recall@10": 0.5, "recall@100": 1.0,
                                   "mrr@10": 0.5, "seen": int(q in SEEN)} for q in QUERIES})
        results.append(r)
        per_query[run_key(r)] = str(path)
    return results, per_query


def ctx(methods, datasets, **kw):
    return shared.StudyContext(name="t", title="t", methods=methods, datasets=datasets, **kw)


def p_of(a, b, n):
    """The randomization test's p for ``n`` queries that all differ by a - b (report's own routine)."""
    return f"{report.paired_randomization([a] * n, [b] * n):.4f}"


# -- A: the dynamics table gives each weighted loss term at the first and the last epoch --------
def test_dynamics_table_gives_each_loss_term_at_first_and_last_epoch_and_their_ratio(tmp_path):
    logs = {}
    # epoch 2 holds other values: the table reads epoch 1 and the last epoch (3), nothing between
    for seed, epochs in ((2027, [(0.4, 0.02, 0.01), (9.0, 9.0, 9.0), (0.04, 0.018, 0.012)]),
                         (2028, [(0.2, 0.04, 0.03), (9.0, 9.0, 9.0), (0.02, 0.022, 0.008)])):
        p = tmp_path / f"{seed}.tsv"
        p.write_text("epoch\tphase\ttriplet\tview\tgeo\trho\ttotal\tseconds\n" + "".join(
            f"{i + 1}\ttrain\t{t}\t{v}\t{g}\t0.5\t{t + v + g}\t1.0\n" for i, (t, v, g) in enumerate(epochs)))
        logs[seed] = str(p)
    results = [result("dive", "a", 0.5, seed=s, stage="final", role="test") for s in logs]
    out = dynamics_study(results, ctx(["dive"], ["a"], train_logs={run_key(r): logs[r["seed"]] for r in results}))
    lines = out.markdown.splitlines()
    assert "### DIVE's weighted loss terms at the first and the last epoch" in lines
    assert "| backbone | dataset | term | first epoch | last epoch | last / first |" in lines
    # mean over the two seeds: triplet (0.4 + 0.2) / 2 = 0.3 -> (0.04 + 0.02) / 2 = 0.03, ratio 0.1;
    # view 0.03 -> 0.02, ratio 2/3; geo 0.02 -> 0.01, ratio 0.5
    assert [l for l in lines if l.startswith("| minilm | a | ") and l.split(" | ")[2] in ("triplet", "view", "geo")] \
        == ["| minilm | a | triplet | 0.3 | 0.03 | 0.1 |",
            "| minilm | a | view | 0.03 | 0.02 | 0.6667 |",
            "| minilm | a | geo | 0.02 | 0.01 | 0.5 |"]
    # the TSV rows carry the same numbers, one row per (backbone, dataset)
    (row,) = out.rows
    assert [row[f"{t}_{c}"] for t in ("triplet", "view", "geo") for c in ("first_epoch", "last_epoch", "last_over_first")] \
        == pytest.approx([0.3, 0.03, 0.1, 0.03, 0.02, 2 / 3, 0.02, 0.01, 0.5])
    report.write_tsv(tmp_path / "dynamics.tsv", out.rows)
    header, values = (tmp_path / "dynamics.tsv").read_text().splitlines()
    cells = dict(zip(header.split("\t"), values.split("\t")))
    assert (cells["triplet_first_epoch"], cells["triplet_last_epoch"], cells["triplet_last_over_first"]) \
        == ("0.3", "0.03", "0.1")


def test_dynamics_leaves_out_a_term_a_log_lacks(tmp_path):
    p = tmp_path / "log.tsv"
    p.write_text("epoch\tphase\ttriplet\tview\trho\ttotal\tseconds\n1\ttrain\t0.5\t0.1\t0.5\t0.6\t1.0\n"
                 "2\ttrain\t0.25\t0.1\t0.05\t0.35\t1.0\n")
    r = result("dive", "a", 0.5, stage="final", role="test")
    out = dynamics_study([r], ctx(["dive"], ["a"], train_logs={run_key(r): str(p)}))
    terms = [l.split(" | ")[2:] for l in out.markdown.splitlines() if l.startswith("| minilm | a | ")][1:]
    assert terms == [["triplet", "0.5", "0.25", "0.5 |"], ["view", "0.1", "0.1", "1 |"]]
    assert "geo_first_epoch" not in out.rows[0]


# -- B: each ablation variant and each head count against the configured DIVE, per dataset -------
def test_ablation_tests_each_variant_against_full_dive_per_dataset(tmp_path):
    scores = {("a", "dive", 2027): (0.4, 0.4), ("a", "dive", 2028): (0.6, 0.6),  # per query: mean of seeds 0.5
              ("a", "dive-noview", 2027): (0.6, 0.5),       # +0.1 on seen, 0 on unseen: Δ +0.05 over 20
              ("a", "dive-softplus", 2027): (0.3, 0.3),     # -0.2 on every query
              ("b", "dive", 2027): (0.7, 0.7),
              ("b", "dive-noview", 2027): (0.7, 0.7),       # equal: Δ 0, p 1
              ("b", "dive-softplus", 2027): (0.5, 0.5)}
    results, per_query = runs(tmp_path, scores)
    out = ablation_study(results, ctx(["dive-softplus", "dive-noview", "dive"], ["a", "b"], per_query=per_query))
    lines = out.markdown.splitlines()
    assert "### Each variant against dive (dive)" in lines
    assert any(l.startswith("Each variant (one change to dive, every other setting dive's) against dive on the "
                            "same validation queries") for l in lines)
    # 20 queries all differing by the same amount: only the 2 of 2^20 all-equal sign flips reach |Δ|,
    # so p = 1 / 10,001 = 0.0001; no difference at all: every flip reaches it, p = 1
    seen_p = p_of(0.6, 0.5, 10)  # 10 equal differences (of any size: the same flips): p near 2 / 2^10
    all_p = report.paired_randomization([0.6] * 10 + [0.5] * 10, [0.5] * 20)  # 10 differ, 10 do not
    assert 0.001 < all_p < 0.004 and 0.001 < float(seen_p) < 0.004  # both near 2 / 2^10 (other flips drawn)
    assert [l for l in lines if l.startswith("| minilm | ")] == [
        f"| minilm | a | 64 | dive-noview | 1 | 0.5500 | 0.5000 | +0.0500 | {all_p:.4f} | 20 | +0.1000 ({seen_p}, 10) | "
        "+0.0000 (1.0000, 10) |",
        f"| minilm | a | 64 | dive-softplus | 1 | 0.3000 | 0.5000 | -0.2000 | 0.0001 | 20 | -0.2000 ({seen_p}, 10) | "
        f"-0.2000 ({seen_p}, 10) |",
        "| minilm | b | 64 | dive-noview | 1 | 0.7000 | 0.7000 | +0.0000 | 1.0000 | 20 | +0.0000 (1.0000, 10) | "
        "+0.0000 (1.0000, 10) |",
        f"| minilm | b | 64 | dive-softplus | 1 | 0.5000 | 0.7000 | -0.2000 | 0.0001 | 20 | -0.2000 ({seen_p}, 10) | "
        f"-0.2000 ({seen_p}, 10) |"]
    # the TSV rows: each variant's Δ, p and query count per dataset; none for DIVE itself
    rows = {r["method"]: r for r in out.rows}
    assert (rows["dive-noview"]["a_diff_vs_dive"], rows["dive-noview"]["a_p_vs_dive"],
            rows["dive-noview"]["a_n_queries"]) == (pytest.approx(0.05), all_p, 20)
    assert rows["dive-softplus"]["a_p_vs_dive"] == pytest.approx(1 / 10001)
    assert (rows["dive-noview"]["b_diff_vs_dive"], rows["dive-noview"]["b_p_vs_dive"]) == (pytest.approx(0), 1.0)
    assert rows["dive-softplus"]["b_diff_vs_dive"] == pytest.approx(-0.2)
    assert not any(k.endswith("_vs_dive") or k.endswith("_n_queries") for k in rows["dive"])


def test_heads_tests_each_head_count_against_the_configured_one(tmp_path):
    scores = {("a", "dive-h2", 2027): (0.5, 0.4),   # -0.05 on every query
              ("a", "dive", 2027): (0.55, 0.45),
              ("a", "dive-h6", 2027): (0.55, 0.45)}  # equal to the configured H
    results, per_query = runs(tmp_path, scores, heads={"dive-h2": 2, "dive": 4, "dive-h6": 6})
    out = heads_study(results, ctx(["dive-h2", "dive", "dive-h6"], ["a"], per_query=per_query, highlight="dive"))
    lines = out.markdown.splitlines()
    assert "| 4 (configured) | dive | 0.5000 | 0.5000 |" in lines
    assert "### Each head count against the configured H (dive)" in lines
    assert any(l.startswith("Each other head count against the configured H (dive, H = 4) on the same validation "
                            "queries") for l in lines)
    assert [l for l in lines if l.startswith("| minilm | ")] == [
        "| minilm | a | 64 | dive-h6 | 1 | 0.5000 | 0.5000 | +0.0000 | 1.0000 | 20 | +0.0000 (1.0000, 10) | "
        "+0.0000 (1.0000, 10) |",
        f"| minilm | a | 64 | dive-h2 | 1 | 0.4500 | 0.5000 | -0.0500 | 0.0001 | 20 | -0.0500 ({p_of(0.5, 0.55, 10)}, 10) | "
        f"-0.0500 ({p_of(0.4, 0.45, 10)}, 10) |"]
    rows = {r["method"]: r for r in out.rows}
    assert (rows["dive-h2"]["heads"], rows["dive-h2"]["a_diff_vs_dive"], rows["dive-h2"]["a_n_queries"]) \
        == (2, pytest.approx(-0.05), 20)
    assert "a_p_vs_dive" not in rows["dive"]


# -- C: the learning-rate audit tests each pick against DIVE on the same validation queries -------
def test_lr_audit_tests_each_pick_against_the_reference(tmp_path):
    from dive_core.studies.lr_audit import lr_audit_study

    scores = {("a", "dive", 2027): (0.5, 0.5),
              ("a", "mrl", 2027): (0.6, 0.5),           # picked: +0.1 on seen, 0 on unseen, Δ +0.05 over 20
              ("a", "mrl-lr5e-04", 2027): (0.9, 0.9),   # not picked: never tested
              ("a", "csr-lr1e-04", 2027): (0.3, 0.3)}   # picked, at another k (its latents): -0.2 everywhere
    results, per_query = runs(tmp_path, scores)
    for r in results:
        if r["method"].startswith("csr"):
            path = per_query.pop(run_key(r))
            r["k"] = 1536
            per_query[run_key(r)] = path

    def entry(pick, other):
        cands = [{"method": m, "overrides": {"lr": lr}, "mean": 0.5, "per_dataset": {"a": 0.5}}
                 for m, lr in ((pick, 1e-4), (other, 5e-4))]
        return {"candidates": cands, "pick": {k: cands[0][k] for k in ("method", "overrides", "mean")}}

    sel = {"backbone": "minilm", "seed": 2027, "datasets": ["a"],
           "methods": {"mrl": entry("mrl", "mrl-lr5e-04"), "csr": entry("csr-lr1e-04", "csr")},
           "reference": {"method": "dive", "mean": 0.5, "per_dataset": {"a": 0.5}}}
    out = lr_audit_study(results, ctx(["mrl", "csr"], ["a"], per_query=per_query, selection=sel))
    lines = out.markdown.splitlines()
    assert "### Each pick against the reference (dive)" in lines
    all_p = report.paired_randomization([0.6] * 10 + [0.5] * 10, [0.5] * 20)
    assert [l for l in lines if l.startswith("| minilm | ")] == [
        f"| minilm | a | 64 | mrl | 1 | 0.5500 | 0.5000 | +0.0500 | {all_p:.4f} | 20 | "
        f"+0.1000 ({p_of(0.6, 0.5, 10)}, 10) | +0.0000 (1.0000, 10) |",
        f"| minilm | a | 1536 | csr-lr1e-04 | 1 | 0.3000 | 0.5000 | -0.2000 | 0.0001 | 20 | "
        f"-0.2000 ({p_of(0.3, 0.5, 10)}, 10) | -0.2000 ({p_of(0.3, 0.5, 10)}, 10) |"]
    rows = {r["candidate"]: r for r in out.rows}
    assert (rows["mrl"]["a_diff_vs_dive"], rows["mrl"]["a_n_queries"]) == (pytest.approx(0.05), 20)
    assert rows["csr-lr1e-04"]["a_p_vs_dive"] == pytest.approx(1 / 10001)
    assert not any(k.endswith("_vs_dive") for k in rows["mrl-lr5e-04"])
