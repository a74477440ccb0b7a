"""Head sensitivity: validation nDCG@10 against the number of heads H."""

from __future__ import annotations

from typing import Mapping, Sequence

from .shared import (
    StudyContext, StudyOutput, cell, column_label, opening_lines, method_values, paired_against, paired_columns,
    pyplot, roles, save, study_backbones, summarize_runs, suptitle,
)


def heads_study(results: Sequence[Mapping], ctx: StudyContext) -> StudyOutput:
    """Validation nDCG@10 against the number of heads H, per dataset; the configured H marked, and
    each other head count's paired test against it per dataset."""
    summary = summarize_runs(results)
    bbs = study_backbones(results, ctx)
    heads = {me: next(int(r["config"]["hparams"]["heads"]) for r in results if r["method"] == me)
             for me in ctx.methods if any(r["method"] == me for r in results)}
    ref = ctx.highlight
    section, pairs = ("", {}) if ref is None else paired_against(
        results, ctx, ref, "Each head count against the configured H",
        f"Each other head count against the configured H ({ref}, H = {heads.get(ref, '?')}) on the same "
        f"{roles(results)} queries, seed and triplets, every other setting fixed")
    lines = opening_lines(ctx, results, f"Note: {ctx.note}." if ctx.note else "")
    rows = []
    for bb in bbs:
        head = ["H", "method"] + [f"{ds} nDCG@10" for ds in ctx.datasets] + ["mean nDCG@10"]
        lines += ([f"### backbone {bb}", ""] if len(bbs) > 1 else []) + ["| " + " | ".join(head) + " |",
                                                                          "|" + "---|" * len(head)]
        for me in ctx.methods:
            vals, mean = method_values(summary, bb, me, "ndcg@10", ctx)
            mark = " (configured)" if me == ctx.highlight else ""
            lines.append("| " + " | ".join([f"{heads.get(me, '?')}{mark}", me]
                                            + [cell(vals.get(ds, float("nan"))) for ds in ctx.datasets]
                                            + [cell(mean)]) + " |")
            rows.append({"backbone": bb, "heads": heads.get(me), "method": me, "mean_ndcg@10": mean,
                         **{f"{ds}_ndcg@10": vals.get(ds) for ds in ctx.datasets},
                         **({} if ref is None else paired_columns(pairs, bb, me, ctx.datasets, ref))})
        lines.append("")
    lines.append("Validation queries, seed " + ",".join(sorted({str(r["seed"]) for r in results}))
                 + "; every other setting fixed. Not used to change the configured H.")

    def figure(path):
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(6.5, 4.2), dpi=120)
        for bb in bbs:
            for ds in ctx.datasets:
                pts = sorted((heads[me], summary[(bb, ds, me)]["ndcg@10"], me) for me in ctx.methods
                             if (bb, ds, me) in summary)
                if not pts:
                    continue
                line, = ax.plot([h for h, _, _ in pts], [v for _, v, _ in pts], marker="o",
                                label=column_label(ds, bb, len(bbs) > 1))
                for h, v, me in pts:
                    ax.annotate(f"{v:.3f}", (h, v), textcoords="offset points", xytext=(0, 9), ha="center",
                                va="bottom", fontsize=7)  # clear of the 14-pt ring
                    if me == ctx.highlight:
                        ax.plot([h], [v], marker="o", markersize=14, markerfacecolor="none",
                                markeredgecolor=line.get_color(), linewidth=0)
        ax.set_xticks(sorted(set(heads.values())))
        ax.set_xlabel("heads H (ring: configured)")
        ax.set_ylabel("validation nDCG@10")
        ax.margins(y=0.25)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
        suptitle(fig, ctx.title)
        save(fig, path)

    return StudyOutput("\n".join(lines) + "\n" + section, rows, figure)
