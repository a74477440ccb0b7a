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
    return StudyOutput(md, list(summary.values()), lambda p: grouped_bars(p, summary, ctx, bbs))
