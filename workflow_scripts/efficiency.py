"""Rule efficiency: FAISS flat-index memory, latency and throughput at full, secondary and
primary dimension, against the memory-bandwidth bound measured in the same job."""
import _dive_path  # noqa: F401  (this checkout's dive_core on sys.path; keep first)
from dive_core import job_server

job_server.delegate()  # a torch job: runs as a fork of the run's job server where one serves it
from dive_core import efficiency, provenance, quantizers, records, runlog

log = runlog.setup(snakemake.log[0], snakemake.threads)
w, inp, p = snakemake.wildcards, snakemake.input, snakemake.params
s = p.settings
emb, manifest, runs = efficiency.compressed_test_vectors(inp.embeddings, inp.splits, p.dims, inp.checkpoints)
entries = []
for method, k, m, docs, queries in runs:  # each dense index, then the index quantizers' of the same vectors
    entries.append((method, k, docs, queries, m.active))
    if m.active is None:
        entries += [(method, k, docs, queries, None, name) for name in p.quantizers.get("efficiency") or []
                    if quantizers.fits(name, k)]
info = efficiency.faiss_info()
bw = efficiency.memory_bandwidth(int(s["bandwidth_mb"]), repeats=int(s["repeats"]))
log.info("%s; streaming-read bandwidth %.2f GB/s", info, bw["bandwidth_gb_s"])
rows = efficiency.measure(entries, bw["bandwidth_gb_s"], n_single=int(s["n_single"]), repeats=int(s["repeats"]),
                          quantizer_seed=int(p.quantizers["seed"]), opq_niter=int(p.quantizers["opq_niter"]))
for r in rows:
    log.info("%s %dd %s%s: %.3f ms median, %.3f ms p99, %.0f q/s (%.0f on one thread), bound %.3f ms, %d bytes",
             r["method"], r["dim"], r["encoding"], f" ({r['active']} active)" if r["active"] else "",
             r["latency_ms_median"], r["latency_ms_p99"], r["throughput_qps"], r["throughput_qps_one_thread"],
             r["lower_bound_ms"], r["memory_bytes"])
records.write("efficiency", snakemake.output[0], {
    "dataset": w.dataset, "backbone": w.backbone, "stage": "final", "role": "test",
    "n_queries": len(entries[0][3]), "seed": int(s["seed"]), **info, **bw, "indexes": rows,
    "checkpoints": list(inp.checkpoints), "versions": provenance.versions(),
    "runtime": provenance.runtime(snakemake.threads),
})
