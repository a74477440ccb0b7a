"""The study tables and figures (dive_core.studies), each against small hand-computed examples."""

from __future__ import annotations

import pytest

from dive_core import report
from dive_core.records import run_key
from dive_core.studies import budget, dynamics, efficiency, frontier, shared
from dive_core.studies.ablation import ablation_study
from dive_core.studies.dynamics import dynamics_study, first_below
from dive_core.studies.efficiency import efficiency_study
from dive_core.studies.frontier import frontier_study
from dive_core.studies.main import DOC_DISJOINT_NOTE, main_study
from dive_core.studies.tuned import tuned_study

GROUPS = {"a": "a", "cq1": "cq", "cq2": "cq"}


# -- study tables ----------------------------------------------------------------------------
def full_result(method, dataset, ndcg, seed=2027, mtype=None, seen=(3, 0.8), unseen=(0, None), k=64,
                cap=None):
    sub = lambda n, v: {"n_queries": n, "metrics": None if n == 0 else {"ndcg@10": v}}  # noqa: E731
    return {"dataset": dataset, "backbone": "minilm", "method": method, "method_type": mtype or method,
            "k": k, "stage": "final", "seed": seed, "role": "test", "n_queries": seen[0] + unseen[0],
            "metrics": {"ndcg@10": ndcg, "recall@10": ndcg + 0.1, "recall@100": 1.0, "mrr@10": ndcg},
            "subsets": {"seen": sub(*seen), "unseen": sub(*unseen)}, "timings": {"train_seconds": 10.0},
            "diagnostics": {"train_positive_share@10": {"all": 0.1, "seen": 0.1, "unseen": None}},
            "config": {"triplets": {"max_per_query": cap}, "n_triplets": 100}}


def ctx(methods, datasets, **kw):
    return shared.StudyContext(name="t", title="t", methods=methods, datasets=datasets, **kw)


def test_main_table_shows_n_beside_subsets_and_no_score_for_an_empty_one(monkeypatch):
    monkeypatch.setattr(report, "significance_rows", lambda results, per_query: [])
    results = [full_result("frozen", "a", 0.7, k=384), full_result("dive", "a", 0.6),
               full_result("frozen", "cq1", 0.5, k=384, unseen=(2, 0.4)), full_result("dive", "cq1", 0.3, unseen=(2, 0.2)),
               full_result("frozen", "cq2", 0.5, k=384), full_result("dive", "cq2", 0.1, cap=4)]
    out = main_study(results, ctx(["frozen", "dive"], ["a", "cq1", "cq2"], groups=GROUPS))
    dive_row = next(l for l in out.markdown.splitlines() if l.startswith("| dive | 64 |"))
    assert dive_row.split(" | ")[-2:] == ["**0.4000**", "**0.5000** |"]  # (0.6 + 0.2) / 2, recall +0.1
    subsets = next(l for l in out.markdown.splitlines() if l.startswith("| dive | 0.8000"))
    assert "– (n=0)" in subsets and "0.2000 (n=2)" in subsets and "0.8000 (n=3)" in subsets
    assert "capped at 4 per query on cq2" in out.markdown
    assert "Document-disjoint runs" not in out.markdown
    disjoint = [{**r, "config": {**r["config"], "method_entry": {"type": "dive", "doc_disjoint": True}}}
                if r["method"] == "dive" else r for r in results]
    out = main_study(disjoint, ctx(["frozen", "dive"], ["a", "cq1", "cq2"], groups=GROUPS))
    assert DOC_DISJOINT_NOTE in out.markdown  # seen/unseen of a doc-disjoint run is explained


def test_dynamics_first_epoch_below_ten_percent(tmp_path, monkeypatch):
    logs = {}
    for seed, rhos in ((2027, [0.5, 0.2, 0.09, 0.05]), (2028, [0.5, 0.3, 0.2, 0.15])):
        p = tmp_path / f"{seed}.tsv"
        p.write_text("epoch\tphase\ttriplet\tview\tgeo\trho\ttotal\tseconds\n" + "".join(
            f"{i + 1}\ttrain\t0.1\t0.01\t0.02\t{r}\t0.13\t1.0\n" for i, r in enumerate(rhos)))
        logs[seed] = str(p)
    results = [full_result("dive", "a", 0.5, seed=s, cap=4) for s in logs]
    out = dynamics_study(results, ctx(["dive"], ["a"], train_logs={run_key(r): logs[r["seed"]] for r in results}))
    assert "training triplets capped at 4 per query on a" in out.markdown  # every study states the cap
    row = next(l for l in out.markdown.splitlines() if l.startswith("| minilm | a |"))
    assert "| 3, never |" in row and "| 0.1000 |" in row  # mean of 0.05 and 0.15
    assert first_below([0.2, 0.1, 0.099]) == 3  # strictly below
    # the PNG written: two panels side by side, drawn on, the mean rho(t) line in tab10 blue
    import matplotlib.image as mpimg
    import numpy as np
    from matplotlib.colors import to_rgb

    out.figure(tmp_path / "dyn.png")
    img = mpimg.imread(tmp_path / "dyn.png")[..., :3]
    height, width = img.shape[:2]
    assert width > 2 * height and height > 400, img.shape  # 12 x 4.4 in at 120 dpi, trimmed
    ink = (img < 0.9).any(-1).mean()
    assert 0.02 < ink < 0.5, ink  # not blank, not one block of colour
    assert np.isclose(img, to_rgb("#1f77b4"), atol=0.02).all(-1).sum() > 300  # a drawn line, not a legend dot
    # what was drawn: the per-seed and mean rho(t) curves, the 10% line, one line per loss term
    figs = _capture_figures(monkeypatch)
    out.figure("unused.png")
    left, right = figs[0].axes[:2]
    lines = {line.get_label(): list(line.get_ydata()) for line in left.get_lines()}
    assert lines["a (mean of 2 seeds)"] == pytest.approx([0.5, 0.25, 0.145, 0.1])
    assert lines["10%"] == [0.1, 0.1]
    seeds = sorted(ys for label, ys in lines.items() if label.startswith("_"))
    assert seeds == [[0.5, 0.2, 0.09, 0.05], [0.5, 0.3, 0.2, 0.15]]
    assert [line.get_label() for line in right.get_lines()] == ["a: triplet", "a: view", "a: geo"]
    assert [list(line.get_ydata()) for line in right.get_lines()] == [[0.1] * 4, [0.01] * 4, [0.02] * 4]
    assert (left.get_title(), right.get_title(), right.get_yscale()) == ("rho(t)", "DIVE's weighted loss terms", "log")


def test_tuned_counts_dataset_seed_wins(monkeypatch):
    monkeypatch.setattr(report, "significance_rows", lambda results, per_query: [])
    results = [full_result("dive", "a", 0.6, seed=s) for s in (1, 2)]
    results += [full_result("mrl-tuned", "a", v, seed=s, mtype="mrl") for s, v in ((1, 0.5), (2, 0.65))]
    results += [full_result("smec-tuned", "a", v, seed=s, mtype="smec") for s, v in ((1, 0.55), (2, 0.1))]
    # a variant of DIVE (type dive_corpus) is never the strongest baseline, even where it scores highest:
    # it gets DIVE's comparison in rows of its own
    results += [full_result("dive-pca", "a", v, seed=s, mtype="dive_corpus") for s, v in ((1, 0.52), (2, 0.9))]
    out = tuned_study(results, ctx(["mrl-tuned", "smec-tuned", "dive", "dive-pca"], ["a"]))
    assert "| minilm | a | 1 | dive | 0.6000 | smec-tuned | 0.5500 | +0.0500 |" in out.markdown
    assert "| minilm | a | 2 | dive | 0.6000 | mrl-tuned | 0.6500 | -0.0500 |" in out.markdown
    assert "| minilm | a | 1 | dive-pca | 0.5200 | smec-tuned | 0.5500 | -0.0300 |" in out.markdown
    assert "| minilm | a | 2 | dive-pca | 0.9000 | mrl-tuned | 0.6500 | +0.2500 |" in out.markdown
    assert "dive exceeds the strongest tuned baseline in **1 of 2**" in out.markdown
    assert "dive-pca exceeds the strongest tuned baseline in **1 of 2**" in out.markdown


def _capture_figures(monkeypatch):
    """The figures a study draws, kept open instead of written (their axes can be read)."""
    figs = []
    for module in (shared, dynamics, efficiency, frontier):  # every module that saves a figure by name
        monkeypatch.setattr(module, "save", lambda fig, path: figs.append(fig))
    return figs


def test_efficiency_and_frontier_figures_show_every_dataset(monkeypatch):
    """With two datasets (config/paper.yaml), each dataset's bars and frontier get their own
    labelled place: nothing drawn over another dataset's, nothing left out."""
    def index(ds_dim, method):
        return {"method": method, "dim": ds_dim, "n_docs": 100, "repeats": 5, "n_single": 300, "k": 10,
                "encoding": "float32", "bytes_per_vector": 4 * ds_dim, "index_bytes": 400 * ds_dim,
                "memory_bytes": 400 * ds_dim, "throughput_qps_one_thread": 60.0, "memory_ratio_to_full": 1.0,
                "latency_ms_median": 1.0, "latency_ms_p99": 2.0, "latency_speedup_vs_full": 1.0,
                "lower_bound_ms": 0.5, "latency_ratio_to_bound": 2.0, "read_ms_same_size": 0.6,
                "latency_ratio_to_read": 1.7, "throughput_qps": 100.0, "throughput_ratio_to_full": 1.0}

    eff = [{"dataset": ds, "backbone": "minilm", "n_queries": 10, "faiss_version": "1", "device": "cpu", "cpu": "x",
            "faiss_threads": 2, "bandwidth_gb_s": 10.0, "indexes": [index(384, "frozen"), index(64, "dive")]}
           for ds in ("scifact", "nfcorpus")]
    figs = _capture_figures(monkeypatch)
    out = efficiency_study(eff, ctx(["dive"], ["scifact", "nfcorpus"]))
    out.figure("unused.png")
    # one row of two panels per dataset, each titled with it, one labelled bar per index (frozen on top)
    axes = figs[0].axes
    assert [ax.get_title().split(" (")[0] for ax in axes] == ["scifact", "scifact", "nfcorpus", "nfcorpus"]
    ticks = {t.get_text(): y for t, y in zip(axes[2].get_yticklabels(), axes[2].get_yticks())}
    assert list(ticks) == ["frozen 384d", "dive 64d"] and ticks["frozen 384d"] > ticks["dive 64d"]  # frozen on top
    assert [p.get_width() for p in axes[3].patches] == [100.0, 100.0] and axes[0].get_xscale() == "log"
    renderer = figs[0].canvas.get_renderer()  # the first row's titles clear the figure's title
    gap = figs[0]._suptitle.get_window_extent(renderer).y0 - axes[0].title.get_window_extent(renderer).y1
    assert gap >= 0.25 * figs[0].dpi, gap  # a quarter inch

    def row(method, b, v, pareto, enc="float32"):
        return {"method": method, "dim": b, "encoding": enc, "bytes_per_vector": b, "ndcg@10": v,
                "recall@10": v, "pareto": pareto, "rescore_oversample": 4 if enc == "binary_rescore" else None,
                "seed": 2027}

    front = [{"dataset": ds, "backbone": "minilm", "n_queries": 10,
              "rows": [row("frozen", 1536, 0.6, True), row("dive", 256, 0.7, True)]} for ds in ("scifact", "nfcorpus")]
    out = frontier_study(front, ctx(["frozen", "dive"], ["scifact", "nfcorpus"]))
    out.figure("unused.png")
    # at 64 bytes or fewer: the best overall, and the best that needs nothing outside the index
    one = [{"dataset": "scifact", "backbone": "minilm", "n_queries": 10,
            "rows": [row("dive", 8, 0.72, True, "binary_rescore"), row("dive", 64, 0.69, False, "sq8")]}]
    md = frontier_study(one, ctx(["dive"], ["scifact"])).markdown
    assert "Best at 64 bytes or fewer per vector: **dive 8d in binary_rescore** (8 B, nDCG@10 0.7200" in md
    assert "(no re-scoring): **dive 64d in sq8** (64 B, nDCG@10 0.6900" in md and "on disk in a deployment" in md
    titles = [ax.get_title() for ax in figs[1].axes]
    assert titles == ["scifact: nDCG@10 per byte", "scifact: Recall@10 per byte", "scifact: best code of each family",
                      "nfcorpus: nDCG@10 per byte", "nfcorpus: Recall@10 per byte", "nfcorpus: best code of each family"]
    # each dataset's two points, in its own panel (the family panel: rows without `supervised`, none)
    assert [len(ax.collections) for ax in figs[1].axes] == [2, 2, 0, 2, 2, 0]


def test_frontier_tests_each_sparse_code_against_the_best_dense_row_of_no_more_bytes():
    """Hand-computed: the code of 64 bytes (16 latents) meets the dense rows of at most 64 bytes that
    need nothing outside the index: MRL's SQ8 (64 B, 0.75) beats PCA's float32 (32 B, 0.30); MRL's
    re-scored 1-bit code (8 B, 0.90, reads float32 vectors on disk) and DIVE's float32 (128 B, 0.95)
    are not candidates. Per-query differences (0.25, -0.5, 0.25, -0.5): mean -0.125; of the 16
    sign patterns only the 4 with the 0.25s and the 0.5s each cancelling give |mean| < 0.125, so
    the exact two-sided p is 12/16 = 0.75 (the test draws 10,000 patterns). The code of 16 bytes
    has no dense row of no more bytes but the re-scored one: left out."""

    def row(method, nbytes, per_query, enc="float32", active=None, dim=64):
        return {"method": method, "dim": dim, "active": active, "encoding": enc, "bytes_per_vector": nbytes,
                "ndcg@10": sum(per_query) / len(per_query), "recall@10": 0.5, "pareto": False,
                "rescore_oversample": 4 if enc == "binary_rescore" else None, "seed": 2027,
                "per_query": {"ndcg@10": list(per_query)}}

    dense_best = (0.5, 1.0, 0.5, 1.0)
    rows = [row("pca", 32, (0.3, 0.3, 0.3, 0.3), dim=8), row("mrl", 64, dense_best, "sq8"),
            row("mrl", 8, (0.9,) * 4, "binary_rescore"), row("dive", 128, (0.95,) * 4, dim=32),
            row("csr-k16", 64, (0.75, 0.5, 0.75, 0.5), "sparse", active=16, dim=1536),
            row("csr-k4", 16, (0.2,) * 4, "sparse", active=4, dim=1536)]
    (pair,) = frontier.sparse_against_dense(rows)
    assert pair["code"]["method"] == "csr-k16" and (pair["dense"]["method"], pair["dense"]["encoding"]) == ("mrl", "sq8")
    assert pair["mean_diff"] == -0.125 and pair["n_queries"] == 4
    assert pair["p_value"] == report.paired_randomization((0.75, 0.5, 0.75, 0.5), dense_best)
    assert abs(pair["p_value"] - 0.75) < 0.02
    out = frontier_study([{"dataset": "scifact", "backbone": "minilm", "n_queries": 4, "rows": rows}],
                         ctx(["mrl", "csr-k16"], ["scifact"]))
    assert (f"| csr-k16 | 16 of 1536 | 64 | 0.6250 | mrl 64d sq8 | 64 | 0.7500 | -0.1250 | "
            f"{pair['p_value']:.4f} | 4 |") in out.markdown
    assert "csr-k4 |" not in out.markdown.split("each sparse code against")[1]
    assert all("per_query" not in r for r in out.rows)  # the TSV holds no per-query lists
    with pytest.raises(ValueError, match="csr-k16 and mrl"):
        frontier.sparse_against_dense([*rows[:2], {**rows[4], "per_query": {"ndcg@10": [0.5] * 3}}])


def test_frontier_verdict_picks_the_best_label_free_and_supervised_code_at_each_budget(monkeypatch):
    """Hand-computed, four queries (seen: the first two). Index-alone codes: PCA pq8 (8 B, 0.5 each),
    frozen pq16 (16 B, 0.6 each), MRL pq8 (8 B: 1.0, 0.5, 1.0, 0.5), DIVE sq8 (64 B, 0.9 each); MRL's
    re-scored 1-bit code (8 B, 1.0) reads float32 vectors outside the index: never picked. At 8 B:
    MRL pq8 - PCA pq8 = +0.25 over all (per query +0.5, 0, +0.5, 0: of the sign patterns of the two
    non-zero differences, half reach |mean| 0.25, p ~ 0.5), +0.25 on seen and on unseen; at 16 and 32
    B the label-free pick is frozen pq16 (+0.15); from 64 B DIVE sq8 (+0.3 on every query: exact p
    2/16 = 0.125)."""
    def row(method, enc, nbytes, per_query, supervised, dim=64):
        return {"method": method, "dim": dim, "active": None, "encoding": enc, "bytes_per_vector": nbytes,
                "ndcg@10": sum(per_query) / len(per_query), "recall@10": 0.5, "pareto": False,
                "rescore_oversample": 4 if enc == "binary_rescore" else None, "seed": 2027,
                "supervised": supervised, "fit_seconds": 1.0 if enc.startswith(("pq", "opq")) else None,
                "opq_niter": None, "quantizer_seed": 2027, "per_query": {"ndcg@10": list(per_query)}}

    rows = [row("pca", "pq8", 8, (0.5,) * 4, False), row("frozen", "pq16", 16, (0.6,) * 4, False, dim=384),
            {**row("frozen", "opq16", 16, (0.55,) * 4, False, dim=384), "opq_niter": 10},
            row("mrl", "pq8", 8, (1.0, 0.5, 1.0, 0.5), True), row("mrl", "binary_rescore", 8, (1.0,) * 4, True),
            row("dive", "sq8", 64, (0.9,) * 4, True), row("frozen", "float32", 1536, (0.7,) * 4, False, dim=384)]
    seen = [1, 1, 0, 0]
    entries = frontier.verdict(rows, seen, validation=rows)  # validation scores equal to the test's here
    got = {(e["budget"], e["subset"]): (e["label_free"]["method"] + " " + e["label_free"]["encoding"],
                                        e["supervised"]["method"] + " " + e["supervised"]["encoding"],
                                        round(e["mean_diff"], 6), e["n_queries"]) for e in entries}
    assert got[(8, "all")] == ("pca pq8", "mrl pq8", 0.25, 4)
    assert got[(8, "seen")] == ("pca pq8", "mrl pq8", 0.25, 2) and got[(8, "unseen")][2:] == (0.25, 2)
    assert got[(16, "all")] == got[(32, "all")] == ("frozen pq16", "mrl pq8", 0.15, 4)
    assert got[(64, "all")] == got[(256, "all")] == ("frozen pq16", "dive sq8", 0.3, 4)
    p8 = next(e["p_value"] for e in entries if (e["budget"], e["subset"]) == (8, "all"))
    p64 = next(e["p_value"] for e in entries if (e["budget"], e["subset"]) == (64, "all"))
    assert abs(p8 - 0.5) < 0.02 and abs(p64 - 0.125) < 0.02
    assert frontier.best_curve(rows) == [(8, 1.0)]  # the envelope: nothing beats 1.0 at more bytes
    assert frontier.best_curve([rows[0], rows[1], rows[3]]) == [(8, 0.75)]
    grid = {"pq_m": [8, 16], "opq_m": [8], "dims": ["primary"]}
    c = ctx(["frozen", "pca", "mrl", "dive"], ["scifact"])
    c.validation = [{"dataset": "scifact", "backbone": "minilm", "stage": "select", "role": "validation", "rows": rows}]
    out = frontier_study([{"dataset": "scifact", "backbone": "minilm", "n_queries": 4, "seen": seen, "rows": rows,
                           "quantizers": grid}], c)
    assert "the secondary dimension's vectors are not quantized" in out.markdown
    assert "after OPQ's rotation (10 iterations)" in out.markdown
    assert (f"| 8 | all | 4 | pca 64d pq8 | 8 | 1 | 0.5000 | 0.5000 | mrl 64d pq8 | 8 | 1 | 0.7500 | 0.7500 | +0.2500 | "
            f"2027 +0.2500 | {p8:.4f} | the pick; the pick |") in out.markdown
    assert "picked on the validation queries" in out.markdown
    assert "| pca | 64 | 0.5000 |" in out.markdown and "| pq8 (8 B) |" in out.markdown  # the quantizer matrix
    assert "| 8 | pca | 64 | pq8 |" not in out.markdown  # quantizer rows: in the matrix and the TSV, not the grid
    assert {r["encoding"] for r in out.rows} >= {"pq8", "pq16"}
    figs = _capture_figures(monkeypatch)
    out.figure("unused.png")
    labels = [t.get_text() for t in figs[0].axes[2].get_legend().get_texts()]
    assert labels == ["label-free, index quantizer", "label-free, other encodings", "supervised, index quantizer",
                      "supervised, other encodings"]
    with pytest.raises(ValueError, match="no `seen` flags"):
        frontier.verdict(rows, None, validation=rows)
    with pytest.raises(ValueError, match="picks its codes on validation queries"):
        frontier.verdict(rows, seen)


def test_frontier_verdict_scores_its_picked_codes_over_the_repeated_seeds():
    """The pick stays at the frontier's seed (2027); a repeat record (seed 2028) holds MRL pq8 at 0.5 on
    each of four queries and DIVE sq8 at 0.8; PCA and frozen are not repeated (one seed). At 8 B MRL
    pq8's per-query mean over its seeds (0.75, 0.5, 0.75, 0.5) - PCA pq8's 0.5 = +0.125, by seed +0.25 /
    0.0; at 16 B - frozen pq16's 0.6: +0.025 (+0.15 / -0.10), although at 2028 MRL falls below frozen
    (the pick does not move); at 64 B DIVE sq8 0.85 - 0.6 = +0.25 (+0.3 / +0.2), on every query: the
    exact p of four equal differences is 2/16."""
    def row(method, enc, nbytes, per_query, supervised, dim=64, seed=2027):
        return {"method": method, "dim": dim, "active": None, "encoding": enc, "bytes_per_vector": nbytes,
                "ndcg@10": sum(per_query) / len(per_query), "recall@10": 0.5, "pareto": False,
                "rescore_oversample": None, "seed": seed, "supervised": supervised, "fit_seconds": None,
                "opq_niter": None, "quantizer_seed": 2027, "per_query": {"ndcg@10": list(per_query)}}

    rows = [row("pca", "pq8", 8, (0.5,) * 4, False), row("frozen", "pq16", 16, (0.6,) * 4, False, dim=384),
            row("mrl", "pq8", 8, (1.0, 0.5, 1.0, 0.5), True), row("dive", "sq8", 64, (0.9,) * 4, True)]
    repeat = [row("mrl", "pq8", 8, (0.5,) * 4, True, seed=2028), row("mrl", "pq16", 16, (0.99,) * 4, True, seed=2028),
              row("dive", "sq8", 64, (0.8,) * 4, True, seed=2028)]
    seen = [1, 1, 0, 0]
    entries = {(e["budget"], e["subset"]): e for e in frontier.verdict(rows, seen, repeats=[repeat], validation=rows)}
    e8, e16, e64 = entries[(8, "all")], entries[(16, "all")], entries[(64, "all")]
    assert e8["supervised"]["encoding"] == "pq8" and e8["supervised_seeds"] == [2027, 2028]
    assert e8["label_free_seeds"] == [2027]
    assert e8["mean_diff"] == pytest.approx(0.125) and e8["supervised_mean"] == pytest.approx(0.625)
    assert e8["diff_by_seed"] == pytest.approx({2027: 0.25, 2028: 0.0})
    assert entries[(8, "seen")]["mean_diff"] == pytest.approx(0.125)  # seen: 0.75, 0.5 against 0.5
    assert e16["supervised"]["encoding"] == "pq8"  # repeat rows are never picked (mrl pq16 at 2028)
    assert e16["mean_diff"] == pytest.approx(0.025) and e16["diff_by_seed"] == pytest.approx({2027: 0.15, 2028: -0.1})
    assert e64["mean_diff"] == pytest.approx(0.25) and e64["diff_by_seed"] == pytest.approx({2027: 0.3, 2028: 0.2})
    assert abs(e64["p_value"] - 0.125) < 0.02
    md = "\n".join(frontier.verdict_markdown(list(entries.values()), "scifact (minilm)"))
    assert ("| 8 | all | 4 | pca 64d pq8 | 8 | 1 | 0.5000 | 0.5000 | mrl 64d pq8 | 8 | 2 | 0.7500 | 0.6250 | +0.1250 | "
            "2027 +0.2500 / 2028 +0.0000 |") in md
    assert "Each code is scored at seed 2027" in md
    one = "\n".join(frontier.verdict_markdown(frontier.verdict(rows, seen, validation=rows), "scifact (minilm)"))
    assert "One seed (2027) of each trained map" in one
    # through the study: the repeat's rows reach the TSV with their seed; a repeat of the frontier's own
    # seed, or over other queries, is refused
    rec = {"dataset": "scifact", "backbone": "minilm", "n_queries": 4, "query_ids": list("abcd"), "seen": seen,
           "rows": rows}
    rep = {"dataset": "scifact", "backbone": "minilm", "query_ids": list("abcd"), "rows": repeat}
    c = ctx(["frozen", "pca", "mrl", "dive"], ["scifact"])
    c.repeats = [rep]
    c.validation = [{"dataset": "scifact", "backbone": "minilm", "stage": "select", "role": "validation", "rows": rows}]
    out = frontier_study([rec], c)
    assert "2027 +0.2500 / 2028 +0.0000" in out.markdown and {r["seed"] for r in out.rows} == {2027, 2028}
    assert [r.get("repeat") for r in out.rows if r["seed"] == 2028] == [True] * 3  # publish_tables reads it
    # the label-free pick repeated, the supervised one not: each seed of either code, the other at its mean
    lf_rows = [row("autoencoder", "pq8", 8, (0.6,) * 4, False), row("mrl", "pq8", 8, (1.0, 0.5, 1.0, 0.5), True)]
    e = frontier.verdict(lf_rows, seen, budgets=(8,), validation=lf_rows,
                         repeats=[[row("autoencoder", "pq8", 8, (0.4,) * 4, False, seed=2028)]])[0]
    assert e["label_free_seeds"] == [2027, 2028] and e["mean_diff"] == pytest.approx(0.25)
    assert e["diff_by_seed"] == pytest.approx({2027: 0.15, 2028: 0.35})  # 0.75 - 0.6, 0.75 - 0.4
    # a repeat of MRL 64d that lacks the picked code is refused, naming it
    with pytest.raises(ValueError, match="frontier_seed record of mrl 64d at seed 2028 lacks its code pq8"):
        frontier.verdict(rows, seen, repeats=[[row("mrl", "sq8", 64, (0.5,) * 4, True, seed=2028)]], validation=rows)
    c.repeats = [{**rep, "query_ids": list("abce")}]
    with pytest.raises(ValueError, match="other test queries"):
        frontier_study([rec], c)
    c.repeats = [{**rep, "rows": [row("mrl", "pq8", 8, (0.5,) * 4, True)]}]
    with pytest.raises(ValueError, match="the frontier's own"):
        frontier_study([rec], c)


TYPE_COLORS = {"truncate": "#1f77b4", "pca": "#ff7f0e", "autoencoder": "#2ca02c", "mrl": "#d62728",
               "search_adaptor": "#9467bd", "smec": "#8c564b", "dive": "#e377c2"}  # tab10 without its grey
FROZEN_BAR = "#d9d9d9"  # REFERENCE_STYLE's "0.85"


def _bar_colors(fig) -> dict[str, str]:
    """Method -> face colour of its bars, from the first panel's legend entries."""
    from matplotlib.colors import to_hex

    handles, labels = fig.axes[0].get_legend_handles_labels()
    return {label.split(" (")[0]: to_hex(h.patches[0].get_facecolor()) for h, label in zip(handles, labels)}


def _is_grey(color) -> bool:
    from matplotlib.colors import to_rgb

    r, g, b = to_rgb(color)
    return r == g == b


def test_a_method_keeps_its_colour_across_figures(monkeypatch):
    """main, tuned, doc_disjoint and the frontier colour a method type alike (mrl-tuned is mrl's
    colour), while the ablation's DIVE variants, all of one type, get distinct colours; no
    compressed method is drawn in a grey (frozen's)."""
    assert shared.method_colors({m: m for m in TYPE_COLORS}) == TYPE_COLORS
    tuned = shared.method_colors({"mrl-tuned": "mrl", "search_adaptor-tuned": "search_adaptor", "dive": "dive"})
    assert tuned == {"mrl-tuned": "#d62728", "search_adaptor-tuned": "#9467bd", "dive": "#e377c2"}
    assert shared.method_colors({"smec-docdisjoint": "smec", "dive-docdisjoint": "dive"}) == {
        "smec-docdisjoint": "#8c564b", "dive-docdisjoint": "#e377c2"}
    ablation = shared.method_colors({m: "dive" for m in ("dive-softplus", "dive-noview", "dive-nogeo", "dive")})
    assert len(set(ablation.values())) == 4 and not any(map(_is_grey, ablation.values()))
    # the figures themselves: bars of main and tuned, points of the frontier
    monkeypatch.setattr(report, "significance_rows", lambda results, per_query: [])
    figs = _capture_figures(monkeypatch)
    main = [full_result("frozen", "a", 0.7, k=384)] + [full_result(m, "a", 0.5) for m in ("truncate", "mrl", "dive")]
    main_study(main, ctx(["frozen", "truncate", "mrl", "dive"], ["a"])).figure("unused.png")
    tuned = [full_result("frozen", "a", 0.7, k=384), full_result("mrl-tuned", "a", 0.6, mtype="mrl"),
             full_result("dive", "a", 0.5)]
    tuned_study(tuned, ctx(["frozen", "mrl-tuned", "dive"], ["a"])).figure("unused.png")
    variants = [full_result(m, "a", 0.5, mtype="dive") for m in ("dive-softplus", "dive-noview", "dive")]
    ablation_study(variants, ctx(["dive-softplus", "dive-noview", "dive"], ["a"])).figure("unused.png")
    assert _bar_colors(figs[0]) == {"frozen": FROZEN_BAR, "truncate": "#1f77b4", "mrl": "#d62728", "dive": "#e377c2"}
    assert _bar_colors(figs[1]) == {"frozen": FROZEN_BAR, "mrl-tuned": "#d62728", "dive": "#e377c2"}
    drawn = _bar_colors(figs[2])
    assert list(drawn) == ["dive-softplus", "dive-noview", "dive"] and len(set(drawn.values())) == 3
    assert not any(map(_is_grey, drawn.values()))
    front = [{"dataset": "a", "backbone": "minilm", "n_queries": 10, "rows": [
        {"method": m, "dim": dim, "encoding": "float32", "bytes_per_vector": 4 * dim, "ndcg@10": v, "recall@10": v,
         "pareto": True, "rescore_oversample": None, "seed": 2027}
        for m, dim, v in (("frozen", 384, 0.7), ("mrl", 64, 0.5), ("dive", 64, 0.6))]}]
    frontier_study(front, ctx(["frozen", "mrl", "dive"], ["a"])).figure("unused.png")
    from matplotlib.colors import to_hex

    points = [to_hex(c.get_facecolor()[0]) for c in figs[3].axes[0].collections]
    assert points == ["#595959", "#d62728", "#e377c2"]  # frozen "0.35", then mrl's and dive's colours




# -- arrival: nDCG@10 per stratum (known / new / mixed relevant documents) -------------------------
STRATA_6 = {"known": ["q1", "q2"], "new": ["q3", "q4"], "mixed": ["q5", "q6"]}


def arrival_manifest(dataset, test_strata, docs=50, arriving=10):
    empty = {s: [] for s in ("known", "new", "mixed")}
    return {"dataset": dataset, "seed": 2027, "fraction": 0.2, "new_query_share": 0.2, "rule": "…",
            "counts": {"docs": docs, "arriving": arriving, "known": docs - arriving},
            "strata": {"train": empty, "validation": empty, "test": test_strata}, "arriving": [], "taken": {}}


def arrival_runs(tmp_path, scores, types=None, ks=None):
    """Result records and their per-query TSVs: ``scores``: ``{(method, seed): {query: nDCG@10}}``."""
    from dive_core.evaluation import write_per_query

    results, per_query = [], {}
    for (method, seed), by_q in scores.items():
        r = full_result(method, "a", sum(by_q.values()) / len(by_q), seed=seed, mtype=(types or {}).get(method),
                        seen=(len(by_q), 0.5), k=(ks or {}).get(method, 64))
        path = tmp_path / f"{method}-{seed}.tsv"
        write_per_query(path, {q: {"ndcg@10": v, "recall@10": v, "recall@100": v, "mrr@10": v, "seen": 1}
                               for q, v in by_q.items()})
        results.append(r)
        per_query[run_key(r)] = str(path)
    return results, per_query


def arrival_example(tmp_path, strata=STRATA_6):
    q = lambda *vs: dict(zip(("q1", "q2", "q3", "q4", "q5", "q6"), vs))  # noqa: E731
    scores = {("frozen", 2027): q(0.9, 0.7, 0.5, 0.3, 0.6, 0.4),          # known 0.8, new 0.4, mixed 0.5
              ("pca-arrival", 2027): q(0.6, 0.4, 0.1, 0.1, 0.3, 0.3),     # known 0.5, new 0.1, mixed 0.3
              ("pca-arrival", 2028): q(0.8, 0.6, 0.3, 0.1, 0.5, 0.3),     # known 0.7, new 0.2, mixed 0.4
              ("dive-arrival", 2027): q(0.7, 0.7, 0.2, 0.4, 0.3, 0.3)}    # known 0.7, new 0.3, mixed 0.3
    results, per_query = arrival_runs(tmp_path, scores, types={"pca-arrival": "pca", "dive-arrival": "dive"},
                                      ks={"frozen": 384})
    return results, ctx(["frozen", "pca-arrival", "dive-arrival"], ["a"], per_query=per_query,
                        arrival={"a": arrival_manifest("a", strata)})


def test_arrival_stratum_means_and_counts(tmp_path):
    from dive_core.studies import STUDIES
    from dive_core.studies.arrival import arrival_study

    assert STUDIES["arrival"] is arrival_study
    results, c = arrival_example(tmp_path)
    out = arrival_study(results, c)
    got = {(r["method"], r["stratum"]): (r["n_queries"], r["n_seeds"], r["ndcg@10"], r["ndcg@10_std"])
           for r in out.rows}
    assert set(got) == {(m, s) for m in c.methods for s in ("all", "known", "new", "mixed")}
    assert got[("frozen", "known")][:3] == (2, 1, pytest.approx(0.8))
    assert got[("frozen", "new")][2] == pytest.approx(0.4) and got[("frozen", "mixed")][2] == pytest.approx(0.5)
    assert got[("frozen", "all")][:3] == (6, 1, pytest.approx(3.4 / 6))  # the record's own nDCG@10
    assert got[("pca-arrival", "known")] == (2, 2, pytest.approx(0.6), pytest.approx(0.02 ** 0.5))
    assert got[("pca-arrival", "new")][2:] == (pytest.approx(0.15), pytest.approx(0.005 ** 0.5))
    assert got[("pca-arrival", "mixed")][2] == pytest.approx(0.35)
    assert [got[("dive-arrival", s)][2] for s in ("known", "new", "mixed")] == pytest.approx([0.7, 0.3, 0.3])
    assert out.rows[0]["seeds"] == [2027] and got[("pca-arrival", "all")][1] == 2
    lines = out.markdown.splitlines()
    assert "| method | k | a all (n=6) | a known (n=2) | a new (n=2) | a mixed (n=2) |" in lines
    # bold: the best compressed method per column (frozen, the highest, is the reference)
    assert "| frozen | 384 | 0.5667 | 0.8000 | 0.4000 | 0.5000 |" in lines
    assert "| pca-arrival | 64 | 0.3667 ± 0.0943 | 0.6000 ± 0.1414 | 0.1500 ± 0.0707 | **0.3500 ± 0.0707** |" in lines
    assert "| dive-arrival | 64 | **0.4333** | **0.7000** | **0.3000** | 0.3000 |" in lines
    assert ("Arrival split of a: fraction 0.2, 10 of 50 documents arrive after training, seed 2027; "
            "the rule is in results/a/arrival.json (`rule`).") in lines
    # paired: every compressed method vs frozen, dive vs the best label-free method (pca) per stratum
    paired = [l.split(" | ")[2:7] for l in lines if l.startswith("| minilm | a | ")]
    assert paired == [["known", "2", "pca-arrival", "frozen", "-0.2000"],
                      ["known", "2", "dive-arrival", "frozen", "-0.1000"],
                      ["known", "2", "dive-arrival", "pca-arrival", "+0.1000"],
                      ["new", "2", "pca-arrival", "frozen", "-0.2500"],
                      ["new", "2", "dive-arrival", "frozen", "-0.1000"],
                      ["new", "2", "dive-arrival", "pca-arrival", "+0.1500"],
                      ["mixed", "2", "pca-arrival", "frozen", "-0.1500"],
                      ["mixed", "2", "dive-arrival", "frozen", "-0.2000"],
                      ["mixed", "2", "dive-arrival", "pca-arrival", "-0.0500"]]


def test_arrival_empty_stratum_prints_n0_and_is_not_tested(tmp_path):
    from dive_core.studies.arrival import arrival_study

    results, c = arrival_example(tmp_path, strata={"known": ["q1", "q2", "q5", "q6"], "new": ["q3", "q4"], "mixed": []})
    out = arrival_study(results, c)
    lines = out.markdown.splitlines()
    assert "| method | k | a all (n=6) | a known (n=4) | a new (n=2) | a mixed (n=0) |" in lines
    dive = next(l for l in lines if l.startswith("| dive-arrival |"))
    assert dive.endswith("| **0.3000** | – (n=0) |") and "**0.5000**" in dive  # known: (0.7+0.7+0.3+0.3)/4
    assert not [l for l in lines if l.startswith("| minilm | a | mixed")]
    mixed = next(r for r in out.rows if (r["method"], r["stratum"]) == ("frozen", "mixed"))
    assert mixed["n_queries"] == 0 and mixed["ndcg@10"] != mixed["ndcg@10"]  # NaN: no score
    out.figure(tmp_path / "empty.png")  # an empty stratum is drawn as such, not an error
    assert (tmp_path / "empty.png").stat().st_size > 0


def test_arrival_supervised_methods_against_the_best_label_free_of_each_stratum(tmp_path):
    from dive_core.studies.arrival import arrival_study

    q = lambda *vs: dict(zip(("q1", "q2", "q3", "q4", "q5", "q6"), vs))  # noqa: E731
    scores = {("frozen", 1): q(0.9, 0.9, 0.9, 0.9, 0.9, 0.9),
              ("truncate", 1): q(0.8, 0.8, 0.1, 0.1, 0.2, 0.2),  # best label-free on known
              ("pca-arrival", 1): q(0.5, 0.5, 0.6, 0.6, 0.3, 0.3),  # ... on new
              ("autoencoder-arrival", 1): q(0.1, 0.1, 0.2, 0.2, 0.7, 0.7),  # ... on mixed
              ("mrl-arrival", 1): q(0.9, 0.9, 0.9, 0.9, 0.9, 0.9),  # above every label-free method
              ("dive-arrival", 1): q(0.6, 0.6, 0.6, 0.6, 0.6, 0.6)}
    types = {"pca-arrival": "pca", "autoencoder-arrival": "autoencoder", "mrl-arrival": "mrl", "dive-arrival": "dive"}
    results, per_query = arrival_runs(tmp_path, scores, types=types, ks={"frozen": 384})
    methods = [m for m, _ in scores]
    c = ctx(methods, ["a"], per_query=per_query, arrival={"a": arrival_manifest("a", STRATA_6)})
    out = arrival_study(results, c)
    vs = {(cells[2], cells[4], cells[5], cells[6]) for cells in
          (l.split(" | ") for l in out.markdown.splitlines() if l.startswith("| minilm | a | "))
          if cells[5] != "frozen"}
    assert vs == {("known", "mrl-arrival", "truncate", "+0.1000"), ("known", "dive-arrival", "truncate", "-0.2000"),
                  ("new", "mrl-arrival", "pca-arrival", "+0.3000"),
                  ("new", "dive-arrival", "pca-arrival", "+0.0000"),
                  ("mixed", "mrl-arrival", "autoencoder-arrival", "+0.2000"),
                  ("mixed", "dive-arrival", "autoencoder-arrival", "-0.1000"),
                  # and every compressed method against the backbone's own truncation, in each stratum
                  ("known", "pca-arrival", "truncate", "-0.3000"), ("new", "pca-arrival", "truncate", "+0.5000"),
                  ("mixed", "pca-arrival", "truncate", "+0.1000"),
                  ("known", "autoencoder-arrival", "truncate", "-0.7000"),
                  ("new", "autoencoder-arrival", "truncate", "+0.1000"),
                  ("mixed", "autoencoder-arrival", "truncate", "+0.5000"),
                  ("new", "mrl-arrival", "truncate", "+0.8000"), ("mixed", "mrl-arrival", "truncate", "+0.7000"),
                  ("new", "dive-arrival", "truncate", "+0.5000"), ("mixed", "dive-arrival", "truncate", "+0.4000")}
    # every compressed method, label-free ones too, is tested against frozen in each stratum
    against_frozen = [l for l in out.markdown.splitlines() if l.startswith("| minilm | a | ") and "| frozen |" in l]
    assert len(against_frozen) == 3 * 5


def test_arrival_per_query_file_lacking_a_stratum_query_is_refused(tmp_path):
    from dive_core.records import RecordError
    from dive_core.studies.arrival import arrival_study

    results, c = arrival_example(tmp_path, strata={**STRATA_6, "mixed": ["q5", "q6", "q7"]})
    with pytest.raises(RecordError, match=r"frozen-2027\.tsv: no row for 1 of the 3 mixed test queries.*'q7'"):
        arrival_study(results, c)


def test_arrival_figure_is_written_with_strata_and_their_n(tmp_path, monkeypatch):
    from matplotlib.colors import to_hex

    from dive_core.studies import arrival
    from dive_core.studies.arrival import arrival_study

    results, c = arrival_example(tmp_path)
    out = arrival_study(results, c)
    out.figure(tmp_path / "arrival.png")
    assert (tmp_path / "arrival.png").stat().st_size > 10_000  # a drawn PNG, not an empty file
    figs = []
    monkeypatch.setattr(arrival, "save", lambda fig, path: figs.append(fig))
    out.figure("unused.png")
    ax = figs[0].axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["known\n(n=2)", "new\n(n=2)", "mixed\n(n=2)"]
    assert ax.get_ylim()[0] == 0
    heights = sorted(round(p.get_height(), 4) for p in ax.patches)
    assert heights == sorted([0.8, 0.4, 0.5, 0.6, 0.15, 0.35, 0.7, 0.3, 0.3])
    legend = figs[0].legends[0]
    labels = [t.get_text() for t in legend.get_texts()]
    assert labels == ["frozen (uncompressed, 384d)", "pca-arrival", "dive-arrival"]
    frozen = [p for p in ax.patches if p.get_hatch() == "//"]
    assert len(frozen) == 3 and {to_hex(p.get_facecolor()) for p in frozen} == {FROZEN_BAR}
    assert {to_hex(p.get_facecolor()) for p in ax.patches if p.get_hatch() != "//"} == {"#ff7f0e", "#e377c2"}


def test_arrival_table_opens_with_the_selection_record_its_variants_trained_with(tmp_path):
    """The time, sha256 and pick of each arrival_variants record come before any test number."""
    from dive_core.studies.arrival import arrival_study

    results, ctx = arrival_example(tmp_path, STRATA_6)
    ctx.picks = {"results/selection/minilm/arrival_variants.json": {
        "created_utc": "2026-11-25T06:43:32+00:00", "sha256": "ab" * 32, "criterion": "best `new`.",
        "tolerance": 0.01, "references": [{"method": "dive-arrival"}, {"method": "mrl-arrival"}],
        "methods": {"dive-pcainit": {"pick": {"method": "dive-pcainit-gammageo10-arrival", "overrides": {"gamma_geo": 10.0},
                                              "mean": 0.61, "mean_known": 0.72, "qualified": True}}}}}
    md = arrival_study(results, ctx).markdown
    row = ("| `results/selection/minilm/arrival_variants.json` | 2026-11-25T06:43:32+00:00 | `abababababababab` | "
           "dive-pcainit | gamma_geo = 10.0 | 0.6100 | 0.7200 | yes |")
    assert row in md and md.index(row) < md.index("### nDCG@10 by stratum")
    assert "references dive-arrival, mrl-arrival" in md


@pytest.mark.parametrize("nrows", [1, 2])
def test_a_figure_title_sits_just_above_its_panels(nrows):
    """suptitle wraps a long title and leaves it room: no overlap with the top panel's title, and
    no empty band between them (a reserved rect on top of tight_layout's own room left 0.6 inch)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(nrows, 1, figsize=(9, 4.4 * nrows), dpi=120, squeeze=False)
    for ax in axes.flat:
        ax.bar([0, 1], [0.5, 0.6])
        ax.set_title("scifact")
    shared.suptitle(fig, "arrival_mine: held-out test queries, backbone mine, primary dimension - my embeddings: "
                         "every fit sees only the documents known at training time: nDCG@10 by stratum")
    renderer = fig.canvas.get_renderer()
    title = fig._suptitle.get_window_extent(renderer)
    panel = axes[0, 0].title.get_window_extent(renderer)
    gap_inches = (title.y0 - panel.y1) / fig.dpi
    plt.close(fig)
    assert title.get_points()[1, 1] <= fig.bbox.height + 1, "the title is cut off at the top"
    assert 0 <= gap_inches < 0.35, gap_inches


# -- learning-rate audit ------------------------------------------------------------------------
def audit_entry(means, pick):
    """Three lr candidates with the given mean validation nDCG@10, ``pick`` the picked index."""
    lrs = [1e-4, 2e-4, 5e-4]
    cands = [{"method": f"mrl-lr{lr:g}", "overrides": {"lr": lr}, "mean": m, "per_dataset": {"ds": m}}
             for lr, m in zip(lrs, means)]
    return {"candidates": cands, "pick": {k: cands[pick][k] for k in ("method", "overrides", "mean")}}


def test_lr_audit_pick_margin_and_grid_edge():
    from dive_core.studies.lr_audit import pick_margin

    # MiniLM's audit on the EPYC: 0.5136 / 0.5115 / 0.4901, lowest lr picked: lead 0.0021, at the edge
    m = pick_margin(audit_entry([0.5136, 0.5115, 0.4901], 0))
    assert m["lead"] == pytest.approx(0.0021) and m["runner_up"] == "lr=0.0002"
    assert m["edge"] == {"lr": "lowest"}
    m = pick_margin(audit_entry([0.37, 0.39, 0.40], 2))           # highest lr picked, lead 0.01
    assert m["lead"] == pytest.approx(0.01) and m["edge"] == {"lr": "highest"}
    m = pick_margin(audit_entry([0.50, 0.52, 0.49], 1))           # interior pick: no edge
    assert m["lead"] == pytest.approx(0.02) and m["runner_up"] == "lr=0.0001" and m["edge"] == {}


def test_lr_audit_table_says_how_firmly_each_pick_stands():
    from dive_core.studies.lr_audit import lr_audit_study

    sel = {"backbone": "minilm", "seed": 2027, "datasets": ["ds"],
           "methods": {"mrl": audit_entry([0.5136, 0.5115, 0.4901], 0),
                       "smec": audit_entry([0.50, 0.52, 0.49], 1)},
           "reference": {"method": "dive", "mean": 0.5016, "per_dataset": {"ds": 0.5016}}}
    out = lr_audit_study([], ctx(["mrl", "smec"], ["ds"], selection=sel))
    assert "- mrl: lr=0.0001, +0.0021 over lr=0.0002; the lowest lr of the grid." in out.markdown
    assert "- smec: lr=0.0002, +0.0200 over lr=0.0001." in out.markdown


def budget_test_rows():
    """The budget tests' test records over tests/test_selection.py's VAL codes, four queries: seed 2027's
    rows (with frozen float32 at 0.75) and the repeat at 2029 (their values in the tests' docstrings)."""
    from test_selection import VAL, code

    def test_rows(values, seed=2027):
        return [code(x["method"], x["encoding"], x["bytes_per_vector"], values[i], x["supervised"], seed=seed)
                for i, x in enumerate(VAL)]

    rows = test_rows([(0.6,) * 4, (0.9, 0.7, 0.9, 0.7), (0.9, 0.8, 0.9, 0.8), (0.5,) * 4, (0.7,) * 4, (1.0,) * 4])
    rows.append(code("frozen", "float32", 1536, (0.75,) * 4, False, dim=384))
    return rows, test_rows([(0.4,) * 4, (0.7,) * 4, (0.75,) * 4, (0.5,) * 4, (0.5,) * 4, (1.0,) * 4], seed=2029)


def test_the_budget_study_picks_on_validation_and_scores_the_picks_on_test_over_their_seeds(monkeypatch):
    """Validation rows: tests/test_selection.py's VAL (picks: 16 B DIVE pq16, 32 B MRL sq4, 64 B MRL sq8,
    256 B MRL float32; the label-free pick from 64 B PCA sq8). Test, four queries (seen: the first two),
    seed 2027 and a repeat at 2029: MRL sq4 0.6 / 0.4, MRL sq8 (0.9, 0.7, 0.9, 0.7) / 0.7, float32
    (0.9, 0.8, 0.9, 0.8) / 0.75, PCA sq8 0.5 / 0.5, DIVE pq16 0.7 / 0.5; frozen float32 0.75 (one seed).
    At 64 B: MRL sq8's mean over seeds 0.75, per query (0.8, 0.7, 0.8, 0.7) - PCA's 0.5 = +0.25 (all four
    of one sign: p ~ 2/16), - frozen's 0.75 = 0; its regret 0 (the best of at most 64 B on test). At 32 B
    MRL sq4 scores 0.5 and DIVE pq16 (16 B, 0.7 at seed 2027) beats it on test: regret 0.1. At 8 B no
    code fits: no entry."""
    from test_selection import VAL, code

    rows, repeat = budget_test_rows()
    seen = [1, 1, 0, 0]
    val = [*VAL, code("frozen", "float32", 1536, (0.6,) * 4, False, dim=384)]
    entries = {e["budget"]: e for e in budget.budget_entries({"rows": rows, "seen": seen}, val, [repeat],
                                                            [8, 16, 32, 64, 256])}
    assert sorted(entries) == [16, 32, 64, 256]
    e64 = entries[64]
    assert (e64["pick"]["method"], e64["pick"]["encoding"]) == ("mrl", "sq8") and e64["pick_seeds"] == [2027, 2029]
    assert e64["pick_test"] == pytest.approx(0.75) and e64["label_free_test"] == pytest.approx(0.5)
    assert e64["tests"]["all"]["vs_label_free"]["diff"] == pytest.approx(0.25)
    assert abs(e64["tests"]["all"]["vs_label_free"]["p"] - 0.125) < 0.02
    assert e64["tests"]["all"]["vs_frozen"]["diff"] == pytest.approx(0.0)
    assert e64["tests"]["seen"]["vs_frozen"]["n"] == 2
    assert e64["pick_regret"] == pytest.approx(0.0) and e64["label_free_regret"] == pytest.approx(0.0)
    assert entries[32]["pick_test"] == pytest.approx(0.5) and entries[32]["pick_regret"] == pytest.approx(0.1)
    assert entries[32]["pick_best_on_test"]["encoding"] == "pq16"
    assert entries[16]["label_free"] is None and entries[16]["tests"]["all"]["vs_label_free"] is None
    assert entries[256]["pick"]["encoding"] == "float32" and entries[256]["pick_test"] == pytest.approx(0.8)
    # through the study: the table and its rows; validation records are required and must match
    rec = {"dataset": "scifact", "backbone": "minilm", "n_queries": 4, "query_ids": list("abcd"), "seen": seen,
           "rows": rows}
    c = ctx([], ["scifact"], budgets=[8, 16, 32, 64, 256])
    c.repeats = [{"dataset": "scifact", "backbone": "minilm", "query_ids": list("abcd"), "rows": repeat}]
    c.validation = [{"dataset": "scifact", "backbone": "minilm", "stage": "select", "role": "validation",
                     "n_queries": 4, "rows": val}]
    out = budget.budget_study([rec], c)
    assert "| 64 | **mrl 64d sq8** | 64 | 0.6750 | 0.7500 | 2 | 0.7000-0.8000 | pca 64d sq8 | 64 | 0.6875 | 0.5000 | 2 |" \
        in out.markdown
    assert "Each pick reads validation queries only" in out.markdown
    assert [r["budget"] for r in out.rows] == [16, 32, 64, 256] and out.rows[1]["pick_regret"] == pytest.approx(0.1)
    figs = _capture_figures(monkeypatch)
    monkeypatch.setattr(budget, "save", lambda fig, path: figs.append(fig))
    out.figure("unused.png")
    assert len(figs) == 1 and figs[0].axes[0].get_xticklabels()[0].get_text() == "16 B"
    c.validation = []
    with pytest.raises(ValueError, match="no frontier_validation record"):
        budget.budget_study([rec], c)
    c.validation = [{"dataset": "scifact", "backbone": "minilm", "stage": "final", "role": "test", "rows": val}]
    with pytest.raises(ValueError, match="not the validation queries"):
        budget.budget_study([rec], c)


def test_a_budget_studys_latency_limit_leaves_the_slower_codes_out_of_the_picks():
    """The budget test's records, each validation code timed: MRL sq4 0.3 ms, sq8 0.5, float32 2.0, PCA sq8
    0.4, DIVE pq16 0.2, MRL's re-scored 1-bit code 0.1, frozen float32 3.0. Limit 1 ms: MRL float32 and
    frozen float32 are out, so at 256 B the pick is MRL's level code of most bytes left, sq8 (64 B), whose
    test mean over its seeds is 0.75; the best on test among the codes within the limit is that sq8 (0.8 at
    seed 2027, against float32's 0.85 outside it): regret 0. Frozen float32 stays the reference (0.75). The
    table says the limit, the 2 of 7 codes over it, the fastest of them, each pick's latency. A limit no code
    meets (0.05 ms) is refused naming the key and the fastest code; so are codes timed without latency."""
    from test_selection import VAL, code

    rows, repeat = budget_test_rows()
    timed = [{**x, "latency_ms": ms} for x, ms in zip(VAL, (0.3, 0.5, 2.0, 0.4, 0.2, 0.1))]
    val = [*timed, {**code("frozen", "float32", 1536, (0.6,) * 4, False, dim=384), "latency_ms": 3.0}]
    rec = {"dataset": "scifact", "backbone": "minilm", "n_queries": 4, "query_ids": list("abcd"), "seen": [1, 1, 0, 0],
           "rows": rows}
    c = ctx([], ["scifact"], budgets=[8, 16, 32, 64, 256], max_latency_ms=1.0)
    c.repeats = [{"dataset": "scifact", "backbone": "minilm", "query_ids": list("abcd"), "rows": repeat}]
    c.validation = [{"dataset": "scifact", "backbone": "minilm", "stage": "select", "role": "validation",
                     "n_queries": 4, "rows": val, "runtime": {"cpu": "AMD EPYC"}}]
    out = budget.budget_study([rec], c)
    by = {r["budget"]: r for r in out.rows}
    assert by[256]["pick"] == "mrl 64d sq8" and by[256]["pick_test"] == pytest.approx(0.75)
    assert by[256]["best_on_test"] == "mrl 64d sq8" and by[256]["pick_regret"] == pytest.approx(0.0)
    assert by[256]["frozen_test"] == pytest.approx(0.75) and by[256]["pick_latency_ms"] == 0.5
    assert by[64]["pick"] == "mrl 64d sq8" and by[64]["label_free_latency_ms"] == 0.4
    assert ("Latency limit: 1 ms a query (one query searched alone at k = 10 on one thread, the median over 4 "
            "validation queries, on AMD EPYC). 2 of 7 codes are over it and are no candidates; the fastest of "
            "them, mrl 64d float32, takes 2.000 ms.") in out.markdown
    assert "| 256 | mrl 64d sq8 | 0.500 | pca 64d sq8 | 0.400 |" in out.markdown
    unlimited = budget.budget_study([rec], ctx([], ["scifact"], budgets=[256], validation=c.validation,
                                               repeats=c.repeats))
    assert unlimited.rows[0]["pick"] == "mrl 64d float32" and "Latency limit" not in unlimited.markdown
    assert "pick_latency_ms" not in unlimited.rows[0]
    c.max_latency_ms = 0.05
    with pytest.raises(ValueError, match=r"config: experiments.t.max_latency_ms = 0.05: no code meets it on this "
                                         r"machine; the fastest, mrl 64d binary_rescore, takes 0.100 ms a query"):
        budget.budget_study([rec], c)
    c.max_latency_ms, c.validation[0]["rows"] = 1.0, [*VAL, val[-1]]
    with pytest.raises(ValueError, match=r"max_latency_ms = 1: mrl 64d sq4 \(and 5 more codes\) was scored "
                                         "without a latency measurement"):
        budget.budget_study([rec], c)


def test_an_arrival_budget_study_picks_on_the_configured_stratum_of_the_validation_queries(monkeypatch):
    """arrival_codes records (experiments.budget_arrival): four validation queries (known: v1, v2; new:
    v3, v4) and four test queries (known: a, b; new: c, d; no mixed). At 8 B: dive-arrival pq8 (supervised)
    scores (0.9, 0.9, 0.1, 0.1) on validation, mean 0.5; frozen pq8 (0.5, 0.5, 0.4, 0.4), 0.45. Weighing
    every validation query the pick is DIVE's code (test 0.6 against the label-free pick's 0.55: known +0.4,
    new -0.3); weighing `new` (DIVE 0.1, frozen 0.4) it is frozen pq8, reported on the new test queries:
    0.5 against frozen float32's 0.8 there, regret 0 on them. An empty stratum cannot be weighed."""
    from test_selection import code

    def rec(qids, strata, rows, stage="final"):
        return {"dataset": "scifact", "backbone": "minilm", "stage": stage,
                "role": "test" if stage == "final" else "validation", "n_queries": len(qids), "query_ids": qids,
                "strata": strata, "rows": rows}

    val = rec(["v1", "v2", "v3", "v4"], {"known": ["v1", "v2"], "new": ["v3", "v4"], "mixed": []},
              [code("dive-arrival", "pq8", 8, (0.9, 0.9, 0.1, 0.1), method_type="dive"),
               code("frozen", "pq8", 8, (0.5, 0.5, 0.4, 0.4), False, dim=384),
               code("frozen", "float32", 1536, (0.9,) * 4, False, dim=384)], stage="select")
    test = rec(list("abcd"), {"known": ["a", "b"], "new": ["d", "c"], "mixed": []},
               [code("dive-arrival", "pq8", 8, (1.0, 1.0, 0.2, 0.2), method_type="dive"),
                code("frozen", "pq8", 8, (0.6, 0.6, 0.5, 0.5), False, dim=384),
                code("frozen", "float32", 1536, (0.8,) * 4, False, dim=384)])
    groups = budget.query_groups(val)
    assert groups == {"all": [0, 1, 2, 3], "known": [0, 1], "new": [2, 3], "mixed": []}
    e = budget.budget_entries(test, val["rows"], [], [8])[0]
    assert (e["pick"]["method"], e["label_free"]["method"]) == ("dive-arrival", "frozen")
    assert e["pick_test"] == pytest.approx(0.6) and e["label_free_test"] == pytest.approx(0.55)
    assert e["tests"]["known"]["vs_label_free"]["diff"] == pytest.approx(0.4)
    assert e["tests"]["new"]["vs_label_free"]["diff"] == pytest.approx(-0.3)
    assert e["tests"]["mixed"]["vs_frozen"] == {"n": 0, "diff": None, "p": None}
    e = budget.budget_entries(test, val["rows"], [], [8], groups["new"], "new")[0]
    assert (e["pick"]["method"], e["pick"]["encoding"]) == ("frozen", "pq8")
    assert e["pick_validation"] == pytest.approx(0.4) and e["pick_test"] == pytest.approx(0.5)
    assert e["frozen_test"] == pytest.approx(0.8) and e["pick_regret"] == pytest.approx(0.0)
    assert e["tests"]["new"]["vs_frozen"]["diff"] == pytest.approx(-0.3)
    with pytest.raises(ValueError, match="the validation queries have an empty `mixed` stratum"):
        budget.budget_entries(test, val["rows"], [], [8], groups["mixed"], "mixed")
    # through the study: the stratum named in the text and the headings, the arrival rule's record required
    c = ctx([], ["scifact"], budgets=[8], stratum="new")
    c.validation = [val]
    out = budget.budget_study([test], c)
    assert "those of stratum `new`" in out.markdown and "| budget B | pick | B | val nDCG@10 (new) |" in out.markdown
    assert "| 8 | **frozen 384d pq8** | 8 | 0.4000 | 0.5000 | 1 | one seed |" in out.markdown
    assert "| budget B | known n | pick - label-free | pick - frozen | new n |" in out.markdown
    assert out.rows[0]["stratum"] == "new" and out.rows[0]["new_vs_frozen_diff"] == pytest.approx(-0.3)
    c.validation = []
    with pytest.raises(ValueError, match="no arrival_codes_validation record"):
        budget.budget_study([test], c)
