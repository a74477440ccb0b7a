"""Efficiency: memory, latency and throughput of a flat index against the bandwidth bound."""

from __future__ import annotations

from typing import Mapping, Sequence

from .shared import StudyContext, StudyOutput, REFERENCE_STYLE, pyplot, save, suptitle


SPARSE_NOTE = (
    "A `sparse` index holds k-sparse codes (CSR's top-k latents) as (uint16 index, fp16 value) pairs, indices "
    "included in its bytes, and is searched exactly by a sparse matrix product on one thread "
    "(dive_core/sparse.py: scipy, the scores of the latents a query shares with each document, then the top k), "
    "not by FAISS. scipy holds the codes as float32 values and int32 indices, about twice the stored bytes: the "
    "DRAM bound and the same-size read use those searched bytes. Past one machine's memory such codes would go into an "
    "inverted index (a posting list per latent, split by latent or by document across machines) that reads "
    "only the posting lists of a query's active latents; none is built here.")


def index_label(x: Mapping) -> str:
    """An index's row label: ``dive 64d``, ``dive 64d pq16`` (an index quantizer's), or for k-sparse
    codes ``csr 64 of 1536 sparse``."""
    if x.get("active"):
        return f"{x['method']} {x['active']} of {x['dim']} sparse"
    enc = x.get("encoding", "float32")
    return f"{x['method']} {x['dim']}d" + ("" if enc == "float32" else f" {enc}")


QUANTIZER_NOTE = (
    "An index quantizer's row (`pq16`, `opq16`, `rabitq`: dive_core/quantizers.py) is FAISS's index of "
    "those codes over the same vectors, fitted on them (not timed) and searched exhaustively by asymmetric "
    "distance (the query in float32 against every code): its bytes per vector are the codes, `FAISS MB` the "
    "index serialized by FAISS (codes and codebooks), and its DRAM bound the codes read once. "
    "`q/s 1 thread`: the same batched search on one thread.")


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
                  "| index | bytes/vector | index MB | FAISS MB | memory ratio | latency median ms | p99 ms | speed-up | "
                  "DRAM bound ms | latency / bound | same-size read ms | latency / read | throughput q/s | "
                  "q/s 1 thread | throughput ratio |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for x in r["indexes"]:
            lines.append(f"| {index_label(x)} | {x['bytes_per_vector']} | {x['index_bytes'] / 1e6:.2f} | "
                         f"{x['memory_bytes'] / 1e6:.2f} | "
                         f"{x['memory_ratio_to_full']:.1f}x | {x['latency_ms_median']:.3f} | {x['latency_ms_p99']:.3f} | "
                         f"{x['latency_speedup_vs_full']:.2f}x | {x['lower_bound_ms']:.3f} | "
                         f"{x['latency_ratio_to_bound']:.2f} | {x['read_ms_same_size']:.3f} | "
                         f"{x['latency_ratio_to_read']:.2f} | {x['throughput_qps']:.0f} | "
                         f"{x['throughput_qps_one_thread']:.0f} | {x['throughput_ratio_to_full']:.2f}x |")
            rows.append({"dataset": r["dataset"], "backbone": r["backbone"], **x})
        lines.append("")
        if any(x.get("active") for x in r["indexes"]):
            lines += [SPARSE_NOTE, ""]
        if any(x["encoding"] not in ("float32", "sparse") for x in r["indexes"]):
            lines += [QUANTIZER_NOTE, ""]
    for r in syn:
        lines += ["### Synthetic scaling (random unit vectors)", "",
                  f"Streaming-read bandwidth {r['bandwidth_gb_s']:.2f} GB/s; {r['indexes'][0]['batch_queries']} "
                  "queries per batch.", "",
                  "| documents | dim | index | bytes/vector | index MB | FAISS MB | latency median ms | p99 ms | "
                  "DRAM bound ms | latency / bound | same-size read ms | throughput q/s | q/s 1 thread |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for x in r["indexes"]:
            lines.append(f"| {x['n_docs']:,} | {x['dim']} | {x['encoding']} | {x['bytes_per_vector']} | "
                         f"{x['index_bytes'] / 1e6:.1f} | {x['memory_bytes'] / 1e6:.1f} | {x['latency_ms_median']:.3f} | "
                         f"{x['latency_ms_p99']:.3f} | {x['lower_bound_ms']:.3f} | {x['latency_ratio_to_bound']:.2f} | "
                         f"{x['read_ms_same_size']:.3f} | {x['throughput_qps']:.0f} | "
                         f"{x['throughput_qps_one_thread']:.0f} |")
            rows.append({"dataset": "synthetic", **x})
        lines.append("")
    lines.append("DRAM bound: a single-query flat search reads the whole index once, so from main memory it "
                 "cannot take less than index bytes / bandwidth. An index that fits in the CPU caches is read "
                 "faster (latency / bound below 1); the same-size read is the time to read an array of the "
                 "index's size again and again, as the repeated searches do.")

    def figure(path):
        """One row per dataset: latency and throughput of each index as horizontal bars on log axes
        (an index quantizer's scan and a flat one differ by 100x), labelled by index; the synthetic
        scaling in a row of its own."""
        plt = pyplot()
        n_bars = max((len(r["indexes"]) for r in real), default=0)
        heights = [max(2.6, 0.32 * n_bars + 1.0)] * len(real) + ([4.4] if syn else [])
        fig, axes = plt.subplots(len(heights) or 1, 2, figsize=(15, sum(heights) or 4.4), dpi=120, squeeze=False,
                                 gridspec_kw={"height_ratios": heights or [1]})
        ref = {("facecolor" if k == "color" else k): v for k, v in REFERENCE_STYLE.items()}
        for row, r in zip(axes, real):
            labels = [index_label(x) for x in r["indexes"]]
            ys = list(range(len(labels)))[::-1]  # the first index (frozen, uncompressed) on top
            for ax, key, color, title, unit in (
                    (row[0], "latency_ms_median", "tab:blue", "single-query latency", "ms"),
                    (row[1], "throughput_qps", "tab:green", "batched throughput", "queries/s")):
                for y, x in zip(ys, r["indexes"]):  # frozen (uncompressed) as in every study figure
                    ax.barh(y, x[key], height=0.7, **(REFERENCE_STYLE if x["method"] == "frozen"
                                                      else dict(color=color, edgecolor="0.3", linewidth=0.8)))
                    ax.annotate(f"{x[key]:.3g}" if unit == "ms" else f"{x[key]:,.0f}", (x[key], y), xytext=(3, 0),
                                textcoords="offset points", va="center", fontsize=7)
                ax.set_yticks(ys, labels, fontsize=8)
                ax.set_xscale("log")
                ax.set_xlabel(f"{title} ({unit}, log scale; median of {r['indexes'][0]['repeats']} repetitions)")
                ax.set_title(f"{r['dataset']} ({r['backbone']}, {r['indexes'][0]['n_docs']:,} documents): {title}",
                             fontsize=10)
                ax.margins(x=0.15)
            row[0].scatter([x["lower_bound_ms"] for x in r["indexes"]], ys, color="black", marker="|", s=250,
                           zorder=3, label="DRAM bandwidth bound (index bytes / bandwidth)")
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch

        bars = [Patch(**ref, label="frozen (uncompressed)"),
                Patch(facecolor="tab:blue", edgecolor="0.3", label="compressed or quantized: latency"),
                Patch(facecolor="tab:green", edgecolor="0.3", label="compressed or quantized: throughput"),
                Line2D([], [], color="black", marker="|", linestyle="", markersize=12,
                       label="DRAM bandwidth bound (index bytes / bandwidth)")]
        if real and syn:  # the synthetic row's right-hand place holds both legends
            host = axes[-1][1]
            host.axis("off")
            host.add_artist(host.legend(handles=bars, loc="upper left", fontsize=8, title="bars (rows above)",
                                        title_fontsize=8))
        elif real:
            fig.legend(handles=bars, loc="lower center", ncol=4, fontsize=8, bbox_to_anchor=(0.5, -0.02))
        for r in syn:
            ax = axes[-1][0]
            for d in sorted({x["dim"] for x in r["indexes"]}, reverse=True):
                for enc in dict.fromkeys(x["encoding"] for x in r["indexes"] if x["dim"] == d):
                    pts = sorted((x["n_docs"], x["latency_ms_median"]) for x in r["indexes"]
                                 if x["dim"] == d and x["encoding"] == enc)
                    ax.plot([n for n, _ in pts], [v for _, v in pts], marker="o" if enc == "float32" else "v",
                            linestyle="-" if enc == "float32" else "--",
                            label=f"d = {d}" + ("" if enc == "float32" else f" {enc}"))
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("documents")
            ax.set_ylabel("single-query latency (ms)")
            ax.set_title("synthetic: latency vs corpus size", fontsize=10)
            lines_, labels_ = ax.get_legend_handles_labels()
            host = axes[-1][1]
            host.axis("off")
            host.legend(lines_, labels_, fontsize=8, ncol=2, loc="lower left", title="synthetic (left)",
                        title_fontsize=8)
        for ax in axes.flat:
            ax.grid(alpha=0.3)
        suptitle(fig, ctx.title)
        # tight_layout leaves the first row's titles touching the suptitle: a quarter inch between them
        fig.subplots_adjust(top=fig.subplotpars.top - 0.25 / fig.get_size_inches()[1])
        save(fig, path)

    return StudyOutput("\n".join(lines) + "\n", rows, figure)
