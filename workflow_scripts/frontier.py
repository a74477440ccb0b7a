"""Rule frontier: held-out quality against bytes per vector, for every method and dimension under
float32 / float16 / SQ8 / binary (with and without float32 rescoring) corpus codes."""
import _dive_path  # noqa: F401  (this checkout's dive_core on sys.path; keep first)
from dive_core import efficiency, provenance, records, runlog
from dive_core.data import sha256_file
from dive_core.splits import eval_queries

log = runlog.setup(snakemake.log[0], snakemake.threads)
w, inp, p = snakemake.wildcards, snakemake.input, snakemake.params
emb, manifest, runs = efficiency.compressed_test_vectors(inp.embeddings, inp.splits, p.runs, inp.checkpoints)
rows = []
for (method, k, m, docs, queries), path in zip(runs, inp.checkpoints):
    for r in efficiency.frontier_rows(method, k, docs, queries, emb.doc_ids, manifest, "final", int(p.top_k),
                                      active=m.active):
        rows.append({**r, "seed": m.seed, "checkpoint_sha256": sha256_file(path)})
        log.info("%s %dd %s: %d B/vector, nDCG@10 %.4f, R@10 %.4f", method, k, r["encoding"],
                 r["bytes_per_vector"], r["ndcg@10"], r["recall@10"])
for row, front in zip(rows, efficiency.pareto_front(rows)):
    row["pareto"] = front
records.write("frontier", snakemake.output[0], {"dataset": w.dataset, "backbone": w.backbone, "stage": "final", "role": "test",
                                 "n_queries": rows[0]["n_queries"] if rows else 0,
                                 "query_ids": eval_queries(manifest, "final"), "rows": rows,
                                 "versions": provenance.versions(), "runtime": provenance.runtime(snakemake.threads)})
