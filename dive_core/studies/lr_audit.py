"""The learning-rate audit, from its selection record."""

from __future__ import annotations

from typing import Mapping, Sequence

from .shared import (
    StudyContext, StudyOutput, cell, opening_lines, paired_against, paired_columns, pyplot, save, suptitle,
)


def _label(overrides: Mapping) -> str:
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in overrides.items())


def pick_margin(entry: Mapping) -> dict:
    """How firmly a pick stands: its mean minus the best other candidate's (``lead``, with that
    candidate's ``runner_up`` label), and for each numeric hyperparameter on which the pick is the
    lowest or highest of the candidates, ``edge[key]`` = 'lowest' | 'highest' (a better value may
    lie outside the grid). A small lead can flip between CPUs (docs/protocol.md#seeds)."""
    pick = entry["pick"]
    others = [c for c in entry["candidates"] if c["method"] != pick["method"]]
    best = max(others, key=lambda c: c["mean"]) if others else None
    edge = {}
    for key, value in pick["overrides"].items():
        values = [c["overrides"].get(key) for c in entry["candidates"]]
        if len(set(values)) > 1 and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            edge.update({key: "lowest"} if value == min(values) else {key: "highest"} if value == max(values) else {})
    return {"lead": pick["mean"] - best["mean"] if best else float("nan"),
            "runner_up": _label(best["overrides"]) if best else None, "edge": edge}


def picks_against_reference(results: Sequence[Mapping], ctx: StudyContext, sel: Mapping) -> tuple[str, dict]:
    """Each method's picked candidate against the reference (DIVE) per dataset on the same validation
    queries (:func:`.shared.paired_against`: per-query nDCG@10, two-sided paired randomization
    test, 10,000 sign flips; each at its own k): the Markdown section (empty without the reference's
    runs or per-query files) and the rows by (backbone, dataset, picked method)."""
    ref = (sel.get("reference") or {}).get("method")
    if not ref:
        return "", {}
    picks = {entry["pick"]["method"] for entry in sel.get("methods", {}).values()}
    others = sorted({r["method"] for r in results} - picks - {ref})
    return paired_against(
        results, ctx, ref, "Each pick against the reference",
        f"Each baseline at its picked learning rate against {ref} on the same validation queries, seed and "
        "triplets (the paper: every DIVE configuration exceeds the strongest tuned baseline on validation)",
        any_k=True, skip=others)


def lr_audit_study(results: Sequence[Mapping], ctx: StudyContext) -> StudyOutput:
    """The learning-rate audit from its selection JSON: each candidate's validation nDCG@10 per
    dataset and mean, the pick marked, DIVE's validation score as the reference, and each pick's
    paired test against it."""
    sel = ctx.selection or {}
    ref = sel.get("reference") or {}
    datasets = sel.get("datasets", ctx.datasets)
    section, pairs = picks_against_reference(results, ctx, sel)
    lines = opening_lines(ctx, results, "") + [
             "| method | candidate | " + " | ".join(f"{ds} nDCG@10" for ds in datasets) + " | mean nDCG@10 | pick |",
             "|---|---|" + "---|" * len(datasets) + "---|---|"]
    rows = []
    for base, entry in sel.get("methods", {}).items():
        for c in entry["candidates"]:
            picked = c["method"] == entry["pick"]["method"]
            over = _label(c["overrides"])
            lines.append(f"| {base} | {over} | " + " | ".join(cell(c["per_dataset"].get(ds, float('nan')))
                                                           for ds in datasets)
                         + f" | {cell(c['mean'])} | {'**picked**' if picked else ''} |")
            rows.append({"method": base, "candidate": c["method"], **c["overrides"], "mean_ndcg@10": c["mean"],
                         "picked": picked, **{f"{ds}_ndcg@10": v for ds, v in c["per_dataset"].items()},
                         **(paired_columns(pairs, sel.get("backbone", ""), c["method"], datasets, ref["method"])
                            if picked and ref else {})})
    if ref:
        lines.append(f"| {ref['method']} (reference) | fixed | " + " | ".join(
            cell(ref["per_dataset"].get(ds, float("nan"))) for ds in datasets) + f" | {cell(ref['mean'])} | |")
    lines += ["", f"Validation queries (select stage), seed {sel.get('seed')}; selection by the unweighted mean "
              f"validation nDCG@10 over {', '.join(datasets)}. No test query is read. The picks are in "
              f"`results/selection/{sel.get('backbone')}/lr_audit.json`.", "",
              "How firmly each pick stands (lead: its mean minus the best other candidate's; a lead of a few "
              "thousandths can flip between CPUs, docs/protocol.md#seeds; at the grid's edge, a better value "
              "may lie outside it):", ""]
    for base, entry in sel.get("methods", {}).items():
        m = pick_margin(entry)
        edge = "".join(f"; the {where} {key} of the grid" for key, where in m["edge"].items())
        lead = f"{m['lead']:+.4f} over {m['runner_up']}" if m["runner_up"] else "the only candidate"
        lines.append(f"- {base}: {_label(entry['pick']['overrides'])}, {lead}{edge}.")
    if section:
        lines.append(section.rstrip("\n"))

    def figure(path):
        plt = pyplot()
        bases = list(sel.get("methods", {}))
        fig, ax = plt.subplots(figsize=(max(6.5, 2.3 * len(bases) + 2.5), 4.4), dpi=120)
        width = 0.25
        for i, base in enumerate(bases):
            entry = sel["methods"][base]
            n = len(entry["candidates"])
            for j, c in enumerate(entry["candidates"]):
                x = i + (j - (n - 1) / 2) * width
                picked = c["method"] == entry["pick"]["method"]
                ax.bar(x, c["mean"], width * 0.92, color="goldenrod" if picked else "0.7",
                       edgecolor="black" if picked else "0.5", linewidth=1.2 if picked else 0.5,
                       label=("picked" if picked else "candidate") if i == 0 and j in (0, 1) else None)
                lr = c["overrides"].get("lr")
                ax.text(x, c["mean"] + 0.01, f"{c['mean']:.3f}", ha="center", va="bottom", fontsize=7,
                        rotation=90, bbox=dict(facecolor="white", edgecolor="none", pad=0.5))  # above the bar, boxed over the reference line
                ax.text(x, 0.01, f"{lr:.0e}" if isinstance(lr, float) else str(c["overrides"]), ha="center",
                        va="bottom", fontsize=6.5, rotation=90, color="black")
        if ref:
            ax.axhline(ref["mean"], color="purple", linestyle="dashed", linewidth=1.5,
                       label=f"{ref['method']} (validation) {ref['mean']:.3f}")
        ax.set_xticks(range(len(bases)), bases)
        ax.set_ylabel("mean validation nDCG@10")
        top = max([c["mean"] for b in bases for c in sel["methods"][b]["candidates"]] + [ref.get("mean", 0)])
        ax.set_ylim(0, min(1.05, top + 0.15))
        ax.grid(axis="y", alpha=0.3)
        handles, labels = ax.get_legend_handles_labels()
        uniq = dict(zip(labels, handles))
        ax.legend(uniq.values(), uniq.keys(), fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5),
                  frameon=False)
        suptitle(fig, ctx.title)
        save(fig, path)

    return StudyOutput("\n".join(lines) + "\n", rows, figure)
