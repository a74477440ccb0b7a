"""Aggregation: mean / sample std over seeds, tables, significance, figures."""

import math

import pytest

from dive_core import report
from dive_core.records import run_key
from dive_core.studies import shared
from dive_core.evaluation import write_per_query


def result(method, seed, ndcg, recall, mtype=None):
    return {"dataset": "ds", "backbone": "bb", "method": method, "method_type": mtype or method, "k": 8,
            "stage": "final", "seed": seed, "role": "test", "n_queries": 3,
            "timings": {"train_seconds": 10.0},
            "metrics": {"ndcg@10": ndcg, "recall@10": recall, "recall@100": 1.0, "mrr@10": ndcg},
            "subsets": {"seen": {"n_queries": 2, "metrics": {"ndcg@10": ndcg + 0.1}},
                        "unseen": {"n_queries": 1, "metrics": {"ndcg@10": ndcg - 0.2}}},
            "diagnostics": {"train_positive_share@10": {"all": 0.3, "seen": 0.4, "unseen": seed / 10}}}


def test_mean_and_sample_std():
    mean, std = report.mean_std([0.5, 0.6, 0.7])
    assert mean == pytest.approx(0.6) and std == pytest.approx(0.1)  # ddof = 1
    mean, std = report.mean_std([0.5])
    assert mean == 0.5 and math.isnan(std)
    assert report.fmt(0.61234, 0.01) == "0.6123 ± 0.0100" and report.fmt(0.5, float("nan")) == "0.5000"


def test_summary_and_markdown_mark_best_compressed_method():
    rows = report.collect([result("frozen", 1, 0.9, 0.95), result("frozen", 2, 0.9, 0.95),
                           result("pca", 1, 0.5, 0.6), result("pca", 2, 0.7, 0.8),
                           result("dive", 1, 0.65, 0.68), result("dive", 2, 0.65, 0.68)])
    summary = report.summarize(rows)
    s = {x["method"]: x for x in summary}
    assert s["pca"]["ndcg@10"] == pytest.approx(0.6) and s["pca"]["n_seeds"] == 2
    assert s["dive"]["ndcg@10_std"] == pytest.approx(0.0)
    assert s["dive"]["seen_ndcg@10"] == pytest.approx(0.75)
    keyed = {(x["backbone"], x["dataset"], x["method"]): x
             for x in report.summarize(rows, keys=("backbone", "dataset", "method"))}
    ctx = shared.StudyContext(name="t", title="T", methods=["frozen", "pca", "dive"], datasets=["ds"])
    md = "\n".join(shared.metric_table(keyed, ctx, ["bb"]))
    assert "| dive | 8 | **0.6500 ± 0.0000** | 0.6800 ± 0.0000 | 10 |" in md  # best nDCG, not best recall
    assert "| pca | 8 | 0.6000 ± 0.1414 | **0.7000 ± 0.1414** | 10 |" in md
    assert "**0.9000" not in md  # frozen is the uncompressed reference, never "best"
    # unseen train-positive share: seeds 1 and 2 give 0.1 and 0.2 -> 0.150 ± 0.071
    assert "| dive | 0.7500 ± 0.0000 (n=2) | 0.4500 ± 0.0000 (n=1) | 0.150 ± 0.071 |" in \
        "\n".join(shared.subset_table(keyed, ctx, ["bb"]))
    old = report.summarize(report.collect([{**result("pca", 1, 0.5, 0.6), "diagnostics": None}]),
                           keys=("backbone", "dataset", "method"))
    old = {(x["backbone"], x["dataset"], x["method"]): x for x in old}
    ctx_pca = shared.StudyContext(name="t", title="T", methods=["pca"], datasets=["ds"])
    assert "| pca | 0.6000 (n=2) | 0.3000 (n=1) | – |" in "\n".join(shared.subset_table(old, ctx_pca, ["bb"]))


def test_paired_randomization():
    a = [0.9, 0.8, 0.85, 0.95, 0.7, 0.9, 0.88, 0.92, 0.81, 0.93]
    assert report.paired_randomization(a, a) == 1.0
    p = report.paired_randomization(a, [x - 0.3 for x in a])
    assert p == pytest.approx(1 / 10001 * (1 + 2 / 1024 * 10000), abs=0.003)  # exact: 2 of 2^10 sign patterns
    assert report.paired_randomization(a, [x - 0.3 for x in a], seed=1) == pytest.approx(p, abs=0.003)


def test_significance_uses_per_query_scores(tmp_path):
    def pq(name, scores):
        path = tmp_path / f"{name}.tsv"
        write_per_query(path, {f"q{i}": {"ndcg@10": s, "recall@10": s, "recall@100": s, "mrr@10": s,
                                         "seen": int(i < 2)} for i, s in enumerate(scores)})
        return str(path)

    good = [0.9] * 12
    results = [result("dive", 1, 0.9, 0.9), result("pca", 1, 0.5, 0.5), result("truncate", 1, 0.89, 0.89),
               result("frozen", 1, 1.0, 1.0)]
    per_query = {run_key(r): pq(r["method"], scores) for r, scores in
                 zip(results, (good, [0.5] * 12, [0.89] * 11 + [1.0], [1.0] * 12))}
    rows = report.significance_rows(results, per_query)
    ndcg = [r for r in rows if r["metric"] == "ndcg@10"][0]
    assert ndcg["baseline"] == "truncate" and ndcg["n_queries"] == 12  # best other, frozen excluded
    assert ndcg["mean_diff"] == pytest.approx((0.9 * 12 - 0.89 * 11 - 1.0) / 12)
    assert 0.0 < ndcg["p_value"] <= 1.0
    assert "| bb | ds | ndcg@10 | dive | truncate |" in report.significance_markdown(rows)
    # a second backbone's runs of the same dataset and methods are tested on their own, never pooled
    other = [{**r, "backbone": "bb2", "method_type": r["method_type"]} for r in results[:2]]
    per_query.update({run_key(o): per_query[run_key(r)] for o, r in zip(other, results)})
    rows2 = report.significance_rows(results + other, per_query)
    by_bb = {(r["backbone"], r["metric"]): r for r in rows2}
    assert by_bb[("bb", "ndcg@10")] == ndcg
    assert by_bb[("bb2", "ndcg@10")]["baseline"] == "pca" and by_bb[("bb2", "ndcg@10")]["mean_diff"] == pytest.approx(0.4)
    # a variant of DIVE (type dive_corpus) is never DIVE's "best other": it gets a row of its own against the
    # best method outside DIVE's family
    variant = result("dive-pca", 1, 0.95, 0.95, mtype="dive_corpus")
    per_query[run_key(variant)] = pq("dive-pca", [0.95] * 12)
    rows3 = [r for r in report.significance_rows(results + [variant], per_query) if r["metric"] == "ndcg@10"]
    assert [(r["method"], r["baseline"]) for r in rows3] == [("dive", "truncate"), ("dive-pca", "truncate")]
    assert rows3[0] == ndcg and rows3[1]["mean_diff"] == pytest.approx((0.95 * 12 - 0.89 * 11 - 1.0) / 12)


def test_every_method_against_the_backbones_own_truncation(tmp_path):
    """Hand-computed: per-query scores averaged over seeds, then method - truncation per query; frozen
    and truncation itself get no row; another k is compared with truncation at its own k only."""
    def pq(name, scores):
        path = tmp_path / f"{name}.tsv"
        write_per_query(path, {f"q{i}": {"ndcg@10": s, "recall@10": s, "recall@100": s, "mrr@10": s,
                                         "seen": int(i < 2)} for i, s in enumerate(scores)})
        return str(path)

    runs = {("truncate", 1): [0.5, 0.5, 0.2, 0.8], ("dive", 1): [0.6, 0.7, 0.2, 0.8],
            ("dive", 2): [0.8, 0.7, 0.4, 0.8], ("pca", 1): [0.4, 0.5, 0.2, 0.8], ("frozen", 1): [1.0] * 4}
    results, per_query = [], {}
    for (m, seed), scores in runs.items():
        r = result(m, seed, sum(scores) / 4, 0.0)
        results.append(r)
        per_query[run_key(r)] = pq(f"{m}-{seed}", scores)
    wide = {**result("dive", 1, 0.9, 0.0), "k": 16}  # no truncation at k = 16: no row
    per_query[run_key(wide)] = pq("dive-16", [0.9] * 4)
    rows = report.versus_rows(results + [wide], per_query)
    assert [(r["method"], r["k"], r["seeds"]) for r in rows] == [("dive", 8, 2), ("pca", 8, 1)]  # by Δ, descending
    dive, pca = rows
    # dive averaged over seeds: 0.7, 0.7, 0.3, 0.8 against 0.5, 0.5, 0.2, 0.8
    assert dive["mean_diff"] == pytest.approx((0.2 + 0.2 + 0.1 + 0.0) / 4)
    assert dive["mean"] == pytest.approx(0.625) and dive["baseline_mean"] == pytest.approx(0.5)
    assert pca["mean_diff"] == pytest.approx(-0.1 / 4) and dive["n_queries"] == 4
    # four queries: 2^3 distinct sign patterns of the non-zero differences, all >= in |mean| only
    # for the all-positive and all-negative ones -> p = 2/8 (randomization test, up to sampling)
    assert dive["p_value"] == pytest.approx(0.25, abs=0.03)
    # the seen queries (q0, q1): +0.2, +0.2; the unseen ones (q2, q3): +0.1, 0.0
    assert dive["subsets"]["seen"]["mean_diff"] == pytest.approx(0.2) and dive["subsets"]["seen"]["n_queries"] == 2
    assert dive["subsets"]["unseen"]["mean_diff"] == pytest.approx(0.05)
    md = report.versus_markdown(rows)
    assert "| bb | ds | 8 | dive | 2 | 0.6250 | 0.5000 | +0.1250 |" in md
    assert "| 4 | +0.2000 (" in md and ", 2) | +0.0500 (" in md
    assert report.versus_rows([r for r in results if r["method"] != "truncate"], per_query) == []


def test_dive_variants_against_dive(tmp_path):
    """Hand-computed: a variant of DIVE (type dive_corpus) against DIVE per query, averaged over seeds; no
    other method gets a row; the section carries DIVE's heading, not truncation's."""
    def pq(name, scores):
        path = tmp_path / f"{name}.tsv"
        write_per_query(path, {f"q{i}": {"ndcg@10": s, "recall@10": s, "recall@100": s, "mrr@10": s,
                                         "seen": int(i < 2)} for i, s in enumerate(scores)})
        return str(path)

    runs = {("dive", 1, "dive"): [0.5, 0.6, 0.2, 0.4], ("dive", 2, "dive"): [0.7, 0.6, 0.2, 0.6],
            ("dive-pca", 1, "dive_corpus"): [0.7, 0.6, 0.3, 0.5], ("dive-pca", 2, "dive_corpus"): [0.7, 0.8, 0.3, 0.5],
            ("mrl", 1, "mrl"): [0.9] * 4, ("truncate", 1, "truncate"): [0.1] * 4}
    results, per_query = [], {}
    for (m, seed, mtype), scores in runs.items():
        r = result(m, seed, sum(scores) / 4, 0.0, mtype=mtype)
        results.append(r)
        per_query[run_key(r)] = pq(f"{m}-{seed}", scores)
    rows = report.versus_rows(results, per_query, baseline=report.DIVE, types=report.DIVE_VARIANTS)
    assert [(r["method"], r["seeds"]) for r in rows] == [("dive-pca", 2)]
    # dive-pca's seed means 0.7, 0.7, 0.3, 0.5 against dive's 0.6, 0.6, 0.2, 0.5
    (row,) = rows
    assert row["mean_diff"] == pytest.approx(0.3 / 4) and row["baseline_mean"] == pytest.approx(0.475)
    assert row["subsets"]["seen"]["mean_diff"] == pytest.approx(0.1)
    assert row["subsets"]["unseen"]["mean_diff"] == pytest.approx(0.05)
    md = report.versus_markdown(rows)
    assert "### DIVE's variants against DIVE (dive)" in md and "| nDCG@10 | DIVE | Δ |" in md
    assert "| bb | ds | 8 | dive-pca | 2 | 0.5500 | 0.4750 | +0.0750 |" in md
    assert "truncation" not in md


def test_versus_named_baselines_at_their_own_k_and_the_bytes_of_sparse_codes(tmp_path):
    """An experiment's ``versus:``: every other compressed method against each named one, across k
    (csr's k is its latent count); the named ones never against each other; a study with a k-sparse
    code states the bytes each method stores (dense: 4k; csr: 4 x topk)."""
    from dive_core.studies.main import stored_bytes_markdown

    def pq(name, scores):
        path = tmp_path / f"{name}.tsv"
        write_per_query(path, {f"q{i}": {"ndcg@10": s, "recall@10": s, "recall@100": s, "mrr@10": s,
                                         "seen": int(i < 2)} for i, s in enumerate(scores)})
        return str(path)

    runs = {("csr", "csr", 1536, 1): [0.6, 0.4, 0.2, 0.8], ("csr", "csr", 1536, 2): [0.8, 0.4, 0.4, 0.8],
            ("dive", "dive", 64, 1): [0.5, 0.5, 0.3, 0.6], ("mrl-tuned", "mrl", 64, 1): [0.9, 0.9, 0.9, 0.9],
            ("frozen", "frozen", 384, 1): [1.0] * 4}
    results, per_query = [], {}
    for (m, mtype, k, seed), scores in runs.items():
        hp = {"topk": 64, "expansion": 4} if mtype == "csr" else {"lr": 1e-4}  # what the run trained with
        r = {**result(m, seed, sum(scores) / 4, 0.0, mtype=mtype), "k": k,
             "config": {"method_entry": {"type": mtype}, "hparams": hp}}
        results.append(r)
        per_query[run_key(r)] = pq(f"{m}-{seed}", scores)
    # by default a baseline at the same k only: no dive at csr's k = 1536
    assert [r["method"] for r in report.versus_rows(results, per_query, baseline="dive")] == ["mrl-tuned"]
    rows = report.versus_rows(results, per_query, baseline="dive", any_k=True, skip=["dive", "mrl-tuned"])
    (row,) = rows  # csr's seed means 0.7, 0.4, 0.3, 0.8 against dive's 0.5, 0.5, 0.3, 0.6
    assert (row["method"], row["k"], row["seeds"]) == ("csr", 1536, 2)
    assert row["mean_diff"] == pytest.approx((0.2 - 0.1 + 0.0 + 0.2) / 4)
    assert row["subsets"]["seen"]["mean_diff"] == pytest.approx(0.05)
    md = report.versus_markdown(rows, plain=True)
    assert "### Against (dive)" in md and "variants" not in md and "| bb | ds | 1536 | csr | 2 | 0.5500 | 0.4750 | +0.0750 |" in md
    table = stored_bytes_markdown(results)
    assert "| csr | 64 of 1536 latents (sparse) | 256 |" in table and "| dive | 64 float32 | 256 |" in table
    assert "frozen" not in table
    assert stored_bytes_markdown([r for r in results if r["method"] != "csr"]) == ""


def test_grouped_bars_write_png(tmp_path):
    keyed = {(x["backbone"], x["dataset"], x["method"]): x for x in report.summarize(
        report.collect([result("frozen", 1, 0.9, 0.95), result("pca", 1, 0.5, 0.6), result("dive", 1, 0.6, 0.7)]),
        keys=("backbone", "dataset", "method"))}
    out = tmp_path / "fig.png"
    ctx = shared.StudyContext(name="t", title="title", methods=["frozen", "pca", "dive"], datasets=["ds"])
    shared.grouped_bars(out, keyed, ctx, ["bb"])
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # read back: the bars are there in their colours (pca orange, dive pink, frozen's light grey)
    import matplotlib.image as mpimg
    import numpy as np
    from matplotlib.colors import to_rgb

    img = mpimg.imread(out)[..., :3]
    assert img.shape[1] > img.shape[0] > 300, img.shape
    for color in (shared.METHOD_COLORS["pca"], shared.METHOD_COLORS["dive"], "0.85"):
        assert np.isclose(img, to_rgb(color), atol=0.02).all(-1).sum() > 5000, color  # bars, not a legend patch (~250 px)
