"""Aggregate result JSONs: flat rows, mean / std over seeds, TSV, paired significance (the
study tables and figures built from them are in :mod:`dive_core.studies`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from .atomic import atomic_open
from .records import run_key

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


DIVE = "dive"  # the paper's method: its variants (``DIVE_VARIANTS`` types) are compared with it
DIVE_VARIANTS = ("dive_corpus",)  # DIVE with one change (docs/methods.md#dive-corpus-variants)


def significance_rows(results: Sequence[Mapping], per_query: Mapping[tuple, str], reference_type: str = DIVE,
                      metrics: Sequence[str] = ("ndcg@10", "recall@10")) -> list[dict]:
    """For each dataset and each method of type ``reference_type`` (for DIVE: also of its variants'
    types, ``DIVE_VARIANTS``): the best other compressed method outside that family (by mean over
    seeds) and a paired randomization test on per-query scores averaged over seeds. ``results``:
    result records; ``per_query``: each run's per-query TSV by :func:`dive_core.records.run_key`."""
    family = (reference_type, *DIVE_VARIANTS) if reference_type == DIVE else (reference_type,)
    by: dict[tuple[str, str, str], list[Mapping]] = {}
    for r in results:  # per backbone: runs of two backbones are never pooled or compared
        by.setdefault((r.get("backbone", ""), r["dataset"], r["method"]), []).append(r)
    out = []
    for bb, ds in dict.fromkeys((r.get("backbone", ""), r["dataset"]) for r in results):
        methods = [m for (b, d, m) in by if (b, d) == (bb, ds)]
        refs = [m for m in methods if by[(bb, ds, m)][0]["method_type"] in family]
        others = [m for m in methods if by[(bb, ds, m)][0]["method_type"] not in (*family, "frozen")]
        for ref in refs:
            for metric in metrics:
                if not others:
                    continue
                mean = {m: mean_std([r["metrics"][metric] for r in by[(bb, ds, m)]])[0] for m in others}
                best = max(others, key=lambda m: mean[m])
                pair = paired(by[(bb, ds, ref)], by[(bb, ds, best)], per_query, metric)
                out.append({"backbone": bb, "dataset": ds, "metric": metric, "method": ref, "baseline": best,
                            **{k: pair[k] for k in ("n_queries", "mean_diff", "p_value")}})
    return out


def paired(runs: Sequence[Mapping], base: Sequence[Mapping], per_query: Mapping[tuple, str], metric: str,
           queries: Iterable[str] | None = None) -> dict:
    """``runs`` against ``base`` on their common queries (of ``queries`` only, if given), each side's
    per-query scores averaged over its seeds: both means, the mean difference, the query count and
    the two-sided paired randomization test's p."""
    a = per_query_means([per_query[run_key(r)] for r in runs], metric)
    b = per_query_means([per_query[run_key(r)] for r in base], metric)
    qs = sorted(set(a) & set(b) & (set(a) if queries is None else set(queries)))
    n = len(qs)
    return {"n_queries": n, "mean": sum(a[q] for q in qs) / n if n else float("nan"),
            "baseline_mean": sum(b[q] for q in qs) / n if n else float("nan"),
            "mean_diff": sum(a[q] - b[q] for q in qs) / n if n else float("nan"),
            "p_value": paired_randomization([a[q] for q in qs], [b[q] for q in qs])}


def _section(title: str, intro: str, header: Sequence[str], body: Sequence[str]) -> str:
    """A markdown section: heading, paragraph, table."""
    return "\n".join(["", f"### {title}", "", intro, "", "| " + " | ".join(header) + " |",
                      "|" + "---|" * len(header), *body]) + "\n"


TRUNCATION = "truncate"  # the backbone's own prefix: for a Matryoshka-trained backbone, its intended use


def versus_rows(results: Sequence[Mapping], per_query: Mapping[tuple, str], baseline: str = TRUNCATION,
                metric: str = "ndcg@10", types: Sequence[str] | None = None, any_k: bool = False,
                skip: Sequence[str] = ()) -> list[dict]:
    """Every compressed method of each (backbone, dataset, dimension) against ``baseline`` (the
    method of that name, same dimension): mean difference and two-sided paired randomization test
    on per-query scores averaged over seeds, over all queries and (``subsets``) over the ``seen`` and
    the ``unseen`` ones (docs/protocol.md#evaluation: whether a relevant document of the query was a
    training positive). ``types``: only methods of these ``method_type`` values; ``skip``: not the
    methods of these names. ``any_k``: the baseline at its own dimension (a study holds each method at
    one k; csr's k is its latent count, not its bytes). Empty when the study has no ``baseline`` runs."""
    from .evaluation import read_per_query

    by: dict[tuple, list[Mapping]] = {}
    for r in results:
        by.setdefault((r.get("backbone", ""), r["dataset"], r["k"], r["method"]), []).append(r)
    out = []
    for (bb, ds, k, me), runs in by.items():
        base = by.get((bb, ds, k, baseline)) if not any_k else \
            next((v for (b, d, _, m), v in by.items() if (b, d, m) == (bb, ds, baseline)), None)
        if me == baseline or me in skip or base is None or runs[0]["method_type"] == "frozen" or \
                (types is not None and runs[0]["method_type"] not in types) or \
                any(run_key(r) not in per_query for r in [*runs, *base]):
            continue
        flags = read_per_query(per_query[run_key(base[0])])
        seen = {q for q, row in flags.items() if row["seen"]}
        subsets = {name: paired(runs, base, per_query, metric, qs)
                   for name, qs in (("seen", seen), ("unseen", set(flags) - seen))}
        out.append({"backbone": bb, "dataset": ds, "k": k, "metric": metric, "method": me, "baseline": baseline,
                    "seeds": len(runs), **paired(runs, base, per_query, metric), "subsets": subsets})
    return sorted(out, key=lambda r: (r["backbone"], r["dataset"], r["k"], -r["mean_diff"]))


VERSUS_HEADINGS = {  # baseline -> (section title, what is compared, the baseline's column)
    TRUNCATION: ("Against the backbone's own truncation",
                 "Each compressed method against keeping the backbone's first k coordinates (for a "
                 "Matryoshka-trained backbone, the compression it was trained for) at the same k", "truncation"),
    DIVE: ("DIVE's variants against DIVE",
           "Each variant of DIVE (one change to DIVE, every other setting DIVE's; docs/methods.md) against DIVE at "
           "the same k, the same seeds and triplets", "DIVE"),
}


def versus_markdown(rows: Sequence[Mapping], plain: bool = False,
                    heading: tuple[str, str, str] | None = None) -> str:
    """``versus_rows`` as a section; its title and text are the baseline's (``VERSUS_HEADINGS``), or
    with ``plain`` (an experiment's ``versus:``) a plain "against" section, or ``heading``'s (section
    title, what is compared, the baseline's column) when a study gives its own."""
    if not rows:
        return ""
    name = rows[0]["baseline"]
    title, what, column = heading or (VERSUS_HEADINGS[name] if not plain else (
        "Against", f"Each other compressed method of the study against {name} on the same queries (each at its "
        "own k: see the bytes per stored vector)", name))
    return _section(
        f"{title} ({rows[0]['baseline']})",
        f"{what}; {rows[0]['metric']} per query averaged over seeds, two-sided paired randomization test, 10,000 "
        f"sign flips. Δ > 0 with p < 0.05: the method beats {column}. Also on the seen and the unseen queries "
        "alone (a relevant document of a seen query was a training positive): Δ (p, queries).",
        ["backbone", "dataset", "k", "method", "seeds", "nDCG@10", column, "Δ", "p", "queries", "seen: Δ (p, n)",
         "unseen: Δ (p, n)"],
        [f"| {r['backbone']} | {r['dataset']} | {r['k']} | {r['method']} | {r['seeds']} | {r['mean']:.4f} | "
         f"{r['baseline_mean']:.4f} | {r['mean_diff']:+.4f} | {r['p_value']:.4f} | {r['n_queries']} | "
         + " | ".join(_subset_cell(r.get("subsets", {}).get(s)) for s in ("seen", "unseen")) + " |" for r in rows])


def _subset_cell(pair: Mapping | None) -> str:
    if not pair or not pair["n_queries"]:
        return "-"
    return f"{pair['mean_diff']:+.4f} ({pair['p_value']:.4f}, {pair['n_queries']})"


def significance_markdown(rows: Sequence[Mapping]) -> str:
    if not rows:
        return ""
    return _section(
        "Paired significance",
        "Method vs the best other compressed method of each dataset (by mean over seeds); per-query scores "
        "averaged over seeds; two-sided paired randomization test, 10,000 sign flips.",
        ["backbone", "dataset", "metric", "method", "best other", "Δ mean", "p", "queries"],
        [f"| {r.get('backbone', '')} | {r['dataset']} | {r['metric']} | {r['method']} | {r['baseline']} | "
         f"{r['mean_diff']:+.4f} | {r['p_value']:.4f} | {r['n_queries']} |" for r in rows])
