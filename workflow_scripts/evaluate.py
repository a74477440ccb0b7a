"""Rule evaluate: checkpoint + embeddings + split -> result JSON + per-query TSV."""
import _dive_path  # noqa: F401  (this checkout's dive_core on sys.path; keep first)
from dive_core import provenance, runlog
from dive_core.atomic import read_json, write_json
from dive_core.data import sha256_file
from dive_core.embeddings import read_embeddings
from dive_core.evaluation import evaluate_method, write_per_query
from dive_core.methods import Method

log = runlog.setup(snakemake.log[0], snakemake.threads)
w, inp, out = snakemake.wildcards, snakemake.input, snakemake.output
method = Method.load(inp.checkpoint)
manifest = read_json(inp.splits)
emb = read_embeddings(inp.embeddings, expected_source=manifest["source_fingerprint"], against=inp.splits)
per_query, summary = evaluate_method(method, emb, manifest, w.stage, int(snakemake.params.top_k), consume=True)
write_per_query(out.per_query, per_query, [q for q in manifest["ids"][summary["role"]]])
meta = method.meta
result = {
    "dataset": w.dataset, "backbone": w.backbone, "method": w.method, "method_type": method.type,
    "stage": w.stage, "seed": int(w.seed), "k": method.k, "d": method.d,
    **{k: summary[k] for k in ("role", "n_queries", "metrics", "subsets", "diagnostics", "top_k", "identical_ids")},
    "config": {**snakemake.params.config_snapshot, "hparams": method.hp, "negatives": meta.get("negatives"),
               "n_triplets": meta.get("n_triplets"), "n_train_queries": meta.get("n_train_queries"),
               "selected": meta.get("selected")},
    "fingerprints": {**meta["fingerprints"], "checkpoint_sha256": sha256_file(inp.checkpoint),
                     "weights_sha256": method.state_sha256(),
                     "per_query_sha256": sha256_file(out.per_query)},
    "timings": {"train_seconds": meta.get("train_seconds"), **summary["timings"]},
    "training": {"final_epoch": meta.get("final_epoch"), "device": meta.get("device"),
                 "runtime": meta.get("runtime"), "versions": meta.get("versions")},
    "versions": provenance.versions(),
    "runtime": provenance.runtime(snakemake.threads),
    "artifacts": {"checkpoint": inp.checkpoint, "train_log": inp.train_log, "per_query": out.per_query,
                  "embeddings": inp.embeddings, "splits": inp.splits},
}
write_json(out.result, result)
log.info("%s %s k=%s %s seed=%s on %s (%d queries): %s", w.dataset, w.method, method.k, w.stage, w.seed,
         summary["role"], summary["n_queries"], {k: round(v, 4) for k, v in summary["metrics"].items()})
