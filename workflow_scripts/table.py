"""Rule table: a study's declared inputs -> table (Markdown, TSV), per-run TSV and one figure."""
import _dive_path  # noqa: F401  (this checkout's dive_core on sys.path; keep first)
from dive_core import plan, records, report, runlog
from dive_core.atomic import atomic_open
from dive_core.data import sha256_file
from dive_core.studies import STUDIES, StudyContext

log = runlog.setup(snakemake.log[0])
p, inp, out = snakemake.params, snakemake.input, snakemake.output
# efficiency, frontier, budget: their own records (a budget study reads the frontier's, or an arrival study's codes)
kind = {"budget": "arrival_codes" if p.arrival else "frontier"}.get(p.study, p.study) \
    if p.study in plan.OWN_JSON_STUDIES else "result"
kinds = (kind, "efficiency_synthetic") if kind == "efficiency" else (kind,)  # + the synthetic scaling's record
results = [records.read_one_of(kinds, path) for path in inp.results]
per_query, train_logs = {}, {}
if kind == "result":  # each run's per-query and train-log file, declared in the same order as its record
    for r, path, pq, tl in zip(results, inp.results, inp.per_query, inp.train_logs):
        if sha256_file(pq) != r["fingerprints"]["per_query_sha256"]:
            raise records.RecordError(f"{pq}: not the per-query file that {path} was evaluated into; "
                                      f"rerun `snakemake --forcerun evaluate {path}`")
        per_query[records.run_key(r)], train_logs[records.run_key(r)] = pq, tl
ctx = StudyContext(name=snakemake.wildcards.experiment, title=p.title, methods=list(p.methods),
                   datasets=list(p.datasets), backbones=list(p.backbones), groups=dict(p.groups), note=p.note,
                   highlight=p.highlight, versus=list(p.versus), budgets=list(p.budgets), stratum=p.stratum,
                   max_latency_ms=p.max_latency_ms,
                   per_query=per_query,
                   train_logs=train_logs,
                   selection=records.read("selection", inp.selection) if "selection" in inp.keys() else None,
                   picks={path: {**records.read("selection", path), "sha256": sha256_file(path)}
                          for path in (inp.picks if "picks" in inp.keys() else [])})
if "arrival" in inp.keys():  # one arrival manifest per dataset of the study, in ctx.datasets order
    for ds, path in zip(ctx.datasets, inp.arrival):
        manifest = records.read("arrival", path)
        if manifest["dataset"] != ds:
            raise records.RecordError(f"{path}: the arrival manifest of {manifest['dataset']!r}, declared for {ds!r}")
        ctx.arrival[manifest["dataset"]] = manifest
if "codes" in inp.keys():  # the arrival study's index quantizers, fitted on the known documents
    ctx.codes = [records.read("arrival_codes", path) for path in inp.codes]
if "validation" in inp.keys():  # every code on validation queries: what picks the codes (frontier or arrival codes)
    ctx.validation = [records.read(kind, path) for path in inp.validation]
if "arrival" in inp.keys():  # every arrival_codes record fitted under the manifest the study reads
    manifests = dict(zip(ctx.datasets, inp.arrival))
    codes = list(zip(inp.codes, ctx.codes)) if "codes" in inp.keys() else []
    if kind == "arrival_codes":  # an arrival budget study: its test and validation records
        codes += list(zip(inp.results, results)) + list(zip(inp.validation, ctx.validation))
    for path, rec in codes:
        rule = "arrival_codes" if rec["stage"] == "final" else "arrival_codes_validation"
        if rec["arrival_sha256"] != sha256_file(manifests[rec["dataset"]]):
            raise records.RecordError(f"{path}: fitted under another arrival manifest than {manifests[rec['dataset']]}; "
                                      f"rerun `snakemake --forcerun {rule} {path}`")
if "repeats" in inp.keys():  # the frontier's picked codes at its other seeds (frontier_seed records)
    ctx.repeats = [records.read("frontier", path) for path in inp.repeats]
study = STUDIES[p.study](results, ctx)
if p.study == "budget":  # the records it read, each named (tools/publish_tables.py reads their machine)
    read = [*inp.results, *inp.get("validation", []), *inp.get("repeats", [])]
    recs = [*results, *ctx.validation, *ctx.repeats]
    runs = [{"dataset": r["dataset"], "backbone": r["backbone"], "stage": r["stage"], "record": str(path)}
            for path, r in zip(read, recs)]
else:
    runs = report.collect(results) if kind == "result" else study.rows
report.write_tsv(out.runs, runs)  # one row per run
report.write_tsv(out.tsv, study.rows)
with atomic_open(out.md, "w", encoding="utf-8") as fh:
    fh.write(study.markdown)
study.figure(out.png)
log.info("%s (%s) over %d records written to %s", snakemake.wildcards.experiment, p.study, len(results), out.md)
