"""Held-out results at the audited learning rates, and DIVE against the strongest tuned baseline."""

from __future__ import annotations

from typing import Mapping, Sequence

from .main import main_study
from .shared import StudyContext, StudyOutput


def tuned_study(results: Sequence[Mapping], ctx: StudyContext) -> StudyOutput:
    """Held-out results with the audited learning rates: the main table, and DIVE against the
    strongest tuned baseline of the same dataset and seed (the paper's nine comparisons)."""
    out = main_study(results, ctx)
    by = {}
    for r in results:
        by.setdefault((r["backbone"], r["dataset"], r["seed"]), []).append(r)
    lines = ["", "### DIVE against the strongest tuned baseline, per dataset and seed", "",
             "| backbone | dataset | seed | DIVE nDCG@10 | strongest tuned baseline | its nDCG@10 | Δ |",
             "|---|---|---|---|---|---|---|"]
    wins = total = 0
    rows = []
    for (bb, ds, seed), rs in sorted(by.items()):
        dive = [r for r in rs if r["method_type"] == "dive"]
        base = [r for r in rs if r["method_type"] not in ("dive", "frozen")]
        if not dive or not base:
            continue
        d = max(dive, key=lambda r: r["metrics"]["ndcg@10"])
        b = max(base, key=lambda r: r["metrics"]["ndcg@10"])
        diff = d["metrics"]["ndcg@10"] - b["metrics"]["ndcg@10"]
        wins += diff > 0
        total += 1
        rows.append({"backbone": bb, "dataset": ds, "seed": seed, "dive": d["metrics"]["ndcg@10"],
                     "baseline": b["method"], "baseline_ndcg@10": b["metrics"]["ndcg@10"], "diff": diff})
        lines.append(f"| {bb} | {ds} | {seed} | {d['metrics']['ndcg@10']:.4f} | {b['method']} | "
                     f"{b['metrics']['ndcg@10']:.4f} | {diff:+.4f} |")
    lines += ["", f"DIVE exceeds the strongest tuned baseline in **{wins} of {total}** dataset-seed comparisons."]
    return StudyOutput(out.markdown + "\n".join(lines) + "\n", out.rows + rows, out.figure)
