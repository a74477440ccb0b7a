"""DIVE's ablation: each variant's validation nDCG@10 against full DIVE."""

from __future__ import annotations

import math
from typing import Mapping, Sequence

from .shared import (
    StudyContext, StudyOutput, cell, grouped_bars, opening_lines, method_values, paired_against, paired_columns,
    roles, study_backbones, summarize_runs,
)


def ablation_study(results: Sequence[Mapping], ctx: StudyContext) -> StudyOutput:
    """Mean validation nDCG@10 over datasets and per dataset for each DIVE variant, with the
    difference to the last method (full DIVE), and each variant's paired test against it per dataset."""
    summary = summarize_runs(results)
    bbs = study_backbones(results, ctx)
    full = ctx.methods[-1]
    section, pairs = paired_against(
        results, ctx, full, f"Each variant against {full}",
        f"Each variant (one change to {full}, every other setting {full}'s) against {full} on the same "
        f"{roles(results)} queries, seed and triplets")
    lines = opening_lines(ctx, results)
    rows = []
    for bb in bbs:
        head = ["variant"] + [f"{ds} nDCG@10" for ds in ctx.datasets] + ["mean nDCG@10", f"Δ mean vs {full}"]
        lines += ([f"### backbone {bb}", ""] if len(bbs) > 1 else []) + ["| " + " | ".join(head) + " |",
                                                                          "|" + "---|" * len(head)]
        both = {me: method_values(summary, bb, me, "ndcg@10", ctx) for me in ctx.methods}
        vals = {me: v for me, (v, _) in both.items()}
        means = {me: m for me, (_, m) in both.items()}
        for me in ctx.methods:
            cells = [me] + [cell(vals[me].get(ds, float("nan"))) for ds in ctx.datasets]
            cells += [cell(means[me]), "–" if me == full or math.isnan(means[me] - means[full])
                      else f"{means[me] - means[full]:+.4f}"]
            lines.append("| " + " | ".join(cells) + " |")
            rows.append({"backbone": bb, "method": me, **{f"{ds}_ndcg@10": vals[me].get(ds) for ds in ctx.datasets},
                         "mean_ndcg@10": means[me], **paired_columns(pairs, bb, me, ctx.datasets, full)})
        lines.append("")
    lines.append("Seed " + ",".join(sorted({str(r["seed"]) for r in results})) + "; `mean`: unweighted mean "
                 "over datasets (a dataset group averaged first).")
    return StudyOutput("\n".join(lines) + "\n" + section, rows,
                       lambda p: grouped_bars(p, summary, ctx, bbs, metrics=(("ndcg@10", "nDCG@10"),)))
