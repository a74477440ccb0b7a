"""The arrival study's index quantizers (config ``experiments.<name>.codes``): PQ, OPQ + PQ, RaBitQ
and SQ4 codes of the frozen vectors and of each arrival-fitted map's output, every codebook fitted on
the documents known at training time (records ``arrival_codes``, rule arrival_codes), scored per
stratum of the test queries (known / new / mixed relevant documents) with a paired test against a
comparator of the same bytes where the study has one.

A row's comparator (:func:`comparator`): the frozen vectors' 8-bit PQ of the same bytes per vector
(for a map's code, and for the frozen vectors' other codes of those bytes: OPQ, fewer bits per
sub-quantizer); else the autoencoder's float32 output (the label-free compressor of the study).
"""

from __future__ import annotations

import math
import re
from typing import Mapping, Sequence

from .. import quantizers as Q
from .. import report
from ..splits import STRATA
from .frontier import BUDGETS, MARKERS, best_curve, bytes_axis, envelope, marker, marker_key  # BUDGETS: the table's bytes
from .shared import StudyContext, cell, column_label

METRIC = "ndcg@10"
COLUMNS = ("all", *STRATA)  # "all": every evaluated query; then each stratum
_PQ8 = re.compile(r"^pq[0-9]+$")  # 8 bits per sub-quantizer


def _is_ae(r: Mapping) -> bool:
    return r["method_type"] == "autoencoder" and r["encoding"] == "float32"


def comparator(r: Mapping, rows: Sequence[Mapping]) -> Mapping | None:
    """The row ``r`` is tested against (module docstring); None for the autoencoder's float32 row
    itself, or when the record has neither comparator."""
    if _is_ae(r):
        return None
    if not (r["method_type"] == "frozen" and _PQ8.match(r["encoding"])):
        same = next((o for o in rows if o["method_type"] == "frozen" and _PQ8.match(o["encoding"])
                     and o["bytes_per_vector"] == r["bytes_per_vector"]), None)
        if same is not None:
            return same
    return next((o for o in rows if _is_ae(o)), None)


def _label(r: Mapping) -> str:
    return f"{r['method']} {r['dim']}d {r['encoding']}"


def code_rows(rec: Mapping) -> list[dict]:
    """One row per row of an ``arrival_codes`` record: nDCG@10 on all test queries and on each
    stratum, the comparator's label and, per column, Δ (row − comparator) and the two-sided paired
    randomization test's p (10,000 sign flips) on per-query nDCG@10; NaN for an empty stratum."""
    pos = {q: i for i, q in enumerate(rec["query_ids"])}
    groups = {"all": list(rec["query_ids"]), **{s: list(rec["strata"].get(s, [])) for s in STRATA}}
    missing = sorted({q for qs in groups.values() for q in qs} - set(pos))
    if missing:
        raise ValueError(f"arrival codes of {rec['dataset']} ({rec['backbone']}): stratum queries {missing[:3]} "
                         "are not among the record's test queries")
    rows = rec["rows"]
    out = []
    for r in rows:
        vs = comparator(r, rows)
        pq = r["per_query"][METRIC]
        row = {"backbone": rec["backbone"], "dataset": rec["dataset"], "seed": rec["seed"], "method": r["method"],
               "method_type": r["method_type"], "supervised": bool(r.get("supervised")), "dim": r["dim"],
               "encoding": r["encoding"], "bytes_per_vector": r["bytes_per_vector"], "train_rows": r["train_rows"],
               "codebook_bytes": r["codebook_bytes"], "fit_seconds": r["fit_seconds"],
               "vs": _label(vs) if vs is not None else "", "vs_encoding": vs["encoding"] if vs is not None else ""}
        for c, qids in groups.items():
            a = [pq[pos[q]] for q in qids]
            row[f"{c}_n"] = len(qids)
            row[c] = sum(a) / len(a) if a else float("nan")
            if vs is None or not a:
                row[f"{c}_diff"], row[f"{c}_p"] = float("nan"), float("nan")
                continue
            b = [vs["per_query"][METRIC][pos[q]] for q in qids]
            row[f"{c}_diff"] = sum(x - y for x, y in zip(a, b)) / len(a)
            row[f"{c}_p"] = report.paired_randomization(a, b)
        out.append(row)
    return out


def fewer_bits_lines(rows: Sequence[Mapping]) -> list[str]:
    """Where fewer bits per sub-quantizer keep more: each of the frozen vectors' PQ codes of fewer
    than 8 bits a sub-quantizer against their 8-bit PQ of the same bytes (its comparator,
    :func:`comparator`; a code of bytes no 8-bit PQ has is left out), on the new and the known
    documents' queries, those with p < 0.05 named as above or below it; with how many rows the
    8-bit codebooks were fitted on against the rows FAISS asks for (an under-fitted codebook may be
    what fewer bits beat)."""
    pairs = [r for r in rows if r["method_type"] == "frozen" and Q.is_quantizer(r["encoding"])
             and Q.parse(r["encoding"]).kind == "pq" and Q.parse(r["encoding"]).bits < 8
             and _PQ8.match(r["vs_encoding"])]
    if not pairs:
        return []

    def said(st: str, sign: int) -> str:
        hits = [f"{r['encoding']} ({r['bytes_per_vector']} B, {r[f'{st}_diff']:+.4f}, p {r[f'{st}_p']:.4f})"
                for r in sorted(pairs, key=lambda r: r["bytes_per_vector"])
                if r[f"{st}_n"] and r[f"{st}_p"] < 0.05 and sign * r[f"{st}_diff"] > 0]
        return ", ".join(hits) or "none"

    fitted = next((r["train_rows"] for r in rows if _PQ8.match(r["encoding"]) and r["train_rows"]), None)
    need = Q.min_training_points("pq8")
    caveat = (f" The 8-bit codebooks were fitted on {fitted} rows, fewer than the {need} that FAISS asks for "
              "(39 per centroid): part of a gap may be theirs." if fitted and fitted < need else "")
    return ["", "Fewer bits per sub-quantizer against 8 bits at the same bytes (the frozen vectors' codes, one "
                f"seed, p < 0.05, no correction for the number of tests): above on new documents' queries: "
                f"{said('new', 1)}; below: {said('new', -1)}. On known documents' queries above: {said('known', 1)}; "
                f"below: {said('known', -1)}.{caveat}"]


def _cell(r: Mapping, c: str) -> str:
    if r[f"{c}_n"] == 0:
        return "– (n=0)"
    if math.isnan(r[f"{c}_diff"]):
        return cell(r[c])
    return f"{cell(r[c])} ({r[f'{c}_diff']:+.4f}, p {r[f'{c}_p']:.4f})"


def codes_markdown(recs: Sequence[Mapping], ctx: StudyContext, backbones: Sequence[str]) -> tuple[list[str], list[dict]]:
    """The Markdown section (rows at the bytes of :data:`BUDGETS`) and every record's rows (TSV)."""
    if not recs:
        return [], []
    lines = ["", "### Index quantizers fitted on the known documents", ""]
    all_rows: list[dict] = []
    for bb in backbones:
        for ds in ctx.datasets:
            rec = next((r for r in recs if (r["backbone"], r["dataset"]) == (bb, ds)), None)
            if rec is None:
                continue
            rows = code_rows(rec)
            all_rows += rows
            n = {c: rows[0][f"{c}_n"] for c in COLUMNS} if rows else {}
            lines += [f"#### {column_label(ds, bb, True)}: codes fitted on {rec['known_docs']} known documents, "
                      f"seed {rec['seed']}", "",
                      "| method | dim | code | bytes | fitted on | vs | " +
                      " | ".join(f"{c} (n={n.get(c, 0)})" for c in COLUMNS) + " |",
                      "|" + "---|" * (6 + len(COLUMNS))]
            for r in sorted((r for r in rows if r["bytes_per_vector"] in BUDGETS),
                            key=lambda r: r["bytes_per_vector"]):
                fitted = "–" if r["train_rows"] is None else str(r["train_rows"])
                lines.append(f"| {r['method']} | {r['dim']} | {r['encoding']} | {r['bytes_per_vector']} | {fitted} | "
                             f"{r['vs'] or '–'} | " + " | ".join(_cell(r, c) for c in COLUMNS) + " |")
            lines += fewer_bits_lines(rows)
            for s in rec.get("skipped") or []:
                lines.append(f"\n{s['method']} {s['dim']}d {s['encoding']}: not fitted ({s['centroids']} centroids per "
                             f"sub-quantizer, {s['known_docs']} known documents).")
            lines.append("")
    lines.append(
        "nDCG@10 of one seed's vectors on the test queries (`all`) and on each stratum, every code's codebooks, "
        "rotation or ranges fitted on the known documents only, the whole corpus searched with FAISS's asymmetric "
        "distances. `pq<M>`: M sub-quantizers of 8 bits; `pq<M>x<b>`: of b bits (2^b centroids); `opq<M>`: "
        "OPQ's rotation, then pq<M>. `fitted on`: the codebook's training rows (FAISS asks for 39 per centroid). "
        "In brackets: Δ against `vs` (the frozen vectors' 8-bit PQ of the same bytes, else the autoencoder's "
        f"float32 output) and the paired randomization test's p (10,000 sign flips). Rows at {', '.join(map(str, BUDGETS))} "
        "bytes; every code is in the TSV.")
    return lines, all_rows


CODE_PANELS = ("known", "new")  # the strata the figure plots against bytes (the TSV holds every column)


def codes_panels(axes: Sequence, rows: Sequence[Mapping], colors: Mapping[str, str], title: str) -> None:
    """Two panels (``axes``: one per :data:`CODE_PANELS` stratum) of one record's :func:`code_rows`:
    nDCG@10 against bytes per vector (log axis), one point per code, marker by encoding, colour by
    method, and each method's upper envelope (its best code of at most those bytes) as a step line."""
    for ax, st in zip(axes, CODE_PANELS):
        n = rows[0][f"{st}_n"] if rows else 0
        for method in dict.fromkeys(r["method"] for r in rows):
            mine = [r for r in rows if r["method"] == method and not math.isnan(r[st])]
            for r in mine:
                ax.scatter(r["bytes_per_vector"], r[st], marker=marker(r["encoding"]), s=36, color=colors[method],
                           zorder=3)
            pts = best_curve(mine, st)
            if pts:
                envelope(ax, pts, max(r["bytes_per_vector"] for r in rows), color=colors[method], linewidth=1.2,
                         alpha=0.8)
        bytes_axis(ax, "bytes per vector (log scale)", "nDCG@10", budget_color="0.85")
        ax.set_title(f"{title}: codes fitted on the known documents, {st} documents' queries (n={n})", fontsize=9)


def codes_legend(rows: Sequence[Mapping], colors: Mapping[str, str]) -> list:
    """Legend handles of :func:`codes_panels`: each method's colour, each encoding's marker."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=colors[m], marker="o", linestyle="-", label=f"{m} (best code per byte)")
               for m in dict.fromkeys(r["method"] for r in rows)]
    used = {marker_key(r["encoding"]) for r in rows}
    handles += [Line2D([], [], color="black", marker=mk, linestyle="", label=e) for e, mk in MARKERS.items()
                if e in used]
    return handles
