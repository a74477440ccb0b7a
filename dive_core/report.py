"""Aggregate result JSONs into tables (TSV + Markdown) and figures (PNG)."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from .atomic import atomic_open, atomic_path, read_json

SHOWN = (("ndcg@10", "nDCG@10"), ("recall@10", "R@10"))


def collect(results: Iterable[Mapping]) -> list[dict]:
    """One flat row per result (a loaded result JSON)."""
    rows = []
    for r in results:
        row = {
            "dataset": r["dataset"], "backbone": r["backbone"], "method": r["method"],
            "method_type": r["method_type"], "k": r["k"], "stage": r["stage"], "seed": r["seed"],
            "role": r["role"], "n_queries": r["n_queries"],
            "train_seconds": r.get("timings", {}).get("train_seconds"),
        }
        row.update(r["metrics"])
        share = (r.get("diagnostics") or {}).get("train_positive_share@10") or {}
        row["unseen_train_pos@10"] = share.get("unseen")
        for subset in ("seen", "unseen"):
            sub = r.get("subsets", {}).get(subset) or {}
            row[f"{subset}_n"] = sub.get("n_queries", 0)
            for m, v in (sub.get("metrics") or {}).items():
                row[f"{subset}_{m}"] = v
        rows.append(row)
    return rows


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    vals = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not vals:
        return float("nan"), float("nan")
    mean = sum(vals) / len(vals)
    if len(vals) < 2:
        return mean, float("nan")
    var = sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)  # sample standard deviation
    return mean, math.sqrt(var)


def fmt(mean: float, std: float, digits: int = 4) -> str:
    if math.isnan(mean):
        return "–"
    return f"{mean:.{digits}f}" if math.isnan(std) else f"{mean:.{digits}f} ± {std:.{digits}f}"


def summarize(rows: Sequence[Mapping], keys: Sequence[str] = ("dataset", "method"),
              metrics: Sequence[str] = ("ndcg@10", "recall@10", "recall@100", "mrr@10",
                                        "seen_ndcg@10", "unseen_ndcg@10", "unseen_train_pos@10",
                                        "train_seconds", "seen_n", "unseen_n")) -> list[dict]:
    """Mean and sample std over seeds for each (dataset, method); keeps first-seen order."""
    groups: dict[tuple, list[Mapping]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in keys), []).append(r)
    out = []
    for key, rs in groups.items():
        s = dict(zip(keys, key))
        s.update({"method_type": rs[0]["method_type"], "k": rs[0]["k"], "n_seeds": len(rs), "seeds": sorted(r["seed"] for r in rs)})
        for m in metrics:
            s[m], s[f"{m}_std"] = mean_std([r.get(m) for r in rs])
        out.append(s)
    return out


def write_tsv(path: str | Path, rows: Sequence[Mapping]) -> None:
    cols: list[str] = []
    for r in rows:
        cols += [c for c in r if c not in cols]
    with atomic_open(path, "w", encoding="utf-8") as fh:
        fh.write("\t".join(cols) + "\n")
        for r in rows:
            fh.write("\t".join(_cell(r.get(c)) for c in cols) + "\n")


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return "" if math.isnan(v) else f"{v:.6g}"
    if isinstance(v, (list, tuple)):
        return ",".join(map(str, v))
    return str(v)


def markdown_table(summary: Sequence[Mapping], title: str, methods: Sequence[str],
                   datasets: Sequence[str]) -> str:
    """Methods as rows; per dataset nDCG@10 and R@10 as mean ± std over seeds, best compressed
    method in bold; train time (mean seconds) per dataset."""
    by = {(s["dataset"], s["method"]): s for s in summary}
    lines = [f"## {title}", ""]
    head = ["method", "k"]
    for ds in datasets:
        head += [f"{ds} {label}" for _, label in SHOWN] + [f"{ds} train s"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    best = {}
    for ds in datasets:
        for m, _ in SHOWN:
            cands = [(by[(ds, me)][m], me) for me in methods if (ds, me) in by
                     and by[(ds, me)]["method_type"] != "frozen" and not math.isnan(by[(ds, me)][m])]
            best[(ds, m)] = max(cands)[1] if cands else None
    for me in methods:
        ks = {by[(ds, me)]["k"] for ds in datasets if (ds, me) in by}
        cells = [me, ",".join(map(str, sorted(ks))) or "–"]
        for ds in datasets:
            s = by.get((ds, me))
            for m, _ in SHOWN:
                if s is None:
                    cells.append("–")
                    continue
                txt = fmt(s[m], s[f"{m}_std"])
                cells.append(f"**{txt}**" if best.get((ds, m)) == me else txt)
            cells.append("–" if s is None or math.isnan(s["train_seconds"]) else f"{s['train_seconds']:.0f}")
        lines.append("| " + " | ".join(cells) + " |")
    n_seeds = sorted({s["n_seeds"] for s in summary})
    lines += ["", f"Mean ± sample standard deviation over seeds ({'/'.join(map(str, n_seeds))} per cell); "
              "bold: best compressed method (frozen is the uncompressed reference)."]
    return "\n".join(lines) + "\n"


def bar_chart(path: str | Path, summary: Sequence[Mapping], methods: Sequence[str],
              datasets: Sequence[str], metric: str = "ndcg@10", title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by = {(s["dataset"], s["method"]): s for s in summary}
    fig, ax = plt.subplots(figsize=(max(7, 0.9 * len(methods) * len(datasets) + 3.5), 4.5), dpi=120)
    width = 0.8 / max(1, len(methods))
    for i, me in enumerate(methods):
        xs, ys, es = [], [], []
        for j, ds in enumerate(datasets):
            s = by.get((ds, me))
            if s is None:
                continue
            xs.append(j + (i - (len(methods) - 1) / 2) * width)
            ys.append(s[metric])
            es.append(0 if math.isnan(s[f"{metric}_std"]) else s[f"{metric}_std"])
        ax.bar(xs, ys, width, yerr=es, capsize=3, label=me)
        for x, y, e in zip(xs, ys, es):
            ax.text(x, y + e + 0.01, f"{y:.3f}", ha="center", va="bottom", fontsize=7, rotation=90)
    ax.set_xticks(range(len(datasets)), datasets)
    ax.set_ylabel(metric)
    ax.set_ylim(0, min(1.0, max([s[metric] for s in summary if not math.isnan(s[metric])] + [0.1]) + 0.15))
    # wrap long titles to the figure's width (about 11 characters per inch at this size)
    width_chars = max(40, int(11 * fig.get_size_inches()[0]))
    ax.set_title("\n".join(textwrap.wrap(title or metric, width_chars)), fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, format="png")
    plt.close(fig)


# --------------------------------------------------------------------------- significance


def paired_randomization(a: Sequence[float], b: Sequence[float], n_resamples: int = 10000,
                         seed: int = 0) -> float:
    """Two-sided paired randomization (sign-flip) test of mean(a - b) = 0; returns the p-value
    with the +1 correction ``(1 + #{|mean*| >= |mean|}) / (1 + n_resamples)``."""
    import numpy as np

    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    if d.size == 0:
        return float("nan")
    observed = abs(d.mean())
    rng = np.random.default_rng(seed)
    signs = rng.choice((-1.0, 1.0), size=(n_resamples, d.size))
    means = np.abs((signs * d).mean(axis=1))
    return float((1 + np.count_nonzero(means >= observed - 1e-15)) / (1 + n_resamples))


def per_query_means(paths: Iterable[str | Path], metric: str) -> dict[str, float]:
    """Per-query ``metric`` averaged over several per-query TSVs (one per seed)."""
    from .evaluation import read_per_query

    sums: dict[str, list[float]] = {}
    for p in paths:
        for q, row in read_per_query(p).items():
            sums.setdefault(q, []).append(row[metric])
    return {q: sum(v) / len(v) for q, v in sums.items()}


def significance_rows(results: Sequence[Mapping], reference_type: str = "dive",
                      metrics: Sequence[str] = ("ndcg@10", "recall@10")) -> list[dict]:
    """For each dataset and each method of type ``reference_type``: the best other compressed
    method (by mean over seeds) and a paired randomization test on per-query scores averaged
    over seeds. ``results`` are result JSON dicts (with ``artifacts.per_query``)."""
    by: dict[tuple[str, str], list[Mapping]] = {}
    for r in results:
        by.setdefault((r["dataset"], r["method"]), []).append(r)
    out = []
    for ds in dict.fromkeys(r["dataset"] for r in results):
        methods = [m for (d, m) in by if d == ds]
        refs = [m for m in methods if by[(ds, m)][0]["method_type"] == reference_type]
        others = [m for m in methods if by[(ds, m)][0]["method_type"] not in (reference_type, "frozen")]
        for ref in refs:
            for metric in metrics:
                if not others:
                    continue
                mean = {m: mean_std([r["metrics"][metric] for r in by[(ds, m)]])[0] for m in others}
                best = max(others, key=lambda m: mean[m])
                a = per_query_means([r["artifacts"]["per_query"] for r in by[(ds, ref)]], metric)
                b = per_query_means([r["artifacts"]["per_query"] for r in by[(ds, best)]], metric)
                qs = sorted(set(a) & set(b))
                diff = sum(a[q] - b[q] for q in qs) / len(qs) if qs else float("nan")
                out.append({"dataset": ds, "metric": metric, "method": ref, "baseline": best,
                            "n_queries": len(qs), "mean_diff": diff,
                            "p_value": paired_randomization([a[q] for q in qs], [b[q] for q in qs])})
    return out


def significance_markdown(rows: Sequence[Mapping]) -> str:
    if not rows:
        return ""
    lines = ["", "### Paired significance", "",
             "Method vs the best other compressed method of each dataset (by mean over seeds); "
             "per-query scores averaged over seeds; two-sided paired randomization test, "
             "10,000 sign flips.", "",
             "| dataset | metric | method | best other | Δ mean | p | queries |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['dataset']} | {r['metric']} | {r['method']} | {r['baseline']} | "
                     f"{r['mean_diff']:+.4f} | {r['p_value']:.4f} | {r['n_queries']} |")
    return "\n".join(lines) + "\n"


def seen_unseen_markdown(summary: Sequence[Mapping], methods: Sequence[str], datasets: Sequence[str]) -> str:
    """nDCG@10 on the `seen` / `unseen` subsets (SPEC section 4: document overlap)."""
    by = {(s["dataset"], s["method"]): s for s in summary}
    head = ["method"] + [f"{ds} {sub}" for ds in datasets
                         for sub in ("seen", "unseen", "unseen train-pos@10")]
    lines = ["", "### Document overlap: nDCG@10 on seen / unseen evaluated queries", "",
             "`seen`: the query has a relevant document that is a positive of some training query "
             "of the stage; `unseen`: it has none (where geometry preservation is really tested). "
             "`unseen train-pos@10`: share of the unseen queries' top-10 results that are training "
             "positives (none of them is relevant to an unseen query): a method that learned a "
             "document prior instead of geometry fills rankings with them.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for me in methods:
        cells = [me]
        for ds in datasets:
            s = by.get((ds, me))
            for sub in ("seen_ndcg@10", "unseen_ndcg@10", "unseen_train_pos@10"):
                digits = 3 if sub == "unseen_train_pos@10" else 4
                cells.append("–" if s is None else fmt(s[sub], s[f"{sub}_std"], digits))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
