"""Rule efficiency_synthetic: how flat-index cost grows with corpus size and dimension, on random
unit vectors (no backbone involved)."""
import _dive_path  # noqa: F401  (this checkout's dive_core on sys.path; keep first)
from dive_core import job_server

job_server.delegate()  # a torch job: runs as a fork of the run's job server where one serves it
from dive_core import efficiency, provenance, quantizers, records, runlog

log = runlog.setup(snakemake.log[0], snakemake.threads)
s = snakemake.params.settings
syn = s["synthetic"]
info = efficiency.faiss_info()
bw = efficiency.memory_bandwidth(int(s["bandwidth_mb"]), repeats=int(s["repeats"]))
qs = snakemake.params.quantizers
# the flat index at every size and dimension; the quantizers of efficiency.synthetic.quantizers at the
# dimensions of `dims` (not the LLM2Vec-sized ones), fitted on the vectors (FAISS samples 256 per centroid)
grid = [(n, d, names) for n in syn["docs"] for d in syn["dims"]
        for names in [[q for q in syn.get("quantizers") or [] if quantizers.fits(q, int(d))]]]
grid += [(int(syn["large_docs"]), d, []) for d in syn["large_dims"]]
rows = []
for n, d, names in grid:
    docs = efficiency.unit_vectors(int(n), int(d), seed=0)
    queries = efficiency.unit_vectors(int(syn["queries"]), int(d), seed=1)
    for enc in ["float32", *names]:
        row = efficiency.measure([("synthetic", d, docs, queries, None, enc)], bw["bandwidth_gb_s"],
                                 n_single=int(syn.get("n_single", s["n_single"])), repeats=int(s["repeats"]),
                                 quantizer_seed=int(qs["seed"]), opq_niter=int(qs["opq_niter"]))[0]
        for key in ("memory_ratio_to_full", "latency_speedup_vs_full", "throughput_ratio_to_full"):
            row.pop(key)
        rows.append(row)
        log.info("n=%d d=%d %s: %.3f ms median (bound %.3f ms), %.0f q/s (%.0f on one thread), %d bytes", n, d, enc,
                 row["latency_ms_median"], row["lower_bound_ms"], row["throughput_qps"],
                 row["throughput_qps_one_thread"], row["memory_bytes"])
    del docs
records.write("efficiency_synthetic", snakemake.output[0], {
    "dataset": "synthetic", **info, **bw, "indexes": rows, "versions": provenance.versions(),
    "runtime": provenance.runtime(snakemake.threads)})
