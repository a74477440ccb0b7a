"""Rules frontier, frontier_seed and frontier_validation: quality against bytes per vector, for every
method and dimension (frontier_seed: those of the methods that run again at its seed) under float32 /
float16 / SQ8 / binary (with and without float32 rescoring) corpus codes, and the index quantizers of
config ``quantizers:`` (PQ, OPQ + PQ, RaBitQ, SQ4) on every dense run; final-stage maps on the test
queries, or (frontier_validation) select-stage maps on the validation queries."""
import _dive_path  # noqa: F401  (this checkout's dive_core on sys.path; keep first)
from dive_core import job_server

job_server.delegate()  # a torch job: runs as a fork of the run's job server where one serves it
from dive_core import efficiency, provenance, quantizers, records, runlog
from dive_core.data import sha256_file
from dive_core.splits import STAGES, eval_queries

log = runlog.setup(snakemake.log[0], snakemake.threads)
w, inp, p = snakemake.wildcards, snakemake.input, snakemake.params
qs = p.quantizers
stage = p.stage
emb, manifest, runs = efficiency.compressed_test_vectors(inp.embeddings, inp.splits, p.runs, inp.checkpoints, stage)
rows = []
for (method, k, m, docs, queries), path in zip(runs, inp.checkpoints):
    quantize = m.active is None and [method, k] in [list(x) for x in p.quantized]
    names = quantizers.grid(k, qs) if quantize else []
    for r in efficiency.frontier_rows(method, k, docs, queries, emb.doc_ids, manifest, stage, int(p.top_k),
                                      active=m.active, quantizers=names, quantizer_seed=int(qs["seed"]),
                                      opq_niter=int(qs["opq_niter"]),
                                      latency_queries=int(getattr(p, "latency_queries", 0))):
        rows.append({**r, "method_type": m.type, "supervised": bool(m.supervised), "seed": m.seed,
                     "checkpoint_sha256": sha256_file(path)})
        log.info("%s %dd %s: %d B/vector, nDCG@10 %.4f, R@10 %.4f%s", method, k, r["encoding"],
                 r["bytes_per_vector"], r["ndcg@10"], r["recall@10"],
                 f", fit {r['fit_seconds']:.1f} s" if r["fit_seconds"] is not None else "")
for row, front in zip(rows, efficiency.pareto_front(rows)):
    row["pareto"] = front
qids = eval_queries(manifest, stage)
role = STAGES[stage]["eval_role"]
seen = set(manifest["document_overlap"][role]["seen_ids"])
records.write("frontier", snakemake.output[0], {"dataset": w.dataset, "backbone": w.backbone, "stage": stage, "role": role,
                                 "n_queries": rows[0]["n_queries"] if rows else 0,
                                 "query_ids": qids, "seen": [int(q in seen) for q in qids], "rows": rows,
                                 "quantizers": dict(qs), "faiss": efficiency.faiss_info(),
                                 "versions": provenance.versions(), "runtime": provenance.runtime(snakemake.threads)})
