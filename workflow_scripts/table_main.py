"""Rule table_main: held-out result JSONs -> main table (Markdown, TSV), per-run TSV, bar charts."""
from dive_core import report, runlog

log = runlog.setup(snakemake.log[0])
p, out = snakemake.params, snakemake.output
rows = report.collect(snakemake.input)
summary = report.summarize(rows)
report.write_tsv(out.runs, rows)
report.write_tsv(out.tsv, summary)
title = f"Held-out test results, backbone {p.backbone}, primary dimension"
with report.atomic_open(out.md, "w", encoding="utf-8") as fh:
    fh.write(report.markdown_table(summary, title, p.methods, p.datasets))
for metric, path in (("ndcg@10", out.ndcg_png), ("recall@10", out.recall_png)):
    report.bar_chart(path, summary, p.methods, p.datasets, metric,
                     f"{metric} on held-out test queries ({p.backbone}); mean ± std over seeds")
log.info("table over %d runs written to %s", len(rows), out.md)
