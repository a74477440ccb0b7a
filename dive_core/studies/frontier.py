"""The quality-per-byte frontier: every method, dimension and encoding."""

from __future__ import annotations

from typing import Mapping, Sequence

from .. import report
from .shared import StudyContext, StudyOutput, method_colors, pyplot, save, suptitle


def dim_label(row: Mapping, unit: str = "") -> str:
    """A frontier row's dimension: ``64`` (``unit``: ``64d``), or for a k-sparse code ``16 of 1536``
    (active of latents; ``16 of 1536 latents`` with a unit)."""
    if row.get("active"):
        return f"{row['active']} of {row['dim']}" + (" latents" if unit else "")
    return f"{row['dim']}{unit}"


def index_alone(row: Mapping) -> bool:
    """Whether a frontier row's search needs nothing outside its index: every encoding but
    ``binary_rescore``, which also reads float32 vectors kept outside it (on disk)."""
    return row["encoding"] != "binary_rescore"


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
            dim = dim_label(x)
            lines.append(f"| {x['bytes_per_vector']} | {x['method']} | {dim} | {x['encoding']} | "
                         f"{x['ndcg@10']:.4f} | {x['recall@10']:.4f} | {'**front**' if x['pareto'] else ''} |")
            rows.append({"dataset": r["dataset"], "backbone": r["backbone"],
                         **{f: v for f, v in x.items() if f != "per_query"}})
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
        fig, axes = plt.subplots(max(1, len(results)), 2, figsize=(14, 5 * max(1, len(results))), dpi=120,
                                 squeeze=False)  # one row per dataset (and backbone)
        markers = {"float32": "o", "float16": "s", "sq8": "^", "binary": "x", "binary_rescore": "P", "sparse": "D"}
        methods = list(dict.fromkeys(x["method"] for r in results for x in r["rows"]))
        # the frontier's runs are configured methods: one colour per method name (csr-k8 is not a type)
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
        used = {x["encoding"] for r in results for x in r["rows"]}
        handles += [plt.Line2D([], [], linestyle="", marker=mk, color="black", label=e)
                    for e, mk in markers.items() if e in used]
        handles.append(plt.Line2D([], [], color="black", linestyle="dashed", label="Pareto front (nDCG@10)"))
        fig.legend(handles=handles, fontsize=8, loc="center left", bbox_to_anchor=(0.995, 0.5), frameon=False)
        suptitle(fig, ctx.title)
        save(fig, path)

    return StudyOutput("\n".join(lines) + "\n", rows, figure)
