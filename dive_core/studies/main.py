"""The main table: per dataset and over datasets, seen / unseen subsets, paired significance."""

from __future__ import annotations

from typing import Mapping, Sequence

from .. import report
from .shared import (
    StudyContext, StudyOutput, grouped_bars, opening_lines, metric_table, study_backbones, subset_table,
    summarize_runs,
)


DOC_DISJOINT_NOTE = (
    "Document-disjoint runs (`-docdisjoint`): their triplets contain no document relevant to any evaluated "
    "query, so for these runs every evaluated query is unseen in training. `seen` / `unseen` above still "
    "split the queries as the standard split does (a relevant document among the standard triplets' "
    "positives), for comparison with the main table; `unseen train-pos@10` counts the standard training "
    "positives, some of which these runs never trained on. Label-free methods (frozen, truncate, pca, "
    "autoencoder) are the same runs as in the main table.")


def stored_bytes_markdown(results: Sequence[Mapping]) -> str:
    """Where a study holds k-sparse codes (csr): the bytes one stored vector of each method takes,
    indices included, so that methods of different k are compared at the bytes they store (read
    from each run's record: its type, k and the hyperparameters it trained with)."""
    from ..methods.specs import SPECS, stored_bytes

    sized = {}
    for r in results:
        if r["method_type"] != "frozen":
            hp = (r.get("config") or {}).get("hparams") or {}
            active = SPECS[r["method_type"]].active
            form = f"{active(hp)} of {r['k']} latents (sparse)" if active else f"{r['k']} float32"
            sized[r["method"]] = (form, stored_bytes(r["method_type"], r["k"], hp), active is not None)
    if not any(sparse for _, _, sparse in sized.values()):
        return ""
    lines = ["", "### Bytes per stored vector", "",
             "A dense method's vector is stored in float32 (4 bytes per dimension); a k-sparse code (CSR's top-k "
             "latents) as its non-zeros alone, an (index uint16, value float16) pair each, 4 bytes per active "
             "latent, and is evaluated over those fp16 values (dive_core/sparse.py).", "",
             "| method | stored as | bytes per vector |", "|---|---|---|"]
    lines += [f"| {m} | {form} | {size} |" for m, (form, size, _) in sized.items()]
    return "\n".join(lines) + "\n"


def main_study(results: Sequence[Mapping], ctx: StudyContext) -> StudyOutput:
    """Main table (also: secondary dimension, unsupervised, document-disjoint, validation
    tables): per dataset and the mean over datasets, subsets with their n, paired significance."""
    summary = summarize_runs(results)
    bbs = study_backbones(results, ctx)
    lines = opening_lines(ctx, results) + metric_table(summary, ctx, bbs) + subset_table(summary, ctx, bbs)
    if any(((r.get("config") or {}).get("method_entry") or {}).get("doc_disjoint") for r in results):
        lines += [DOC_DISJOINT_NOTE, ""]
    md = "\n".join(lines) + "\n" + report.significance_markdown(report.significance_rows(results, ctx.per_query))
    md += report.versus_markdown(report.versus_rows(results, ctx.per_query))
    md += report.versus_markdown(report.versus_rows(results, ctx.per_query, baseline=report.DIVE,
                                                    types=report.DIVE_VARIANTS))
    for baseline in ctx.versus:  # `versus:` every other compressed method against each named one, at its own k
        md += report.versus_markdown(report.versus_rows(results, ctx.per_query, baseline=baseline, any_k=True,
                                                        skip=ctx.versus), plain=True)
    md += stored_bytes_markdown(results)
    return StudyOutput(md, list(summary.values()), lambda p: grouped_bars(p, summary, ctx, bbs))
