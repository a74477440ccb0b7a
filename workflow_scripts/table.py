"""Rule table: an experiment's result JSONs -> table (Markdown, TSV), per-run TSV, bar charts."""
import _dive_path  # noqa: F401  (this checkout's dive_core on sys.path; keep first)
from dive_core import report, runlog

log = runlog.setup(snakemake.log[0])
p, out = snakemake.params, snakemake.output
results = [report.read_json(path) for path in snakemake.input.results]
rows = report.collect(results)
summary = report.summarize(rows)
report.write_tsv(out.runs, rows)
report.write_tsv(out.tsv, summary)
with report.atomic_open(out.md, "w", encoding="utf-8") as fh:
    fh.write(report.markdown_table(summary, p.title, p.methods, p.datasets))
    fh.write(report.seen_unseen_markdown(summary, p.methods, p.datasets))
    fh.write(report.significance_markdown(report.significance_rows(results)))
for metric, path in (("ndcg@10", out.ndcg_png), ("recall@10", out.recall_png)):
    report.bar_chart(path, summary, p.methods, p.datasets, metric, f"{metric}: {p.title}")
log.info("table over %d runs written to %s", len(rows), out.md)
