"""Rule evaluate: checkpoint + embeddings + split -> result record (eval.json) + per-query TSV."""
import _dive_path  # noqa: F401  (this checkout's dive_core on sys.path; keep first)
from dive_core import job_server

job_server.delegate()  # a torch job: runs as a fork of the run's job server where one serves it
from dive_core import provenance, records, runlog
from dive_core.data import sha256_file
from dive_core.embeddings import read_embeddings
from dive_core.evaluation import evaluate_method, write_per_query
from dive_core.methods import Method

log = runlog.setup(snakemake.log[0], snakemake.threads)
w, inp, out = snakemake.wildcards, snakemake.input, snakemake.output
method = Method.load(inp.checkpoint)
manifest = records.read("splits", inp.splits)
emb = read_embeddings(inp.embeddings, expected_source=manifest["source_fingerprint"], against=inp.splits)
per_query, summary = evaluate_method(method, emb, manifest, w.stage, int(snakemake.params.top_k), consume=True)
write_per_query(out.per_query, per_query, [q for q in manifest["ids"][summary["role"]]])
result = records.result(
    run=dict(w.items()), method=method, summary=summary, config_snapshot=snakemake.params.config_snapshot,
    checkpoint_sha256=sha256_file(inp.checkpoint), per_query_sha256=sha256_file(out.per_query),
    versions=provenance.versions(), runtime=provenance.runtime(snakemake.threads),
)
records.write("result", out.result, result)
log.info("%s %s k=%s %s seed=%s on %s (%d queries): %s", w.dataset, w.method, method.k, w.stage, w.seed,
         summary["role"], summary["n_queries"], {k: round(v, 4) for k, v in summary["metrics"].items()})
