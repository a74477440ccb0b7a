"""Held-out results at the audited learning rates, and DIVE against the strongest tuned baseline."""

from __future__ import annotations

from typing import Mapping, Sequence

from .. import report
from .main import main_study
from .shared import StudyContext, StudyOutput


def tuned_study(results: Sequence[Mapping], ctx: StudyContext) -> StudyOutput:
    """Held-out results with the audited learning rates: the main table, and DIVE against the
    strongest tuned baseline of the same dataset and seed (the paper's nine comparisons). A variant
    of DIVE (``report.DIVE_VARIANTS``, e.g. ``dive-pca``) is never a baseline: it gets the same
    comparisons as DIVE, in rows of its own."""
    out = main_study(results, ctx)
    family = (report.DIVE, *report.DIVE_VARIANTS)
    by = {}
    for r in results:
        by.setdefault((r["backbone"], r["dataset"], r["seed"]), []).append(r)
    lines = ["", "### DIVE against the strongest tuned baseline, per dataset and seed", "",
             "| backbone | dataset | seed | method | its nDCG@10 | strongest tuned baseline | baseline nDCG@10 | Δ |",
             "|---|---|---|---|---|---|---|---|"]
    wins: dict[str, list[int]] = {}
    rows = []
    for (bb, ds, seed), rs in sorted(by.items()):
        base = [r for r in rs if r["method_type"] not in (*family, "frozen")]
        if not base:
            continue
        b = max(base, key=lambda r: r["metrics"]["ndcg@10"])
        ours = [r for r in rs if r["method_type"] in family]
        for d in sorted(ours, key=lambda r: (r["method_type"] != report.DIVE, r["method"])):
            diff = d["metrics"]["ndcg@10"] - b["metrics"]["ndcg@10"]
            wins.setdefault(d["method"], []).append(diff > 0)
            rows.append({"backbone": bb, "dataset": ds, "seed": seed, "method": d["method"],
                         "dive": d["metrics"]["ndcg@10"], "baseline": b["method"],
                         "baseline_ndcg@10": b["metrics"]["ndcg@10"], "diff": diff})
            lines.append(f"| {bb} | {ds} | {seed} | {d['method']} | {d['metrics']['ndcg@10']:.4f} | {b['method']} | "
                         f"{b['metrics']['ndcg@10']:.4f} | {diff:+.4f} |")
    lines.append("")
    lines += [f"{m} exceeds the strongest tuned baseline in **{sum(w)} of {len(w)}** dataset-seed comparisons."
              for m, w in wins.items()] or ["DIVE exceeds the strongest tuned baseline in **0 of 0** dataset-seed "
                                            "comparisons."]
    return StudyOutput(out.markdown + "\n".join(lines) + "\n", out.rows + rows, out.figure)
