"""What every study shares: the context a study gets, what it returns, summaries over seeds,
the metric and subset tables, the grouped bar chart, the colours and figure plumbing."""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from .. import report
from ..atomic import atomic_path

REFERENCE_STYLE = dict(color="0.85", edgecolor="0.3", hatch="//", linewidth=0.8)  # frozen in every bar chart
# one colour per compressed method type in every figure (tab10 without its grey, which is frozen's)
METHOD_COLORS = dict(zip(("truncate", "pca", "autoencoder", "mrl", "search_adaptor", "smec", "dive", "csr", "csr_free"),
                         ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
                          "#bcbd22")))
# by position: variants of one type; long enough that a figure of 15 methods repeats no colour
PALETTE = (*METHOD_COLORS.values(), "#393b79", "#e6550d", "#31a354", "#756bb1", "#843c39", "#637939")


@dataclass
class StudyContext:
    name: str
    title: str
    methods: list[str]
    datasets: list[str]
    backbones: list[str] = field(default_factory=list)
    groups: dict[str, str] = field(default_factory=dict)  # dataset -> group (CQADupStack communities)
    note: str = ""
    selection: dict | None = None  # lr_audit: the selection record
    # arrival: the arrival_variants selection records its variants trained with, by path, each with
    # its file's sha256 under "sha256"
    picks: dict[str, dict] = field(default_factory=dict)
    highlight: str | None = None  # heads: the configured head count's method
    versus: list[str] = field(default_factory=list)  # main: every other method against each of these
    # the declared per-run input files, by records.run_key of the run's result record
    per_query: dict[tuple, str] = field(default_factory=dict)
    train_logs: dict[tuple, str] = field(default_factory=dict)
    arrival: dict[str, dict] = field(default_factory=dict)  # arrival: dataset -> its arrival manifest
    codes: list[dict] = field(default_factory=list)  # arrival: its arrival_codes records (index quantizers)
    repeats: list[dict] = field(default_factory=list)  # frontier: its frontier_seed records (other seeds)
    # frontier, budget: the frontier_validation records (validation queries, select-stage maps), whose
    # scores alone pick the codes
    validation: list[dict] = field(default_factory=list)
    budgets: list[int] = field(default_factory=list)  # budget: bytes per vector at which a code is picked
    stratum: str = "all"  # an arrival budget study: the validation queries its picks weigh
    max_latency_ms: float | None = None  # budget: codes slower than this (one query, k = 10, one thread) left out


@dataclass
class StudyOutput:
    markdown: str
    rows: list[dict]
    figure: Callable[[str | Path], None]


def method_values(summary: Mapping, bb: str, method: str, metric: str,
                  ctx: "StudyContext") -> tuple[dict[str, float], float]:
    """``({dataset: mean over seeds}, mean over datasets)`` of one method and metric; the mean
    over datasets is NaN unless every dataset of the study has a result."""
    vals = {ds: summary[(bb, ds, method)][metric] for ds in ctx.datasets if (bb, ds, method) in summary}
    return vals, report.dataset_mean(vals, ctx.groups) if len(vals) == len(ctx.datasets) else float("nan")


def cell(v: float, std: float = float("nan"), digits: int = 4) -> str:
    return report.fmt(v, std, digits)


def summarize_runs(results: Sequence[Mapping]) -> dict[tuple[str, str, str], dict]:
    rows = report.collect(results)
    summ = report.summarize(rows, keys=("backbone", "dataset", "method"))
    return {(s["backbone"], s["dataset"], s["method"]): s for s in summ}


def study_backbones(results: Sequence[Mapping], ctx: StudyContext) -> list[str]:
    return ctx.backbones or list(dict.fromkeys(r["backbone"] for r in results))


def deviations(results: Sequence[Mapping]) -> list[str]:
    """Stated deviations from the paper's protocol found in the results (triplet caps)."""
    caps = {}
    for r in results:
        cap = (r.get("config") or {}).get("triplets", {}).get("max_per_query")  # this dataset's (rule evaluate)
        if cap is not None and r.get("config", {}).get("n_triplets") is not None:
            caps[r["dataset"]] = cap
    return [f"**Deviation from the paper's protocol:** training triplets capped at {cap} per query on "
            f"{ds} (a seeded sample shared by every method; the paper trains on all of them)."
            for ds, cap in sorted(caps.items())]


def opening_lines(ctx: StudyContext, results: Sequence[Mapping], note: str | None = None) -> list[str]:
    """A study table's opening lines: title, note, stated deviations (every study whose runs
    trained on capped triplets says so)."""
    note = ctx.note if note is None else note
    dev = deviations(results)
    return [f"## {ctx.title}", ""] + ([note, ""] if note else []) + dev + ([""] if dev else [])


def roles(results: Sequence[Mapping]) -> str:
    """The evaluated query roles of a study's runs (``validation`` for a select-stage study)."""
    return " and ".join(sorted({r["role"] for r in results}))


def paired_against(results: Sequence[Mapping], ctx: StudyContext, reference: str, title: str,
                   what: str, **which) -> tuple[str, dict[tuple[str, str, str], dict]]:
    """Each other method of the study against ``reference`` per (backbone, dataset) at the same k, on
    per-query nDCG@10 averaged over seeds (:func:`dive_core.report.versus_rows`: the two-sided paired
    randomization test, 10,000 sign flips; ``which``: its ``any_k`` and ``skip``): the Markdown section
    (empty without such pairs) and the rows by (backbone, dataset, method)."""
    rows = report.versus_rows(results, ctx.per_query, baseline=reference, **which)
    return (report.versus_markdown(rows, heading=(title, what, reference)),
            {(r["backbone"], r["dataset"], r["method"]): r for r in rows})


def paired_columns(pairs: Mapping[tuple[str, str, str], Mapping], bb: str, method: str,
                   datasets: Sequence[str], reference: str) -> dict:
    """One method's paired tests (:func:`paired_against`) as TSV columns, per dataset: Δ nDCG@10
    against ``reference``, p, query count (absent for the reference itself)."""
    out = {}
    for ds in datasets:
        r = pairs.get((bb, ds, method))
        if r is not None:
            out.update({f"{ds}_diff_vs_{reference}": r["mean_diff"], f"{ds}_p_vs_{reference}": r["p_value"],
                        f"{ds}_n_queries": r["n_queries"]})
    return out


def column_label(ds: str, bb: str, many_backbones: bool) -> str:
    return f"{ds} ({bb})" if many_backbones else ds


def method_colors(types: Mapping[str, str]) -> dict[str, str]:
    """Compressed method name -> colour. Each method type keeps one colour across every figure
    (``mrl-tuned`` is MRL's red, as ``mrl`` is) when the figure has one method per type; a figure
    of variants of one type (the ablation) colours them by position instead."""
    names = list(types)
    if len(set(types.values())) == len(names) and all(t in METHOD_COLORS for t in types.values()):
        return {m: METHOD_COLORS[types[m]] for m in names}
    return {m: PALETTE[i % len(PALETTE)] for i, m in enumerate(names)}


def is_reference(s: Mapping) -> bool:
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
                if s is None or is_reference(s):
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
                    txt = "–" if s is None else cell(s[m], s[f"{m}_std"])
                    cells.append(f"**{txt}**" if best.get((ds, m)) == me and s is not None else txt)
                if train_seconds:
                    cells.append("–" if s is None or math.isnan(s["train_seconds"]) else f"{s['train_seconds']:.0f}")
            if multi:
                for m, _ in metrics:
                    txt = cell(means[(me, m)])
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
        head = ["method"] + [f"{column_label(ds, bb, len(backbones) > 1)} {sub}" for ds in ctx.datasets
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
                    cells.append("– (n=0)" if n == 0 else
                                 f"{cell(s[f'{sub}_ndcg@10'], s[f'{sub}_ndcg@10_std'])} (n={n})")
                s_n = 0 if s is None else int(s.get("unseen_n") or 0)
                cells.append("–" if s is None or s_n == 0 else
                             cell(s["unseen_train_pos@10"], s["unseen_train_pos@10_std"], 3))
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def grouped_bars(path: str | Path, summary: Mapping, ctx: StudyContext, backbones: Sequence[str],
                 metrics: Sequence[tuple[str, str]] = report.SHOWN, title: str = "") -> None:
    """One panel per metric: bars per method grouped by dataset (and backbone), ± std over seeds;
    the uncompressed reference (frozen) hatched grey and labelled as such in the legend, so it
    cannot be mistaken for a compressed method."""
    plt = pyplot()
    groups = [(bb, ds) for bb in backbones for ds in ctx.datasets]
    n_m = max(1, len(ctx.methods))
    width_in = max(6.0, 0.55 * n_m * len(groups) + 2.5)
    fig, axes = plt.subplots(1, len(metrics), figsize=(width_in * len(metrics) * 0.75 + 2.2, 4.6), dpi=120,
                             squeeze=False)
    width = 0.8 / n_m
    compressed = [me for me in ctx.methods if not any(is_reference(summary[(bb, ds, me)])
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
        ax.set_xticks(range(len(groups)), [column_label(ds, bb, len(backbones) > 1) for bb, ds in groups])
        ax.set_ylabel(label)
        ax.set_ylim(0, top + 0.17)  # room for the rotated value labels above the tallest bar
        ax.set_yticks([t / 10 for t in range(0, 11, 2) if t / 10 <= top + 0.17])
        ax.grid(axis="y", alpha=0.3)
        ax.set_title(label, fontsize=10)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="center left", bbox_to_anchor=(0.995, 0.5), frameon=False)
    suptitle(fig, title or ctx.title)
    save(fig, path)


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def suptitle(fig, title: str) -> None:
    chars = max(40, int(11 * fig.get_size_inches()[0]))
    text = "\n".join(textwrap.wrap(title, chars))
    fig.suptitle(text, fontsize=10)
    fig.tight_layout()  # leaves room for the suptitle itself; a band reserved on top of that stayed empty


def save(fig, path) -> None:
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, format="png", bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
