"""The study layer (SPEC section 6): one small function per study turns result JSONs into a
Markdown table, summary rows (TSV) and one figure (PNG).

Every study function has the same shape::

    study(results: list[dict], ctx: StudyContext) -> StudyOutput

``results`` are loaded result JSONs (``workflow_scripts/evaluate.py``); ``ctx`` says which
methods, datasets and backbones the study covers and carries what a study needs beyond the
results (the selection JSON of the learning-rate audit, the dataset groups, notes). The
selection itself (:func:`select`) is not a table: it turns validation results into the JSON that
final-stage jobs read their picked hyperparameters from.
"""

from __future__ import annotations

import csv
import math
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from . import report
from .atomic import atomic_path

REFERENCE_STYLE = dict(color="0.85", edgecolor="0.3", hatch="//", linewidth=0.8)  # frozen in every bar chart
# one colour per compressed method type in every figure (tab10 without its grey, which is frozen's)
METHOD_COLORS = dict(zip(("truncate", "pca", "autoencoder", "mrl", "search_adaptor", "smec", "dive"),
                         ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2")))
PALETTE = (*METHOD_COLORS.values(), "#bcbd22", "#17becf")  # by position: variants of one type
RHO_THRESHOLD = 0.10  # "rho(t) falling below 10%"
DIVE_TERMS = ("triplet", "view", "geo")  # DIVE's weighted loss terms in its train log


@dataclass
class StudyContext:
    name: str
    title: str
    methods: list[str]
    datasets: list[str]
    backbones: list[str] = field(default_factory=list)
    groups: dict[str, str] = field(default_factory=dict)  # dataset -> group (CQADupStack communities)
    note: str = ""
    selection: dict | None = None  # lr_audit: the selection JSON
    highlight: str | None = None  # heads: the configured head count's method


@dataclass
class StudyOutput:
    markdown: str
    rows: list[dict]
    figure: Callable[[str | Path], None]


# --------------------------------------------------------------------------- shared pieces
def dataset_mean(values: Mapping[str, float], groups: Mapping[str, str]) -> float:
    """Unweighted mean over datasets, the members of a group (CQADupStack's 12 communities)
    averaged first so the group counts once. NaN if a value is missing or NaN."""
    by_group: dict[str, list[float]] = {}
    for ds, v in values.items():
        by_group.setdefault(groups.get(ds, ds), []).append(v)
    means = [sum(v) / len(v) for v in by_group.values()]
    if not means or any(math.isnan(m) for m in means):
        return float("nan")
    return sum(means) / len(means)


def method_values(summary: Mapping, bb: str, method: str, metric: str,
                  ctx: "StudyContext") -> tuple[dict[str, float], float]:
    """``({dataset: mean over seeds}, mean over datasets)`` of one method and metric; the mean
    over datasets is NaN unless every dataset of the study has a result."""
    vals = {ds: summary[(bb, ds, method)][metric] for ds in ctx.datasets if (bb, ds, method) in summary}
    return vals, dataset_mean(vals, ctx.groups) if len(vals) == len(ctx.datasets) else float("nan")


def _cell(v: float, std: float = float("nan"), digits: int = 4) -> str:
    return report.fmt(v, std, digits)


def _summary(results: Sequence[Mapping]) -> dict[tuple[str, str, str], dict]:
    rows = report.collect(results)
    summ = report.summarize(rows, keys=("backbone", "dataset", "method"))
    return {(s["backbone"], s["dataset"], s["method"]): s for s in summ}


def _backbones(results: Sequence[Mapping], ctx: StudyContext) -> list[str]:
    return ctx.backbones or list(dict.fromkeys(r["backbone"] for r in results))


def _deviations(results: Sequence[Mapping]) -> list[str]:
    """Stated deviations from the paper's protocol found in the results (triplet caps)."""
    caps = {}
    for r in results:
        cap = (r.get("config") or {}).get("triplets", {}).get("max_per_query")  # this dataset's (rule evaluate)
        if cap is not None and r.get("config", {}).get("n_triplets") is not None:
            caps[r["dataset"]] = cap
    return [f"**Deviation from the paper's protocol:** training triplets capped at {cap} per query on "
            f"{ds} (a seeded sample shared by every method; the paper trains on all of them)."
            for ds, cap in sorted(caps.items())]


def _head(ctx: StudyContext, results: Sequence[Mapping], note: str | None = None) -> list[str]:
    """A study table's opening lines: title, note, stated deviations (every study whose runs
    trained on capped triplets says so)."""
    note = ctx.note if note is None else note
    dev = _deviations(results)
    return [f"## {ctx.title}", ""] + ([note, ""] if note else []) + dev + ([""] if dev else [])


def _column_label(ds: str, bb: str, many_backbones: bool) -> str:
    return f"{ds} ({bb})" if many_backbones else ds


def method_colors(types: Mapping[str, str]) -> dict[str, str]:
    """Compressed method name -> colour. Each method type keeps one colour across every figure
    (``mrl-tuned`` is MRL's red, as ``mrl`` is) when the figure has one method per type; a figure
    of variants of one type (the ablation) colours them by position instead."""
    names = list(types)
    if len(set(types.values())) == len(names) and all(t in METHOD_COLORS for t in types.values()):
        return {m: METHOD_COLORS[types[m]] for m in names}
    return {m: PALETTE[i % len(PALETTE)] for i, m in enumerate(names)}


def _is_reference(s: Mapping) -> bool:
    return s.get("method_type") == "frozen"


def metric_table(summary: Mapping, ctx: StudyContext, backbones: Sequence[str],
                 metrics: Sequence[tuple[str, str]] = report.SHOWN, train_seconds: bool = True) -> list[str]:
    """Methods as rows; per dataset the metrics as mean ± std over seeds, then the unweighted
    mean over datasets (groups first) when there is more than one; best compressed method in
    bold. One section per backbone."""
    lines = []
    multi = len(ctx.datasets) > 1
    for bb in backbones:
        if len(backbones) > 1:
            lines += [f"### backbone {bb}", ""]
        head = ["method", "k"]
        for ds in ctx.datasets:
            head += [f"{ds} {label}" for _, label in metrics] + ([f"{ds} train s"] if train_seconds else [])
        if multi:
            head += [f"mean {label}" for _, label in metrics]
        means = {}
        for me in ctx.methods:
            for m, _ in metrics:
                means[(me, m)] = method_values(summary, bb, me, m, ctx)[1]
        best = {}
        for col in [(ds, m) for ds in ctx.datasets for m, _ in metrics] + [("mean", m) for m, _ in metrics]:
            cands = []
            for me in ctx.methods:
                s = next((summary[(bb, ds, me)] for ds in ctx.datasets if (bb, ds, me) in summary), None)
                if s is None or _is_reference(s):
                    continue
                v = means[(me, col[1])] if col[0] == "mean" else summary.get((bb, col[0], me), {}).get(col[1], float("nan"))
                if not math.isnan(v):
                    cands.append((v, me))
            best[col] = max(cands)[1] if cands else None
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for me in ctx.methods:
            ks = sorted({summary[(bb, ds, me)]["k"] for ds in ctx.datasets if (bb, ds, me) in summary})
            cells = [me, ",".join(map(str, ks)) or "–"]
            for ds in ctx.datasets:
                s = summary.get((bb, ds, me))
                for m, _ in metrics:
                    txt = "–" if s is None else _cell(s[m], s[f"{m}_std"])
                    cells.append(f"**{txt}**" if best.get((ds, m)) == me and s is not None else txt)
                if train_seconds:
                    cells.append("–" if s is None or math.isnan(s["train_seconds"]) else f"{s['train_seconds']:.0f}")
            if multi:
                for m, _ in metrics:
                    txt = _cell(means[(me, m)])
                    cells.append(f"**{txt}**" if best.get(("mean", m)) == me else txt)
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    n_seeds = sorted({s["n_seeds"] for s in summary.values()})
    lines.append(f"Mean ± sample standard deviation over seeds ({'/'.join(map(str, n_seeds))} per cell); bold: "
                 "best compressed method; frozen is the uncompressed reference at full dimension."
                 + (" `mean`: unweighted mean over datasets (a dataset group such as CQADupStack "
                    "averaged first)." if multi else ""))
    return lines


def subset_table(summary: Mapping, ctx: StudyContext, backbones: Sequence[str]) -> list[str]:
    """nDCG@10 on the `seen` / `unseen` subsets, each with its query count; an empty subset has
    no score."""
    lines = ["", "### Document overlap: nDCG@10 on seen / unseen evaluated queries", "",
             "`seen`: the query has a relevant document that is a positive of some training query of "
             "the stage; `unseen`: it has none (where geometry preservation is really tested); n = "
             "query count. `unseen train-pos@10`: share of the unseen queries' top-10 results that "
             "are training positives (none is relevant to an unseen query).", ""]
    for bb in backbones:
        head = ["method"] + [f"{_column_label(ds, bb, len(backbones) > 1)} {sub}" for ds in ctx.datasets
                             for sub in ("seen", "unseen", "unseen train-pos@10")]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for me in ctx.methods:
            cells = [me]
            for ds in ctx.datasets:
                s = summary.get((bb, ds, me))
                for sub in ("seen", "unseen"):
                    if s is None:
                        cells.append("–")
                        continue
                    n = int(s.get(f"{sub}_n") or 0)
                    cells.append(f"– (n=0)" if n == 0 else
                                 f"{_cell(s[f'{sub}_ndcg@10'], s[f'{sub}_ndcg@10_std'])} (n={n})")
                s_n = 0 if s is None else int(s.get("unseen_n") or 0)
                cells.append("–" if s is None or s_n == 0 else
                             _cell(s["unseen_train_pos@10"], s["unseen_train_pos@10_std"], 3))
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def grouped_bars(path: str | Path, summary: Mapping, ctx: StudyContext, backbones: Sequence[str],
                 metrics: Sequence[tuple[str, str]] = report.SHOWN, title: str = "") -> None:
    """One panel per metric: bars per method grouped by dataset (and backbone), ± std over seeds;
    the uncompressed reference (frozen) hatched grey and labelled as such in the legend, so it
    cannot be mistaken for a compressed method."""
    plt = _pyplot()
    groups = [(bb, ds) for bb in backbones for ds in ctx.datasets]
    n_m = max(1, len(ctx.methods))
    width_in = max(6.0, 0.55 * n_m * len(groups) + 2.5)
    fig, axes = plt.subplots(1, len(metrics), figsize=(width_in * len(metrics) * 0.75 + 2.2, 4.6), dpi=120,
                             squeeze=False)
    width = 0.8 / n_m
    compressed = [me for me in ctx.methods if not any(_is_reference(summary[(bb, ds, me)])
                                                      for bb, ds in groups if (bb, ds, me) in summary)]
    colors = method_colors({me: next((summary[(bb, ds, me)].get("method_type") for bb, ds in groups
                                      if (bb, ds, me) in summary), me) for me in compressed})
    for ax, (metric, label) in zip(axes[0], metrics):
        top = 0.1
        for i, me in enumerate(ctx.methods):
            ref = me not in compressed
            for j, (bb, ds) in enumerate(groups):
                s = summary.get((bb, ds, me))
                if s is None or math.isnan(s[metric]):
                    continue
                x = j + (i - (n_m - 1) / 2) * width
                e = 0.0 if math.isnan(s[f"{metric}_std"]) else s[f"{metric}_std"]
                style = REFERENCE_STYLE if ref else dict(color=colors[me])
                ax.bar(x, s[metric], width, yerr=e, capsize=2, label=(f"{me} (uncompressed, {s['k']}d)" if ref else me)
                       if j == 0 else None, **style)
                ax.text(x, s[metric] + e + 0.01, f"{s[metric]:.3f}", ha="center", va="bottom", fontsize=6.5,
                        rotation=90)
                top = max(top, s[metric] + e)
        ax.set_xticks(range(len(groups)), [_column_label(ds, bb, len(backbones) > 1) for bb, ds in groups])
        ax.set_ylabel(label)
        ax.set_ylim(0, top + 0.17)  # room for the rotated value labels above the tallest bar
        ax.set_yticks([t / 10 for t in range(0, 11, 2) if t / 10 <= top + 0.17])
        ax.grid(axis="y", alpha=0.3)
        ax.set_title(label, fontsize=10)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="center left", bbox_to_anchor=(0.995, 0.5), frameon=False)
    _suptitle(fig, title or ctx.title)
    _save(fig, path)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _suptitle(fig, title: str) -> None:
    chars = max(40, int(11 * fig.get_size_inches()[0]))
    text = "\n".join(textwrap.wrap(title, chars))
    fig.suptitle(text, fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.045 * (text.count("\n") + 1)))


def _save(fig, path) -> None:
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, format="png", bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)


# --------------------------------------------------------------------------- the studies
DOC_DISJOINT_NOTE = (
    "Document-disjoint runs (`-docdisjoint`): their triplets contain no document relevant to any evaluated "
    "query, so for these runs every evaluated query is unseen in training. `seen` / `unseen` above still "
    "split the queries as the standard split does (a relevant document among the standard triplets' "
    "positives), for comparison with the main table; `unseen train-pos@10` counts the standard training "
    "positives, some of which these runs never trained on. Label-free methods (frozen, truncate, pca, "
    "autoencoder) are the same runs as in the main table.")


def main_study(results: Sequence[Mapping], ctx: StudyContext) -> StudyOutput:
    """Main table (also: secondary dimension, unsupervised, document-disjoint, validation
    tables): per dataset and the mean over datasets, subsets with their n, paired significance."""
    summary = _summary(results)
    bbs = _backbones(results, ctx)
    lines = _head(ctx, results) + metric_table(summary, ctx, bbs) + subset_table(summary, ctx, bbs)
    if any(((r.get("config") or {}).get("method_entry") or {}).get("doc_disjoint") for r in results):
        lines += [DOC_DISJOINT_NOTE, ""]
    md = "\n".join(lines) + "\n" + report.significance_markdown(report.significance_rows(results))
    return StudyOutput(md, list(summary.values()), lambda p: grouped_bars(p, summary, ctx, bbs))


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


def ablation_study(results: Sequence[Mapping], ctx: StudyContext) -> StudyOutput:
    """Mean validation nDCG@10 over datasets and per dataset for each DIVE variant, with the
    difference to the last method (full DIVE)."""
    summary = _summary(results)
    bbs = _backbones(results, ctx)
    full = ctx.methods[-1]
    lines = _head(ctx, results)
    rows = []
    for bb in bbs:
        head = ["variant"] + [f"{ds} nDCG@10" for ds in ctx.datasets] + ["mean nDCG@10", f"Δ mean vs {full}"]
        lines += ([f"### backbone {bb}", ""] if len(bbs) > 1 else []) + ["| " + " | ".join(head) + " |",
                                                                          "|" + "---|" * len(head)]
        both = {me: method_values(summary, bb, me, "ndcg@10", ctx) for me in ctx.methods}
        vals = {me: v for me, (v, _) in both.items()}
        means = {me: m for me, (_, m) in both.items()}
        for me in ctx.methods:
            cells = [me] + [_cell(vals[me].get(ds, float("nan"))) for ds in ctx.datasets]
            cells += [_cell(means[me]), "–" if me == full or math.isnan(means[me] - means[full])
                      else f"{means[me] - means[full]:+.4f}"]
            lines.append("| " + " | ".join(cells) + " |")
            rows.append({"backbone": bb, "method": me, **{f"{ds}_ndcg@10": vals[me].get(ds) for ds in ctx.datasets},
                         "mean_ndcg@10": means[me]})
        lines.append("")
    lines.append("Seed " + ",".join(sorted({str(r["seed"]) for r in results})) + "; `mean`: unweighted mean "
                 "over datasets (a dataset group averaged first).")
    return StudyOutput("\n".join(lines) + "\n", rows,
                       lambda p: grouped_bars(p, summary, ctx, bbs, metrics=(("ndcg@10", "nDCG@10"),)))


def heads_study(results: Sequence[Mapping], ctx: StudyContext) -> StudyOutput:
    """Validation nDCG@10 against the number of heads H, per dataset; the configured H marked."""
    summary = _summary(results)
    bbs = _backbones(results, ctx)
    heads = {me: next(int(r["config"]["hparams"]["heads"]) for r in results if r["method"] == me)
             for me in ctx.methods if any(r["method"] == me for r in results)}
    lines = _head(ctx, results, f"Note: {ctx.note}." if ctx.note else "")
    rows = []
    for bb in bbs:
        head = ["H", "method"] + [f"{ds} nDCG@10" for ds in ctx.datasets] + ["mean nDCG@10"]
        lines += ([f"### backbone {bb}", ""] if len(bbs) > 1 else []) + ["| " + " | ".join(head) + " |",
                                                                          "|" + "---|" * len(head)]
        for me in ctx.methods:
            vals, mean = method_values(summary, bb, me, "ndcg@10", ctx)
            mark = " (configured)" if me == ctx.highlight else ""
            lines.append("| " + " | ".join([f"{heads.get(me, '?')}{mark}", me]
                                            + [_cell(vals.get(ds, float("nan"))) for ds in ctx.datasets]
                                            + [_cell(mean)]) + " |")
            rows.append({"backbone": bb, "heads": heads.get(me), "method": me, "mean_ndcg@10": mean,
                         **{f"{ds}_ndcg@10": vals.get(ds) for ds in ctx.datasets}})
        lines.append("")
    lines.append("Validation queries, seed " + ",".join(sorted({str(r["seed"]) for r in results}))
                 + "; every other setting fixed. Not used to change the configured H.")

    def figure(path):
        plt = _pyplot()
        fig, ax = plt.subplots(figsize=(6.5, 4.2), dpi=120)
        for bb in bbs:
            for ds in ctx.datasets:
                pts = sorted((heads[me], summary[(bb, ds, me)]["ndcg@10"], me) for me in ctx.methods
                             if (bb, ds, me) in summary)
                if not pts:
                    continue
                line, = ax.plot([h for h, _, _ in pts], [v for _, v, _ in pts], marker="o",
                                label=_column_label(ds, bb, len(bbs) > 1))
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
        _suptitle(fig, ctx.title)
        _save(fig, path)

    return StudyOutput("\n".join(lines) + "\n", rows, figure)


def read_train_log(path: str | Path) -> list[dict]:
    with open(path, encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    out = []
    for r in rows:
        row = {}
        for k, v in r.items():
            try:
                row[k] = float(v)
            except (TypeError, ValueError):
                row[k] = v
        out.append(row)
    return out


def first_below(values: Sequence[float], threshold: float = RHO_THRESHOLD) -> int | None:
    """1-based index of the first value below ``threshold``, or None (never)."""
    return next((i + 1 for i, v in enumerate(values) if v < threshold), None)


def dynamics_study(results: Sequence[Mapping], ctx: StudyContext) -> StudyOutput:
    """Training dynamics from DIVE's final-stage train logs: rho(t) (share of the epoch's
    triplets whose hinge is active) and the weighted loss terms per epoch, per dataset."""
    runs: dict[tuple[str, str], list[tuple[int, list[dict]]]] = {}
    for r in results:
        if r["method_type"] != "dive":
            continue
        runs.setdefault((r["backbone"], r["dataset"]), []).append((r["seed"], read_train_log(r["artifacts"]["train_log"])))
    lines = _head(ctx, results) + [
             f"| backbone | dataset | seeds | first epoch with rho < {RHO_THRESHOLD:.0%} (per seed) | "
             "rho at the last epoch (mean) | epochs |", "|---|---|---|---|---|---|"]
    rows = []
    for (bb, ds), seeds in sorted(runs.items()):
        seeds.sort()
        firsts = [first_below([e["rho"] for e in log]) for _, log in seeds]
        last = [log[-1]["rho"] for _, log in seeds]
        shown = ", ".join("never" if f is None else str(f) for f in firsts)
        lines.append(f"| {bb} | {ds} | {','.join(str(s) for s, _ in seeds)} | {shown} | "
                     f"{sum(last) / len(last):.4f} | {len(seeds[0][1])} |")
        rows.append({"backbone": bb, "dataset": ds, "seeds": [s for s, _ in seeds],
                     "first_epoch_rho_below_10pct": ["never" if f is None else f for f in firsts],
                     "rho_last_epoch": sum(last) / len(last)})
    lines += ["", "rho(t) = share of the epoch's triplets with q·p - q·n < m on the first head "
              "(SPEC section 3); the hinge stops pushing a triplet once it is satisfied."]

    def figure(path):
        plt = _pyplot()
        fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.4), dpi=120)
        colors = plt.get_cmap("tab10").colors
        styles = dict(zip(DIVE_TERMS, ("-", "--", ":")))
        for i, ((bb, ds), seeds) in enumerate(sorted(runs.items())):
            c = colors[i % len(colors)]
            label = _column_label(ds, bb, len({b for b, _ in runs}) > 1)
            n = min(len(log) for _, log in seeds)
            ep = list(range(1, n + 1))
            for _, log in seeds:
                left.plot(ep, [e["rho"] for e in log[:n]], color=c, alpha=0.25, linewidth=0.8)
            left.plot(ep, [sum(log[t]["rho"] for _, log in seeds) / len(seeds) for t in range(n)], color=c,
                      linewidth=2, label=f"{label} (mean of {len(seeds)} seeds)")
            for term in DIVE_TERMS:
                if term in seeds[0][1][0]:
                    right.plot(ep, [sum(log[t][term] for _, log in seeds) / len(seeds) for t in range(n)],
                               color=c, linestyle=styles[term], label=f"{label}: {term}")
        from matplotlib.ticker import MaxNLocator

        for ax in (left, right):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        left.axhline(RHO_THRESHOLD, color="0.4", linestyle="dashed", linewidth=1, label="10%")
        left.set_xlabel("epoch")
        left.set_ylabel("rho(t): share of active hinge triplets")
        left.set_ylim(0, 1)
        left.grid(alpha=0.3)
        left.legend(fontsize=8)
        left.set_title("rho(t)", fontsize=10)
        right.set_xlabel("epoch")
        right.set_ylabel("weighted loss term (mean over seeds)")
        right.set_yscale("log")
        right.grid(alpha=0.3)
        right.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
        right.set_title("DIVE's weighted loss terms", fontsize=10)
        _suptitle(fig, ctx.title)
        _save(fig, path)

    return StudyOutput("\n".join(lines) + "\n", rows, figure)


def lr_audit_study(results: Sequence[Mapping], ctx: StudyContext) -> StudyOutput:
    """The learning-rate audit from its selection JSON: each candidate's validation nDCG@10 per
    dataset and mean, the pick marked, DIVE's validation score as the reference."""
    sel = ctx.selection or {}
    ref = sel.get("reference") or {}
    datasets = sel.get("datasets", ctx.datasets)
    lines = _head(ctx, results, "") + [
             "| method | candidate | " + " | ".join(f"{ds} nDCG@10" for ds in datasets) + " | mean nDCG@10 | pick |",
             "|---|---|" + "---|" * len(datasets) + "---|---|"]
    rows = []
    for base, entry in sel.get("methods", {}).items():
        for c in entry["candidates"]:
            picked = c["method"] == entry["pick"]["method"]
            over = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in c["overrides"].items())
            lines.append(f"| {base} | {over} | " + " | ".join(_cell(c["per_dataset"].get(ds, float('nan')))
                                                           for ds in datasets)
                         + f" | {_cell(c['mean'])} | {'**picked**' if picked else ''} |")
            rows.append({"method": base, "candidate": c["method"], **c["overrides"], "mean_ndcg@10": c["mean"],
                         "picked": picked, **{f"{ds}_ndcg@10": v for ds, v in c["per_dataset"].items()}})
    if ref:
        lines.append(f"| {ref['method']} (reference) | fixed | " + " | ".join(
            _cell(ref["per_dataset"].get(ds, float("nan"))) for ds in datasets) + f" | {_cell(ref['mean'])} | |")
    lines += ["", f"Validation queries (select stage), seed {sel.get('seed')}; selection by the unweighted mean "
              f"validation nDCG@10 over {', '.join(datasets)}. No test query is read. The picks are in "
              "`results/selection/lr_audit.json`."]

    def figure(path):
        plt = _pyplot()
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
                        rotation=90)  # above the bar: never over the lr label inside it, however short
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
        _suptitle(fig, ctx.title)
        _save(fig, path)

    return StudyOutput("\n".join(lines) + "\n", rows, figure)


def efficiency_study(results: Sequence[Mapping], ctx: StudyContext) -> StudyOutput:
    """Efficiency JSONs (one per dataset and backbone, and the synthetic scaling): memory,
    latency and throughput of a flat index at each dimension, ratios to the full dimension and to
    the memory-bandwidth bound."""
    real = [r for r in results if r["dataset"] != "synthetic"]
    syn = [r for r in results if r["dataset"] == "synthetic"]
    lines = [f"## {ctx.title}", ""]
    rows = []
    for r in real:
        lines += [f"### {r['dataset']} ({r['backbone']}): {r['indexes'][0]['n_docs']:,} documents, "
                  f"{r['n_queries']} test queries", "",
                  f"FAISS {r['faiss_version']} flat inner-product index on {r['device'].upper()} ({r['cpu']}, "
                  f"{r['faiss_threads']} threads); main-memory streaming-read bandwidth {r['bandwidth_gb_s']:.2f} GB/s. "
                  f"Medians of {r['indexes'][0]['repeats']} repetitions ({r['indexes'][0]['n_single']} single-query "
                  f"searches each, top-{r['indexes'][0]['k']}); index construction and file loading not timed.", "",
                  "| index | bytes/vector | index MB | memory ratio | latency median ms | p99 ms | speed-up | "
                  "DRAM bound ms | latency / bound | same-size read ms | latency / read | throughput q/s | "
                  "throughput ratio |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for x in r["indexes"]:
            lines.append(f"| {x['method']} {x['dim']}d | {x['bytes_per_vector']} | {x['index_bytes'] / 1e6:.2f} | "
                         f"{x['memory_ratio_to_full']:.1f}x | {x['latency_ms_median']:.3f} | {x['latency_ms_p99']:.3f} | "
                         f"{x['latency_speedup_vs_full']:.2f}x | {x['lower_bound_ms']:.3f} | "
                         f"{x['latency_ratio_to_bound']:.2f} | {x['read_ms_same_size']:.3f} | "
                         f"{x['latency_ratio_to_read']:.2f} | {x['throughput_qps']:.0f} | "
                         f"{x['throughput_ratio_to_full']:.2f}x |")
            rows.append({"dataset": r["dataset"], "backbone": r["backbone"], **x})
        lines.append("")
    for r in syn:
        lines += ["### Synthetic scaling (random unit vectors)", "",
                  f"Streaming-read bandwidth {r['bandwidth_gb_s']:.2f} GB/s; {r['indexes'][0]['batch_queries']} "
                  "queries per batch.", "",
                  "| documents | dim | index MB | latency median ms | p99 ms | DRAM bound ms | latency / bound | "
                  "same-size read ms | throughput q/s |", "|---|---|---|---|---|---|---|---|---|"]
        for x in r["indexes"]:
            lines.append(f"| {x['n_docs']:,} | {x['dim']} | {x['index_bytes'] / 1e6:.1f} | {x['latency_ms_median']:.3f} | "
                         f"{x['latency_ms_p99']:.3f} | {x['lower_bound_ms']:.3f} | {x['latency_ratio_to_bound']:.2f} | "
                         f"{x['read_ms_same_size']:.3f} | {x['throughput_qps']:.0f} |")
            rows.append({"dataset": "synthetic", **x})
        lines.append("")
    lines.append("DRAM bound: a single-query flat search reads the whole index once, so from main memory it "
                 "cannot take less than index bytes / bandwidth. An index that fits in the CPU caches is read "
                 "faster (latency / bound below 1); the same-size read is the time to read an array of the "
                 "index's size again and again, as the repeated searches do.")

    def figure(path):
        plt = _pyplot()
        fig, axes = plt.subplots(1, 3, figsize=(15, 4.4), dpi=120)
        many = len(real) > 1  # one group of bars per dataset, each labelled with its dataset
        for i, r in enumerate(real):
            xs = [(f"{r['dataset']}\n" if many else "") + f"{x['method']}\n{x['dim']}d" for x in r["indexes"]]
            color = plt.get_cmap("tab10").colors[i % 10] if many else "tab:blue"
            for ax, key, plain in ((axes[0], "latency_ms_median", color), (axes[1], "throughput_qps",
                                                                             color if many else "tab:green")):
                for xl, x in zip(xs, r["indexes"]):  # frozen (uncompressed) as in every study figure
                    ax.bar(xl, x[key], **(REFERENCE_STYLE if x["method"] == "frozen"
                                          else dict(color=plain, edgecolor="0.3", linewidth=0.8)))
            axes[0].scatter(xs, [x["lower_bound_ms"] for x in r["indexes"]], color="black", marker="_", s=600,
                            zorder=3, label="DRAM bandwidth bound" if i == 0 else None)
        if real:
            where = "" if many else f"{real[0]['dataset']}: "
            axes[0].set_ylabel("single-query latency (ms)")
            axes[0].set_title(f"{where}latency", fontsize=10)
            from matplotlib.patches import Patch

            handles, _ = axes[0].get_legend_handles_labels()
            ref = {("facecolor" if k == "color" else k): v for k, v in REFERENCE_STYLE.items()}
            axes[0].legend(handles=[Patch(**ref, label="measured median: frozen (uncompressed)"),
                                    Patch(facecolor="tab:blue" if not many else "0.5", edgecolor="0.3",
                                          label="measured median: compressed"), *handles], fontsize=8)
            axes[1].set_ylabel("batched throughput (queries/s)")
            axes[1].set_title(f"{where}throughput", fontsize=10)
            if many:
                for ax in axes[:2]:
                    ax.tick_params(axis="x", labelsize=7)
        for r in syn:
            ax = axes[2]
            for d in sorted({x["dim"] for x in r["indexes"]}, reverse=True):
                pts = sorted((x["n_docs"], x["latency_ms_median"]) for x in r["indexes"] if x["dim"] == d)
                ax.plot([n for n, _ in pts], [v for _, v in pts], marker="o", label=f"d = {d}")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("documents")
            ax.set_ylabel("single-query latency (ms)")
            ax.set_title("synthetic: latency vs corpus size", fontsize=10)
            ax.legend(fontsize=8, ncol=2)
        for ax in axes:
            ax.grid(alpha=0.3)
        _suptitle(fig, ctx.title)
        _save(fig, path)

    return StudyOutput("\n".join(lines) + "\n", rows, figure)


def frontier_study(results: Sequence[Mapping], ctx: StudyContext) -> StudyOutput:
    """Frontier JSONs: held-out nDCG@10 and Recall@10 against bytes per vector for every method,
    dimension and encoding; Pareto front marked."""
    lines = [f"## {ctx.title}", ""]
    rows = []
    for r in results:
        over = next((x["rescore_oversample"] for x in r["rows"] if x["rescore_oversample"]), None)
        lines += [f"### {r['dataset']} ({r['backbone']}), {r['n_queries']} test queries, seed "
                  f"{r['rows'][0]['seed']}", "",
                  "Encodings of the same compressed vectors: float32, float16, 8-bit scalar quantization (FAISS "
                  "SQ8, trained on the corpus), 1-bit sign codes searched by Hamming distance, and the same "
                  f"re-scored in float32 ({over}x oversampling: the {over} x k Hamming-nearest re-ranked). "
                  "Bytes per vector count what the search index holds in memory; `binary_rescore` also keeps "
                  "every float32 vector (4 x dim bytes) outside the index, on disk in a deployment, and reads "
                  "only its candidates' at query time. "
                  "**front**: on the Pareto front of nDCG@10 against bytes per vector.", "",
                  "| bytes/vector | method | dim | encoding | nDCG@10 | R@10 | front |", "|---|---|---|---|---|---|---|"]
        for x in sorted(r["rows"], key=lambda x: (x["bytes_per_vector"], -x["ndcg@10"])):
            lines.append(f"| {x['bytes_per_vector']} | {x['method']} | {x['dim']} | {x['encoding']} | "
                         f"{x['ndcg@10']:.4f} | {x['recall@10']:.4f} | {'**front**' if x['pareto'] else ''} |")
            rows.append({"dataset": r["dataset"], "backbone": r["backbone"], **x})
        small = [x for x in r["rows"] if x["bytes_per_vector"] <= 64]
        best = max(small, key=lambda x: x["ndcg@10"], default=None)
        alone = max((x for x in small if x["encoding"] != "binary_rescore"), key=lambda x: x["ndcg@10"], default=None)
        for label, x in (("", best), (" with nothing outside the index (no re-scoring)", alone)):
            if x:
                lines += ["", f"Best at 64 bytes or fewer per vector{label}: **{x['method']} {x['dim']}d in "
                              f"{x['encoding']}** ({x['bytes_per_vector']} B, nDCG@10 {x['ndcg@10']:.4f}, "
                              f"R@10 {x['recall@10']:.4f})."]
        lines.append("")

    def figure(path):
        plt = _pyplot()
        fig, axes = plt.subplots(max(1, len(results)), 2, figsize=(14, 5 * max(1, len(results))), dpi=120,
                                 squeeze=False)  # one row per dataset (and backbone)
        markers = {"float32": "o", "float16": "s", "sq8": "^", "binary": "x", "binary_rescore": "P"}
        methods = list(dict.fromkeys(x["method"] for r in results for x in r["rows"]))
        # the frontier's runs are the configured methods, named by their type
        colors = {**method_colors({m: m for m in methods if m != "frozen"}), "frozen": "0.35"}
        for row, r in zip(axes, results):
            for ax, metric, label in zip(row, ("ndcg@10", "recall@10"), ("nDCG@10", "Recall@10")):
                for x in r["rows"]:
                    ax.scatter(x["bytes_per_vector"], x[metric], marker=markers[x["encoding"]], s=45,
                               color=colors[x["method"]],
                               edgecolors="black" if x["pareto"] else "none", linewidths=1.2)
                front = sorted((x["bytes_per_vector"], x[metric]) for x in r["rows"] if x["pareto"])
                if metric == "ndcg@10" and front:
                    ax.step([b for b, _ in front], [v for _, v in front], where="post", color="black",
                            linewidth=1, linestyle="dashed")
                ax.set_xscale("log", base=2)
                ax.set_xlabel("bytes per vector (log scale)")
                ax.set_ylabel(f"held-out {label}")
                ax.grid(alpha=0.3)
                bb = f" ({r['backbone']})" if len({x['backbone'] for x in results}) > 1 else ""
                ax.set_title(f"{r['dataset']}{bb}: {label} per byte", fontsize=10)
        handles = [plt.Line2D([], [], linestyle="", marker="o", color=colors[m],
                              label=m + (" (uncompressed)" if m == "frozen" else ""))
                   for m in methods]
        handles += [plt.Line2D([], [], linestyle="", marker=mk, color="black", label=e) for e, mk in markers.items()]
        handles.append(plt.Line2D([], [], color="black", linestyle="dashed", label="Pareto front (nDCG@10)"))
        fig.legend(handles=handles, fontsize=8, loc="center left", bbox_to_anchor=(0.995, 0.5), frameon=False)
        _suptitle(fig, ctx.title)
        _save(fig, path)

    return StudyOutput("\n".join(lines) + "\n", rows, figure)


CAPTIONS = {  # what each study's figure shows (the report's caption)
    "main": "Bars: mean over seeds per method and dataset (left nDCG@10, right Recall@10); error bars: "
            "sample standard deviation over seeds (none with one seed). The hatched grey bar is frozen, "
            "the uncompressed full-dimension reference; every other bar is a compressed method.",
    "tuned": "As the main figure, for the baselines retrained at their audited learning rates and DIVE.",
    "ablation": "Validation nDCG@10 per dataset of each DIVE variant (seed 2027); the last is full DIVE.",
    "heads": "Validation nDCG@10 against the number of heads H, one line per dataset; the ring marks the "
             "configured H.",
    "dynamics": "Left: rho(t), the share of the epoch's triplets whose hinge is active (thin: each seed, "
                "thick: their mean; dashed: 10%). Right: DIVE's weighted loss terms per epoch (log scale).",
    "lr_audit": "Mean validation nDCG@10 of each learning-rate candidate (gold: the pick); purple dashed "
                "line: DIVE's validation score.",
    "efficiency": "Left: single-query latency of a FAISS flat index at each dimension (bars; hatched grey: "
                  "frozen, the uncompressed full dimension) against the memory-bandwidth bound (black marks). Middle: batched throughput. Right: latency against "
                  "corpus size on synthetic unit vectors, per dimension.",
    "frontier": "Held-out nDCG@10 (left) and Recall@10 (right) against bytes per vector, every method, "
                "dimension and encoding (marker: encoding; colour: method; grey: frozen, uncompressed). "
                "Black edges and the dashed step: the Pareto front.",
}

STUDIES: dict[str, Callable[[Sequence[Mapping], StudyContext], StudyOutput]] = {
    "main": main_study,
    "tuned": tuned_study,
    "ablation": ablation_study,
    "heads": heads_study,
    "dynamics": dynamics_study,
    "lr_audit": lr_audit_study,
    "efficiency": efficiency_study,
    "frontier": frontier_study,
}


# --------------------------------------------------------------------------- selection
def select(study: str, candidates: Mapping[str, Sequence[tuple[str, Mapping]]], results: Sequence[Mapping],
           datasets: Sequence[str], seed: int, groups: Mapping[str, str] | None = None,
           reference: str | None = None, metric: str = "ndcg@10") -> dict:
    """Pick, per base method, the candidate with the highest unweighted mean validation
    ``metric`` over ``datasets`` (ties: the earlier candidate). Only select-stage results (no
    test query) are accepted. ``reference``: a method reported beside the candidates (DIVE)."""
    for r in results:
        if r["stage"] != "select" or r["role"] != "validation":
            raise ValueError(f"selection {study}: result of {r['dataset']}/{r['method']} is stage "
                             f"{r['stage']!r} (role {r['role']!r}); only validation results may select")
    score = {(r["method"], r["dataset"]): r["metrics"][metric] for r in results if r["seed"] == seed}

    def summarize(method):
        per = {}
        for ds in datasets:
            if (method, ds) not in score:
                raise ValueError(f"selection {study}: no validation result for {method} on {ds} (seed {seed})")
            per[ds] = score[(method, ds)]
        return {"method": method, "per_dataset": per, "mean": dataset_mean(per, groups or {})}

    out = {"study": study, "metric": metric, "datasets": list(datasets), "seed": seed, "methods": {}}
    for base, cands in candidates.items():
        rows = [{**summarize(name), "overrides": dict(over)} for name, over in cands]
        best = max(range(len(rows)), key=lambda i: (rows[i]["mean"], -i))
        out["methods"][base] = {"candidates": rows,
                                "pick": {k: rows[best][k] for k in ("method", "overrides", "mean")}}
    if reference:
        out["reference"] = summarize(reference)
    return out
