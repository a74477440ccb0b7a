"""Documents that arrive after training: nDCG@10 on the evaluated queries whose relevant documents
were all known at training time, all arrived after it, or some of each (the strata of the arrival
manifest, :func:`dive_core.splits.make_arrival_manifest`), with paired tests per stratum."""

from __future__ import annotations

import math
from typing import Mapping, Sequence

from .. import paths, records, report
from ..evaluation import read_per_query, stratum_means
from ..splits import STRATA
from .arrival_codes import COLUMNS, METRIC, code_rows, codes_legend, codes_markdown, codes_panels
from .shared import (
    REFERENCE_STYLE, StudyContext, StudyOutput, cell, column_label, method_colors, opening_lines, pyplot, save,
    study_backbones, suptitle,
)

LABEL_FREE = ("truncate", "pca", "autoencoder")  # the label-free baselines the other methods are tested against
REFERENCE = "frozen"  # the uncompressed reference at full dimension


def is_candidate(method_type: str) -> bool:
    """Every method type that is neither frozen nor one of the label-free baselines: the supervised
    ones (mrl, search_adaptor, smec, dive, ...) and any other method a study brings, such as CSR's
    ``csr_free``, which reads no label but is a candidate, not a baseline."""
    return method_type not in (REFERENCE, *LABEL_FREE)


def stratum_queries(ctx: StudyContext, dataset: str, role: str) -> dict[str, list[str]]:
    """``{stratum: query ids}`` of ``role``'s queries of ``dataset`` (its arrival manifest)."""
    manifest = ctx.arrival.get(dataset)
    if manifest is None:
        raise ValueError(f"arrival study: no arrival manifest of dataset {dataset!r} among the study's inputs "
                         f"({paths.ARRIVAL.format(dataset=dataset)}, rule make_arrival)")
    return {s: list(manifest["strata"][role][s]) for s in STRATA}


def run_scores(r: Mapping, ctx: StudyContext, cache: dict[str, dict] | None = None) -> dict[str, float]:
    """nDCG@10 of one run (a result record) on each stratum of its evaluated role: the mean of its
    per-query scores over the stratum's queries (NaN for an empty stratum); ``all``: the record's
    own nDCG@10. A per-query file lacking a query of a stratum is refused, naming the file."""
    key = records.run_key(r)
    path = ctx.per_query.get(key)
    if path is None:
        raise ValueError(f"arrival study: no per-query file declared for the run {key}")
    cache = {} if cache is None else cache
    if path not in cache:
        cache[path] = read_per_query(path)
    per_query = cache[path]
    strata = stratum_queries(ctx, r["dataset"], r["role"])
    return {"all": r["metrics"][METRIC], **stratum_means(
        per_query, strata, METRIC, path, f"{r['role']} queries of {paths.ARRIVAL.format(dataset=r['dataset'])}")}


def summarize(results: Sequence[Mapping], ctx: StudyContext) -> dict[tuple[str, str, str], dict]:
    """``{(backbone, dataset, method): summary}``: per column of :data:`COLUMNS` the mean and
    sample std over seeds (``<col>``, ``<col>_std``) and the query count (``<col>_n``); and
    ``runs``, the method's result records."""
    by: dict[tuple[str, str, str], list[Mapping]] = {}
    for r in results:
        by.setdefault((r["backbone"], r["dataset"], r["method"]), []).append(r)
    roles: dict[tuple[str, str], set[str]] = {}
    for (bb, ds, _), rs in by.items():
        roles.setdefault((bb, ds), set()).update(r["role"] for r in rs)
    for (bb, ds), rr in roles.items():
        if len(rr) > 1:
            raise ValueError(f"arrival study: {ds} ({bb}) has results on several query roles {sorted(rr)}; "
                             "a study evaluates one stage")
    cache: dict[str, dict] = {}
    out = {}
    for (bb, ds, me), rs in by.items():
        role = rs[0]["role"]
        strata = stratum_queries(ctx, ds, role)
        scores = [run_scores(r, ctx, cache) for r in rs]
        s = {"backbone": bb, "dataset": ds, "method": me, "method_type": rs[0]["method_type"], "k": rs[0]["k"],
             "role": role, "n_seeds": len(rs), "seeds": sorted(r["seed"] for r in rs), "runs": rs}
        for c in COLUMNS:
            s[c], s[f"{c}_std"] = report.mean_std([sc[c] for sc in scores])
            s[f"{c}_n"] = rs[0]["n_queries"] if c == "all" else len(strata[c])
        out[(bb, ds, me)] = s
    return out


def _counts(summary: Mapping, bb: str, ds: str) -> dict[str, int] | None:
    s = next((v for (b, d, _), v in summary.items() if (b, d) == (bb, ds)), None)
    return None if s is None else {c: s[f"{c}_n"] for c in COLUMNS}


def _best(summary: Mapping, bb: str, ds: str, col: str, methods: Sequence[str], types=None) -> str | None:
    """The method of ``methods`` (of method type in ``types``, default: every compressed one) with
    the highest mean on ``col``; the first one on a tie."""
    cands = [me for me in methods if (bb, ds, me) in summary
             and summary[(bb, ds, me)]["method_type"] != REFERENCE
             and (types is None or summary[(bb, ds, me)]["method_type"] in types)
             and not math.isnan(summary[(bb, ds, me)][col])]
    return max(cands, key=lambda me: summary[(bb, ds, me)][col]) if cands else None


def stratum_table(summary: Mapping, ctx: StudyContext, backbones: Sequence[str]) -> list[str]:
    """Methods as rows; per dataset nDCG@10 on all evaluated queries and on each stratum (n = its
    query count), mean ± std over seeds; bold: the best compressed method of each column."""
    lines = []
    for bb in backbones:
        lines += [f"### nDCG@10 by stratum, backbone {bb}", ""]
        head = ["method", "k"]
        for ds in ctx.datasets:
            n = _counts(summary, bb, ds)
            head += [f"{ds} {c}" + ("" if n is None else f" (n={n[c]})") for c in COLUMNS]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        best = {(ds, c): _best(summary, bb, ds, c, ctx.methods) for ds in ctx.datasets for c in COLUMNS}
        for me in ctx.methods:
            ks = sorted({summary[(bb, ds, me)]["k"] for ds in ctx.datasets if (bb, ds, me) in summary})
            if not ks:
                continue
            cells = [me, ",".join(map(str, ks))]
            for ds in ctx.datasets:
                s = summary.get((bb, ds, me))
                for c in COLUMNS:
                    if s is None:
                        cells.append("–")
                    elif s[f"{c}_n"] == 0:
                        cells.append("– (n=0)")
                    else:
                        txt = cell(s[c], s[f"{c}_std"])
                        cells.append(f"**{txt}**" if best[(ds, c)] == me else txt)
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    n_seeds = sorted({s["n_seeds"] for s in summary.values()})
    role = "/".join(sorted({s["role"] for s in summary.values()}))
    lines.append(
        f"Mean ± sample standard deviation over seeds ({'/'.join(map(str, n_seeds))} per cell) of nDCG@10 on the "
        f"evaluated ({role}) queries: `all` of them, `known` (every relevant document known at training time), "
        "`new` (every relevant document arrived after training), `mixed` (some of each); n = query count. "
        "Bold: best compressed method per column; frozen is the uncompressed reference at full dimension. "
        "Methods named `-arrival` were fitted on the known documents only; frozen and truncate fit nothing. "
        "Every run searches the whole corpus.")
    return lines


def manifest_facts(ctx: StudyContext) -> list[str]:
    """One line per dataset: the arrival split's fraction, documents arriving / total, seed."""
    lines = []
    for ds in ctx.datasets:
        m = ctx.arrival.get(ds)
        if m is None:
            continue
        c = m["counts"]
        lines.append(f"Arrival split of {ds}: fraction {m['fraction']:g}, {c['arriving']} of {c['docs']} documents "
                     f"arrive after training, seed {m['seed']}; the rule is in "
                     f"{paths.ARRIVAL.format(dataset=ds)} (`rule`).")
    return lines


def paired_rows(summary: Mapping, ctx: StudyContext, backbones: Sequence[str]) -> list[dict]:
    """Per backbone, dataset and non-empty stratum: every compressed method against frozen and
    against the backbone's own truncation (when the study has it), and every candidate method
    (:func:`is_candidate`) against the best label-free baseline of that stratum (by mean over seeds); per-query nDCG@10 averaged over seeds, two-sided paired randomization test."""
    out = []
    for bb in backbones:
        for ds in ctx.datasets:
            ref = next((me for me in ctx.methods if (bb, ds, me) in summary
                        and summary[(bb, ds, me)]["method_type"] == REFERENCE), None)
            compressed = [me for me in ctx.methods if (bb, ds, me) in summary
                          and summary[(bb, ds, me)]["method_type"] != REFERENCE]
            n = _counts(summary, bb, ds)
            if n is None:
                continue
            pq: dict[str, dict[str, float]] = {}

            def scores(me: str, qids: Sequence[str]) -> list[float]:
                if me not in pq:
                    pq[me] = report.per_query_means([ctx.per_query[records.run_key(r)]
                                                     for r in summary[(bb, ds, me)]["runs"]], METRIC)
                return [pq[me][q] for q in qids]

            role = next(v["role"] for (b, d, _), v in summary.items() if (b, d) == (bb, ds))
            for st, qids in stratum_queries(ctx, ds, role).items():
                if not qids:
                    continue
                base = _best(summary, bb, ds, st, ctx.methods, LABEL_FREE)
                for me in compressed:
                    candidate = is_candidate(summary[(bb, ds, me)]["method_type"])
                    vs = ([ref] if ref else []) + ([base] if base and candidate else [])
                    # the backbone's own truncation, the start of a Matryoshka-trained backbone
                    if (bb, ds, report.TRUNCATION) in summary and me != report.TRUNCATION and report.TRUNCATION not in vs:
                        vs.append(report.TRUNCATION)
                    for other in vs:
                        a, b = scores(me, qids), scores(other, qids)
                        out.append({"backbone": bb, "dataset": ds, "stratum": st, "n_queries": len(qids),
                                    "method": me, "vs": other,
                                    "mean_diff": sum(x - y for x, y in zip(a, b)) / len(qids),
                                    "p_value": report.paired_randomization(a, b)})
    return out


def paired_markdown(rows: Sequence[Mapping]) -> list[str]:
    if not rows:
        return []
    lines = ["", "### Paired tests per stratum", "",
             "Each compressed method against frozen (uncompressed, full dimension) and the backbone's truncation (where "
             "the study has it), and "
             "each other method (every supervised one, and CSR's label-free csr-free) against the best label-free "
             "baseline (truncate, PCA, autoencoder) of the same stratum, by "
             "mean nDCG@10 over seeds. Per-query nDCG@10 averaged over seeds; Δ = method − vs; two-sided paired "
             "randomization test, 10,000 sign flips. Empty strata are left out.", "",
             "| backbone | dataset | stratum | n | method | vs | Δ mean | p |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['backbone']} | {r['dataset']} | {r['stratum']} | {r['n_queries']} | {r['method']} | "
                     f"{r['vs']} | {r['mean_diff']:+.4f} | {r['p_value']:.4f} |")
    return lines


def summary_rows(summary: Mapping, ctx: StudyContext, backbones: Sequence[str]) -> list[dict]:
    """One row per backbone, dataset, method and stratum (``all`` first)."""
    rows = []
    for bb in backbones:
        for ds in ctx.datasets:
            for me in ctx.methods:
                s = summary.get((bb, ds, me))
                if s is None:
                    continue
                for c in COLUMNS:
                    rows.append({"backbone": bb, "dataset": ds, "method": me, "method_type": s["method_type"],
                                 "k": s["k"], "stratum": c, "n_queries": s[f"{c}_n"], "n_seeds": s["n_seeds"],
                                 "seeds": s["seeds"], METRIC: s[c], f"{METRIC}_std": s[f"{c}_std"]})
    return rows


def arrival_figure(path, summary: Mapping, ctx: StudyContext, backbones: Sequence[str]) -> None:
    """One panel per (backbone, dataset): nDCG@10 per stratum (x, labelled with its n), one bar
    per method, ± std over seeds; frozen hatched grey and labelled uncompressed."""
    plt = pyplot()
    panels = [(bb, ds) for bb in backbones for ds in ctx.datasets if _counts(summary, bb, ds) is not None]
    methods = [me for me in ctx.methods if any((bb, ds, me) in summary for bb, ds in panels)]
    types = {me: next(summary[(bb, ds, me)]["method_type"] for bb, ds in panels if (bb, ds, me) in summary)
             for me in methods}
    colors = method_colors({me: t for me, t in types.items() if t != REFERENCE})
    n_m = max(1, len(methods))
    codes = {(r["backbone"], r["dataset"]): code_rows(r) for r in ctx.codes}
    # side by side while a panel is narrow; one above the other when many methods make it wide; with
    # the index quantizers' codes: a row per panel, its codes on known and on new documents beside it
    ncols = min(2 if n_m * len(STRATA) <= 18 else 1, max(1, len(panels))) if not codes else 1
    nrows = max(1, math.ceil(len(panels) / ncols))
    panel_w = max(6.5, 0.3 * n_m * len(STRATA) + 1.5)
    fig, grid = plt.subplots(nrows, ncols + (2 if codes else 0), figsize=(panel_w * ncols + 13 * bool(codes),
                             4.4 * nrows), dpi=120, squeeze=False)
    axes = grid[:, :ncols]
    if codes:
        every = [r for rows in codes.values() for r in rows]
        code_colors = {me: "0.35" if types[me] == REFERENCE else colors[me] for me in methods}
        for m in {r["method"] for r in every}:
            code_colors.setdefault(m, "0.35")  # a coded method the bars leave out
        for row, (bb, ds) in zip(grid, panels):
            if codes.get((bb, ds)):
                codes_panels(row[ncols:], codes[(bb, ds)], code_colors, column_label(ds, bb, len(backbones) > 1))
            else:
                for ax in row[ncols:]:
                    ax.axis("off")
        grid[0, -1].legend(handles=codes_legend(every, code_colors),
                           fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    width = 0.8 / n_m
    legend: dict[str, object] = {}
    top = 0.1  # one y scale for every panel: bars of two datasets compare at a glance
    for ax, (bb, ds) in zip(axes.flat, panels):
        n = _counts(summary, bb, ds)
        for i, me in enumerate(methods):
            s = summary.get((bb, ds, me))
            if s is None:
                continue
            ref = types[me] == REFERENCE
            label = f"{me} (uncompressed, {s['k']}d)" if ref else me
            style = REFERENCE_STYLE if ref else dict(color=colors[me])
            for j, st in enumerate(STRATA):
                v = s[st]
                if math.isnan(v):
                    continue
                std = s[f"{st}_std"]  # NaN with one seed: no error bar
                e = 0.0 if math.isnan(std) else std
                x = j + (i - (n_m - 1) / 2) * width
                bars = ax.bar(x, v, width, yerr=None if math.isnan(std) else std, capsize=2, **style)
                legend.setdefault(label, bars)
                ax.text(x, v + e + 0.01, f"{v:.3f}", ha="center", va="bottom", fontsize=6.5, rotation=90)
                top = max(top, v + e)
        for j, st in enumerate(STRATA):
            if n[st] == 0:
                ax.text(j, 0.02, "no queries", ha="center", va="bottom", fontsize=8, color="0.4")
        ax.set_xticks(range(len(STRATA)), [f"{st}\n(n={n[st]})" for st in STRATA])
        ax.set_xlim(-0.5, len(STRATA) - 0.5)
        ax.set_ylabel("nDCG@10")
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
        ax.set_title(column_label(ds, bb, len(backbones) > 1), fontsize=10)
    for ax in list(axes.flat)[:len(panels)]:
        ax.set_ylim(0, top + 0.17)  # room for the rotated value labels above the tallest bar
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.legend(list(legend.values()), list(legend), fontsize=8, loc="center left", bbox_to_anchor=(0.995, 0.5),
               frameon=False)
    suptitle(fig, f"{ctx.title}: nDCG@10 by stratum")
    save(fig, path)


def picks_table(ctx: StudyContext) -> list[str]:
    """The selection records the arrival variants trained with, first: when each was made and its
    sha256 (made before any test number of the variants: their final runs read it), and each pick."""
    if not ctx.picks:
        return []
    lines = ["### Selection of the arrival variants (validation queries only, frozen before any test run)", "",
             "| record | made (UTC) | sha256 | method | pick | validation new | validation known | within tolerance |",
             "|---|---|---|---|---|---|---|---|"]
    for path, rec in ctx.picks.items():
        for base, entry in rec["methods"].items():
            pick = entry["pick"]
            over = ", ".join(f"{k} = {v}" for k, v in pick["overrides"].items()) or "fixed point"
            lines.append(f"| `{path}` | {rec.get('created_utc', '–')} | `{rec['sha256'][:16]}` | {base} | {over} | "
                         f"{cell(pick['mean'])} | {cell(pick['mean_known'])} | {'yes' if pick['qualified'] else 'no'} |")
    rec = next(iter(ctx.picks.values()))
    lines += ["", f"Criterion: {rec.get('criterion', '')} Tolerance {rec.get('tolerance')}; references "
                  f"{', '.join(r['method'] for r in rec.get('references', []))}.", ""]
    return lines


def arrival_study(results: Sequence[Mapping], ctx: StudyContext) -> StudyOutput:
    """nDCG@10 per stratum of the evaluated queries (known / new / mixed relevant documents) for
    every method, the arrival split's facts, paired tests per stratum; figure: bars per stratum."""
    summary = summarize(results, ctx)
    bbs = study_backbones(results, ctx)
    lines = opening_lines(ctx, results) + picks_table(ctx) + stratum_table(summary, ctx, bbs)
    facts = manifest_facts(ctx)
    lines += ([""] + facts if facts else []) + paired_markdown(paired_rows(summary, ctx, bbs))
    code_lines, code_rows = codes_markdown(ctx.codes, ctx, bbs)
    return StudyOutput("\n".join(lines + code_lines) + "\n", summary_rows(summary, ctx, bbs) + code_rows,
                       lambda p: arrival_figure(p, summary, ctx, bbs))
