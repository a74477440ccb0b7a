"""The quality-per-byte frontier: every method, dimension and encoding."""

from __future__ import annotations

from typing import Mapping, Sequence

from .. import report
from ..selection import (BUDGETS, FAMILIES, TIE_SE, candidates, code_key, code_label, dim_label, family,
                         index_alone, level_with, pick_code)
from ..quantizers import is_quantizer, parse
from .shared import StudyContext, StudyOutput, method_colors, pyplot, save, suptitle

SUBSETS = ("all", "seen", "unseen")


def _subset(scores: Sequence[float], seen: Sequence[int] | None, subset: str) -> list[float]:
    if subset == "all":
        return list(scores)
    if seen is None:
        raise ValueError("the frontier record holds no `seen` flags: rerun rule frontier")
    want = 1 if subset == "seen" else 0
    return [v for v, s in zip(scores, seen) if s == want]


def seed_scores(row: Mapping, repeats: Sequence[Sequence[Mapping]], metric: str) -> dict[int, list[float]]:
    """The per-query ``metric`` of code ``row`` at its own seed and at each repeat (the rows of one
    ``frontier_seed`` record each) that holds the same code (:func:`code_key`), by seed. A code that no
    repeat holds (frozen's quantizer codes: no map to retrain; a method that ``method_seeds`` does not
    repeat) keeps its one seed. A repeat that holds the code's method at its dimension but not the
    code itself is refused: every encoding of a repeated map is scored at each of its seeds."""
    out = {row["seed"]: list(row["per_query"][metric])}
    for rep in repeats:
        same = [x for x in rep if code_key(x) == code_key(row)]
        if same and same[0]["seed"] not in out:
            out[same[0]["seed"]] = list(same[0]["per_query"][metric])
        elif not same and any((x["method"], x["dim"]) == (row["method"], row["dim"]) for x in rep):
            raise ValueError(f"the frontier_seed record of {row['method']} {row['dim']}d at seed {rep[0]['seed']} "
                             f"lacks its code {row['encoding']}: rerun rule frontier_seed")
    return out


def _over_seeds(scores: Mapping[int, Sequence[float]]) -> list[float]:
    return [sum(v) / len(v) for v in zip(*scores.values())]


def tested_row(row: Mapping, tested: Sequence[Mapping], where: str = "the frontier record") -> Mapping:
    """The row of ``tested`` (scored on test queries) holding the code of ``row`` (:func:`code_key`)."""
    same = [x for x in tested if code_key(x) == code_key(row)]
    if not same:
        raise ValueError(f"{where} holds no test row of {code_label(row)}, picked on validation: rerun rule frontier")
    return same[0]


def verdict(rows: Sequence[Mapping], seen: Sequence[int] | None, budgets: Sequence[int] = BUDGETS,
            metric: str = "ndcg@10", repeats: Sequence[Sequence[Mapping]] = (),
            validation: Sequence[Mapping] | None = None) -> list[dict]:
    """At each budget: the label-free and the supervised code (:func:`family`) that :func:`pick_code`
    picks from the ``validation`` rows (the frontier's codes scored on validation queries with the
    select stage's maps), each then scored on the test queries by its row of ``rows`` (final-stage
    maps), on every subset of :data:`SUBSETS` (``seen``: per query of the record's ``query_ids``, 1 if
    a relevant document is a training positive): their means, the difference supervised - label-free
    and the two-sided paired randomization test's p. ``repeats``: the rows of the same frontier at
    other seeds (``frontier_seed`` records); a picked code they hold is scored per query as its mean
    over its seeds (:func:`seed_scores`), and ``diff_by_seed`` holds the difference at each seed of
    either code (each side at that seed, or its mean over its seeds where it has no such seed).
    ``best_on_test``: per family, the candidate of highest test ``metric`` at the rows' seed, a
    diagnostic (it picks nothing). A budget without a code of each family has no entry."""
    if validation is None:
        raise ValueError("the frontier's verdict picks its codes on validation queries: no frontier_validation "
                         "record (rerun rule frontier_validation)")
    out = []
    for b in budgets:
        best = {fam: pick_code(validation, b, fam, metric) for fam in FAMILIES}
        if any(v is None for v in best.values()):
            continue
        lf, sup = (tested_row(best[fam], rows) for fam in FAMILIES)
        on_test = {fam: max(candidates(rows, b, fam), key=lambda x: (x[metric], -x["bytes_per_vector"]))
                   for fam in FAMILIES}
        lf_seeds, sup_seeds = seed_scores(lf, repeats, metric), seed_scores(sup, repeats, metric)
        lf_mean, sup_mean = _over_seeds(lf_seeds), _over_seeds(sup_seeds)
        for sub in SUBSETS:
            a = _subset(sup_mean, seen, sub)
            c = _subset(lf_mean, seen, sub)
            if len(a) != len(c):
                raise ValueError(f"frontier rows {code_label(sup)} and {code_label(lf)} hold {len(a)} and {len(c)} "
                                 "per-query scores: not the same queries")
            if not a:
                continue
            by_seed = {}  # at each seed of either code: each side at that seed, or its mean over its seeds
            for s in sorted(set(sup_seeds) | set(lf_seeds)):
                a_s = _subset(sup_seeds.get(s, sup_mean), seen, sub)
                c_s = _subset(lf_seeds.get(s, lf_mean), seen, sub)
                by_seed[s] = sum(a_s) / len(a_s) - sum(c_s) / len(c_s)
            out.append({"budget": b, "subset": sub, "n_queries": len(a), "label_free": lf, "supervised": sup,
                        "validation": {"label-free": best["label-free"][metric], "supervised": best["supervised"][metric]},
                        "best_on_test": on_test,
                        "label_free_seeds": sorted(lf_seeds), "supervised_seeds": sorted(sup_seeds),
                        "label_free_mean": sum(c) / len(c), "supervised_mean": sum(a) / len(a),
                        "mean_diff": sum(a) / len(a) - sum(c) / len(c), "diff_by_seed": by_seed,
                        "p_value": report.paired_randomization(a, c)})
    return out


def verdict_markdown(entries: Sequence[Mapping], title: str) -> list[str]:
    if not entries:
        return []
    pick_seed = entries[0]["supervised"]["seed"]
    repeated = any(len(e["supervised_seeds"]) > 1 or len(e["label_free_seeds"]) > 1 for e in entries)
    seeds_text = (f"Each code is scored at seed {pick_seed} and, where the frontier runs its method again "
                  "(`method_seeds`, a budget study's `seeds`), at each of those seeds (`seeds`), its per-query "
                  "nDCG@10 averaged over them before the test; Δ by seed lists the difference at each seed "
                  "of either code (a code with one seed counts at its mean: frozen's codes have no map to "
                  "retrain, and the quantizers' k-means seed is fixed). " if repeated else
                  f"One seed ({pick_seed}) of each trained map (the frontier repeats none of the picked codes). ")
    lines = ["", f"#### {title}: the label-free and the supervised code picked at each budget", "",
             "At each budget (bytes per vector), among the codes of at most that many bytes that need nothing "
             "outside the index (no re-scoring): the label-free code (no relevance judgment: frozen, truncate, "
             "PCA, the autoencoder, csr-free, under any encoding, the index quantizers included) and the "
             "supervised code **picked on the validation queries** (every code scored with the select stage's "
             "maps, trained on the training queries alone; rule: the map of the best code on validation, then "
             f"of that map's codes level with it, within {TIE_SE:g} standard error of the paired per-query "
             "difference, the one of most bytes), each then scored on the test queries with the final stage's "
             "maps: each subset's means, Δ = supervised - label-free and the two-sided paired randomization "
             "test (10,000 sign flips) over per-query nDCG@10. No test score chooses a code. " + seeds_text +
             "`seen`: test queries with a relevant document among the training positives; `unseen`: none. "
             "*Best on test* names, as a diagnostic that chooses nothing, the family's code of highest test "
             "nDCG@10 at the pick's seed (what this verdict picked before it read validation queries) where it "
             "is not the pick, with the pick's shortfall to it.",
             "", "| budget B | queries | n | label-free code | B | seeds | val | nDCG@10 | supervised code | B | "
                 "seeds | val | nDCG@10 | Δ | Δ by seed | p | best on test (label-free; supervised) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for e in entries:
        lf, sup = e["label_free"], e["supervised"]
        by_seed = " / ".join(f"{s} {e['diff_by_seed'][s]:+.4f}" for s in sorted(e["diff_by_seed"]))
        diag = "the picks" if e["subset"] != "all" else "; ".join(
            "the pick" if code_key(e["best_on_test"][fam]) == code_key(x) else
            f"{code_label(e['best_on_test'][fam])} (-{e['best_on_test'][fam]['ndcg@10'] - x['ndcg@10']:.4f})"
            for fam, x in (("label-free", lf), ("supervised", sup)))
        lines.append(f"| {e['budget']} | {e['subset']} | {e['n_queries']} | {code_label(lf)} | "
                     f"{lf['bytes_per_vector']} | {len(e['label_free_seeds'])} | {e['validation']['label-free']:.4f} | "
                     f"{e['label_free_mean']:.4f} | {code_label(sup)} | {sup['bytes_per_vector']} | "
                     f"{len(e['supervised_seeds'])} | {e['validation']['supervised']:.4f} | {e['supervised_mean']:.4f} | "
                     f"{e['mean_diff']:+.4f} | {by_seed} | {e['p_value']:.4f} | {diag if e['subset'] == 'all' else ''} |")
    return lines


def left_out(settings: Mapping | None) -> str:
    """What the quantizer grid of config ``quantizers:`` leaves out, and why (the job's cost)."""
    if not settings:
        return ""
    dims = settings.get("dims", ["primary", "secondary"])
    parts = [f"PQ at M in {settings['pq_m']}, OPQ at M in {settings['opq_m']} (each M that divides the dimension "
             "and is at most half of it)"]
    if settings["pq_m"] != "divisors":
        parts.append("the other divisors of the dimension are left out")
    if "secondary" not in dims:
        parts.append("the secondary dimension's vectors are not quantized (frozen's and the primary dimension's are)")
    return ("Grid: " + "; ".join(parts) + ", to keep the frontier job within about 15 minutes on 2 cores "
            "(benchmarks/frontier_quantizers.py measures it).")


def quantizer_markdown(rows: Sequence[Mapping], title: str, settings: Mapping | None = None) -> list[str]:
    """One line per (method, dim): nDCG@10 under each index quantizer (bytes in the header for PQ and
    OPQ, whose bytes are M; in the cell for RaBitQ and SQ4, whose bytes follow the dimension)."""
    qrows = [x for x in rows if is_quantizer(x["encoding"])]
    if not qrows:
        return []
    names = sorted({x["encoding"] for x in qrows}, key=lambda n: (parse(n).kind != "pq", parse(n).kind,
                                                                   parse(n).m or 0, parse(n).bits))
    fits = sum(x["fit_seconds"] or 0 for x in qrows)
    one = qrows[0]
    niter = next((x["opq_niter"] for x in qrows if x.get("opq_niter")), "no OPQ row, no")
    lines = ["", f"#### {title}: the index quantizers", "",
             "FAISS's own codes of each method's vectors (learned map, then quantization): `pq<M>` product "
             "quantization, M sub-quantizers of 256 centroids (M bytes); `opq<M>` the same after OPQ's rotation "
             f"({niter} iterations); `rabitq` 1 bit a dimension plus FAISS's per-vector "
             "factors, `rabitq<b>` b bits; `sq4` 4 bits a dimension. Codebooks, rotations and ranges fitted on "
             f"the corpus documents only (k-means seed {one.get('quantizer_seed')}); search by inner product, "
             "the query in float32 against the codes (asymmetric). nDCG@10; a cell's (B) is its bytes per "
             f"vector. Fits took {fits:.0f} s in all; each row's fit seconds, training rows and codebook bytes "
             "are in the TSV. " + left_out(settings), "",
             "| method | dim | " + " | ".join(n + (f" ({parse(n).m * parse(n).bits // 8} B)"
                                                 if parse(n).kind in ("pq", "opq") else "") for n in names) + " |",
             "|---|---|" + "---|" * len(names)]
    by = {}
    for x in qrows:
        by.setdefault((x["method"], x["dim"]), {})[x["encoding"]] = x
    for (method, dim), cells in by.items():
        vals = []
        for n in names:
            x = cells.get(n)
            if x is None:
                vals.append("")
            else:
                vals.append(f"{x['ndcg@10']:.4f}" + ("" if parse(n).kind in ("pq", "opq")
                                                      else f" ({x['bytes_per_vector']} B)"))
        lines.append(f"| {method} | {dim} | " + " | ".join(vals) + " |")
    return lines


MARKERS = {"float32": "o", "float16": "s", "sq8": "^", "binary": "x", "binary_rescore": "P", "sparse": "D",
           "pq": "v", "opq": "<", "rabitq": ">", "sq4": "h"}
# the best code of each family at each byte count (the figure's third panel); the label-free
# quantizer codes in their own colour
FAMILY_LINES = {"label-free, index quantizer": ("#000080", "o"), "label-free, other encodings": ("0.45", "s"),
                "supervised, index quantizer": ("tab:purple", "^"), "supervised, other encodings": ("tab:red", "D")}


def marker_key(encoding: str) -> str:
    return parse(encoding).kind if is_quantizer(encoding) else encoding


def marker(encoding: str) -> str:
    return MARKERS[marker_key(encoding)]


def family_line(row: Mapping) -> str:
    """The figure's line of a row: its :func:`family` and whether its encoding is an index quantizer."""
    return f"{family(row)}, {'index quantizer' if is_quantizer(row['encoding']) else 'other encodings'}"


def best_curve(rows: Sequence[Mapping], metric: str = "ndcg@10") -> list[tuple[int, float]]:
    """``(bytes, best metric of the rows of at most those bytes)`` at each byte count of ``rows``
    where the best improves: the upper envelope of quality against bytes."""
    out, best = [], float("-inf")
    for b in sorted({x["bytes_per_vector"] for x in rows}):
        v = max(x[metric] for x in rows if x["bytes_per_vector"] == b)
        if v > best:
            best = v
            out.append((b, v))
    return out


def envelope(ax, pts: Sequence[tuple[int, float]], right: int, **style) -> None:
    """A :func:`best_curve` as a step line run on to ``right`` bytes (the best stays available with more)."""
    ax.step([b for b, _ in pts] + [right], [v for _, v in pts] + [pts[-1][1]], where="post", **style)


def bytes_axis(ax, xlabel: str, ylabel: str, budget_color: str = "0.8") -> None:
    """A log-2 bytes-per-vector axis with the verdict's budgets as light vertical lines."""
    for b in BUDGETS:
        ax.axvline(b, color=budget_color, linewidth=0.8, zorder=0)
    ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)


def family_panel(ax, rows: Sequence[Mapping], title: str) -> None:
    """nDCG@10 against bytes (log axis), one line per :data:`FAMILY_LINES` entry: the best code of
    that family (needing nothing outside the index) at each byte count."""
    alone = [x for x in rows if index_alone(x) and x.get("supervised") is not None]
    right = max((x["bytes_per_vector"] for x in alone), default=1)
    for name, (color, mk) in FAMILY_LINES.items():
        pts = best_curve([x for x in alone if family_line(x) == name])
        if pts:  # each line runs on to the panel's largest code
            envelope(ax, pts, right, color=color, linewidth=1.8, label=name)
            ax.plot([b for b, _ in pts], [v for _, v in pts], linestyle="", marker=mk, markersize=5, color=color)
    bytes_axis(ax, "bytes per vector (log scale; grey lines: the verdict's budgets)", "held-out nDCG@10")
    ax.set_title(title, fontsize=10)
    if alone:
        ax.legend(fontsize=8, loc="lower right")


def sparse_against_dense(rows: Sequence[Mapping], metric: str = "ndcg@10") -> list[dict]:
    """Each k-sparse code's row against the best dense row (by ``metric``) of no more bytes per
    vector among those that need nothing outside the index (:func:`index_alone`): the mean
    difference over the rows' ``per_query`` scores (one seed) and the two-sided paired
    randomization test's p. A code with no such dense row is left out."""
    dense = [x for x in rows if not x.get("active") and index_alone(x)]
    out = []
    for x in sorted((x for x in rows if x.get("active")), key=lambda x: (x["bytes_per_vector"], x["method"])):
        fits = [d for d in dense if d["bytes_per_vector"] <= x["bytes_per_vector"]]
        if not fits:
            continue
        best = max(fits, key=lambda d: d[metric])
        a, b = x["per_query"][metric], best["per_query"][metric]
        if len(a) != len(b):
            raise ValueError(f"frontier rows {x['method']} and {best['method']} ({best['encoding']}) hold "
                             f"{len(a)} and {len(b)} per-query scores: not the same queries")
        out.append({"code": x, "dense": best, "n_queries": len(a), "mean_diff": sum(a) / len(a) - sum(b) / len(b),
                    "p_value": report.paired_randomization(a, b)})
    return out


def validation_rows(ctx: StudyContext, record: Mapping, rule: str = "frontier_validation") -> list[Mapping]:
    """The rows of the validation record (of ``rule``) of ``record``'s dataset and backbone: the same codes
    on validation queries (select-stage maps); refused where there is none or it is not of validation
    queries, or where it scores another set of codes."""
    where = f"{record['dataset']} ({record['backbone']})"
    found = [v for v in ctx.validation if (v["dataset"], v["backbone"]) == (record["dataset"], record["backbone"])]
    if not found:
        raise ValueError(f"{where}: no {rule} record, so no code can be picked without the test "
                         f"queries: rerun rule {rule}")
    v = found[0]
    if v.get("role") != "validation" or v.get("stage") != "select":
        raise ValueError(f"{where}: the {rule} record scores {v.get('role')!r} queries "
                         f"(stage {v.get('stage')!r}), not the validation queries of the select stage")
    if {code_key(x) for x in v["rows"]} != {code_key(x) for x in record["rows"]}:
        raise ValueError(f"{where}: the {rule} record holds other codes than the test record's; rerun rule {rule}")
    return v["rows"]


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
                  "**front**: on the Pareto front of nDCG@10 against bytes per vector.", ""]
        if any(x.get("active") for x in r["rows"]):
            lines += ["A k-sparse code (`sparse`: CSR's top-k latents) is stored as its non-zeros alone, an (index "
                      "uint16, value float16) pair each: 4 bytes per active latent, indices included. Its `dim` "
                      "reads `active of latents`; it is searched exactly over the stored fp16 values "
                      "(dive_core/sparse.py).", ""]
        lines += [
                  "| bytes/vector | method | dim | encoding | nDCG@10 | R@10 | front |", "|---|---|---|---|---|---|---|"]
        for x in sorted(r["rows"], key=lambda x: (x["bytes_per_vector"], -x["ndcg@10"])):
            rows.append({"dataset": r["dataset"], "backbone": r["backbone"],
                         **{f: v for f, v in x.items() if f != "per_query"}})
            if is_quantizer(x["encoding"]):
                continue  # their own table below
            dim = dim_label(x)
            lines.append(f"| {x['bytes_per_vector']} | {x['method']} | {dim} | {x['encoding']} | "
                         f"{x['ndcg@10']:.4f} | {x['recall@10']:.4f} | {'**front**' if x['pareto'] else ''} |")
        where = f"{r['dataset']} ({r['backbone']})"
        lines += quantizer_markdown(r["rows"], where, r.get("quantizers"))
        if any(x.get("supervised") is not None for x in r["rows"]):
            reps = []
            for x in ctx.repeats:
                if (x["dataset"], x["backbone"]) != (r["dataset"], r["backbone"]):
                    continue
                if x["query_ids"] != r["query_ids"]:
                    raise ValueError(f"{where}: a frontier_seed record scores other test queries than the frontier's; "
                                     "rerun rule frontier_seed")
                if any(y["seed"] == r["rows"][0]["seed"] for y in x["rows"]):
                    raise ValueError(f"{where}: a frontier_seed record at seed {r['rows'][0]['seed']}, the frontier's own")
                reps.append(x["rows"])
                rows += [{"dataset": r["dataset"], "backbone": r["backbone"], "repeat": True,
                          **{f: v for f, v in y.items() if f not in ("per_query", "pareto")}}
                         for y in x["rows"]]  # `repeat`: the row of a frontier_seed record (publish_tables)
            lines += verdict_markdown(verdict(r["rows"], r.get("seen"), repeats=reps,
                                              validation=validation_rows(ctx, r)), where)
        small = [x for x in r["rows"] if x["bytes_per_vector"] <= 64]
        best = max(small, key=lambda x: x["ndcg@10"], default=None)
        alone = max((x for x in small if index_alone(x)), key=lambda x: x["ndcg@10"], default=None)
        for label, x in (("", best), (" with nothing outside the index (no re-scoring)", alone)):
            if x:
                lines += ["", f"Best at 64 bytes or fewer per vector{label}: **{x['method']} {dim_label(x, 'd')} in "
                              f"{x['encoding']}** ({x['bytes_per_vector']} B, nDCG@10 {x['ndcg@10']:.4f}, "
                              f"R@10 {x['recall@10']:.4f})."]
        pairs = sparse_against_dense(r["rows"])
        if pairs:
            lines += ["", f"#### {r['dataset']} ({r['backbone']}): each sparse code against the best dense row of no "
                          "more bytes", "",
                      "The dense row of highest nDCG@10 among those whose bytes per vector are at most the code's "
                      "and that need nothing outside the index (no re-scoring); nDCG@10 per query, one seed, "
                      "two-sided paired randomization test, 10,000 sign flips. Δ < 0 with p < 0.05: the code "
                      "is significantly below that dense row.", "",
                      "| code | dim | bytes/vector | nDCG@10 | dense row | bytes/vector | nDCG@10 | Δ | p | queries |",
                      "|---|---|---|---|---|---|---|---|---|---|"]
            for pr in pairs:
                c, d = pr["code"], pr["dense"]
                lines.append(f"| {c['method']} | {dim_label(c)} | {c['bytes_per_vector']} | {c['ndcg@10']:.4f} | "
                             f"{d['method']} {dim_label(d, 'd')} {d['encoding']} | {d['bytes_per_vector']} | "
                             f"{d['ndcg@10']:.4f} | {pr['mean_diff']:+.4f} | {pr['p_value']:.4f} | "
                             f"{pr['n_queries']} |")
        lines.append("")

    def figure(path):
        plt = pyplot()
        fig, axes = plt.subplots(max(1, len(results)), 3, figsize=(21, 5 * max(1, len(results))), dpi=120,
                                 squeeze=False)  # one row per dataset (and backbone)
        methods = list(dict.fromkeys(x["method"] for r in results for x in r["rows"]))
        # the frontier's runs are configured methods: one colour per method name (csr-k8 is not a type)
        colors = {**method_colors({m: m for m in methods if m != "frozen"}), "frozen": "0.35"}
        for row, r in zip(axes, results):
            bb = f" ({r['backbone']})" if len({x['backbone'] for x in results}) > 1 else ""
            for ax, metric, label in zip(row, ("ndcg@10", "recall@10"), ("nDCG@10", "Recall@10")):
                for x in r["rows"]:
                    ax.scatter(x["bytes_per_vector"], x[metric], marker=marker(x["encoding"]), s=45,
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
                ax.set_title(f"{r['dataset']}{bb}: {label} per byte", fontsize=10)
            family_panel(row[2], r["rows"], f"{r['dataset']}{bb}: best code of each family")
        handles = [plt.Line2D([], [], linestyle="", marker="o", color=colors[m],
                              label=m + (" (uncompressed)" if m == "frozen" else ""))
                   for m in methods]
        used = {marker_key(x["encoding"]) for r in results for x in r["rows"]}
        handles += [plt.Line2D([], [], linestyle="", marker=mk, color="black", label=e)
                    for e, mk in MARKERS.items() if e in used]
        handles.append(plt.Line2D([], [], color="black", linestyle="dashed", label="Pareto front (nDCG@10)"))
        fig.legend(handles=handles, fontsize=8, loc="center left", bbox_to_anchor=(0.995, 0.5), frameon=False)
        suptitle(fig, ctx.title)
        save(fig, path)

    return StudyOutput("\n".join(lines) + "\n", rows, figure)
