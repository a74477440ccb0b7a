"""Rule efficiency: FAISS flat-index memory, latency and throughput at full, secondary and
primary dimension, against the memory-bandwidth bound measured in the same job."""
import _dive_path  # noqa: F401  (this checkout's dive_core on sys.path; keep first)
from dive_core import efficiency, provenance, records, runlog

log = runlog.setup(snakemake.log[0], snakemake.threads)
w, inp, p = snakemake.wildcards, snakemake.input, snakemake.params
s = p.settings
emb, manifest, runs = efficiency.compressed_test_vectors(inp.embeddings, inp.splits, p.dims, inp.checkpoints)
entries = [(method, k, docs, queries, m.active) for method, k, m, docs, queries in runs]
info = efficiency.faiss_info()
bw = efficiency.memory_bandwidth(int(s["bandwidth_mb"]), repeats=int(s["repeats"]))
log.info("%s; streaming-read bandwidth %.2f GB/s", info, bw["bandwidth_gb_s"])
rows = efficiency.measure(entries, bw["bandwidth_gb_s"], n_single=int(s["n_single"]), repeats=int(s["repeats"]))
for r in rows:
    log.info("%s %dd%s: %.3f ms median, %.3f ms p99, %.0f q/s, bound %.3f ms", r["method"], r["dim"],
             f" ({r['active']} active)" if r["active"] else "", r["latency_ms_median"], r["latency_ms_p99"],
             r["throughput_qps"], r["lower_bound_ms"])
records.write("efficiency", snakemake.output[0], {
    "dataset": w.dataset, "backbone": w.backbone, "stage": "final", "role": "test",
    "n_queries": len(entries[0][3]), "seed": int(s["seed"]), **info, **bw, "indexes": rows,
    "checkpoints": list(inp.checkpoints), "versions": provenance.versions(),
    "runtime": provenance.runtime(snakemake.threads),
})
