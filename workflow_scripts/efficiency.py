"""Rule efficiency: FAISS flat-index memory, latency and throughput at full, secondary and
primary dimension, against the memory-bandwidth bound measured in the same job."""
import _dive_path  # noqa: F401  (this checkout's dive_core on sys.path; keep first)
from dive_core import efficiency, provenance, runlog, splits
from dive_core.atomic import read_json, write_json
from dive_core.embeddings import read_embeddings
from dive_core.methods import Method

log = runlog.setup(snakemake.log[0], snakemake.threads)
w, inp, p = snakemake.wildcards, snakemake.input, snakemake.params
s = p.settings
emb = read_embeddings(inp.embeddings)
manifest = read_json(inp.splits)
qids = splits.eval_queries(manifest, "final")
entries = []
for (method, k), path in zip(p.dims, inp.checkpoints):
    m = Method.load(path)
    entries.append((method, k, m.compress(emb.docs), m.compress(emb.query_rows(qids))))
info = efficiency.faiss_info()
bw = efficiency.memory_bandwidth(int(s["bandwidth_mb"]), repeats=int(s["repeats"]))
log.info("%s; streaming-read bandwidth %.2f GB/s", info, bw["bandwidth_gb_s"])
rows = efficiency.measure(entries, bw["bandwidth_gb_s"], n_single=int(s["n_single"]), repeats=int(s["repeats"]))
for r in rows:
    log.info("%s %dd: %.3f ms median, %.3f ms p99, %.0f q/s, bound %.3f ms", r["method"], r["dim"],
             r["latency_ms_median"], r["latency_ms_p99"], r["throughput_qps"], r["lower_bound_ms"])
write_json(snakemake.output[0], {
    "dataset": w.dataset, "backbone": w.backbone, "stage": "final", "role": "test", "n_queries": len(qids),
    "seed": int(s["seed"]), **info, **bw, "indexes": rows, "checkpoints": list(inp.checkpoints),
    "versions": provenance.versions(), "runtime": provenance.runtime(snakemake.threads),
})
