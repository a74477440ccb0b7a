"""Rule table: a study's result JSONs -> table (Markdown, TSV), per-run TSV and one figure."""
import _dive_path  # noqa: F401  (this checkout's dive_core on sys.path; keep first)
from dive_core import report, runlog, studies

log = runlog.setup(snakemake.log[0])
p, inp, out = snakemake.params, snakemake.input, snakemake.output
results = [report.read_json(path) for path in inp.results]
ctx = studies.StudyContext(name=snakemake.wildcards.experiment, title=p.title, methods=list(p.methods),
                           datasets=list(p.datasets), backbones=list(p.backbones), groups=dict(p.groups),
                           note=p.note, highlight=p.highlight,
                           selection=report.read_json(inp.selection[0]) if inp.selection else None)
study = studies.STUDIES[p.study](results, ctx)
# one row per run: the runs' result JSONs, or the rows of a study over its own JSONs (efficiency, frontier)
report.write_tsv(out.runs, report.collect(results) if all("metrics" in r for r in results) else study.rows)
report.write_tsv(out.tsv, study.rows)
with report.atomic_open(out.md, "w", encoding="utf-8") as fh:
    fh.write(study.markdown)
study.figure(out.png)
log.info("%s (%s) over %d runs written to %s", snakemake.wildcards.experiment, p.study, len(results), out.md)
