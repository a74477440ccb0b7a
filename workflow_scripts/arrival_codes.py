"""Rules arrival_codes and arrival_codes_validation: an arrival study's vectors (experiments.<name>.codes,
the experiment's first seed) in float32 and under the index quantizers of config ``quantizers:`` (and PQ
at ``arrival_bits``), every codebook fitted on the documents known at training time, the whole corpus
searched by the test queries (final-stage maps) or, params.stage select, by the validation queries
(select-stage maps: what an arrival budget study picks on)."""
import _dive_path  # noqa: F401  (this checkout's dive_core on sys.path; keep first)
from dive_core import job_server

job_server.delegate()  # a torch job: runs as a fork of the run's job server where one serves it
from dive_core import efficiency, provenance, quantizers, records, runlog
from dive_core.data import sha256_file
from dive_core.splits import STAGES, check_arrival, eval_queries, known_docs

log = runlog.setup(snakemake.log[0], snakemake.threads)
w, inp, p = snakemake.wildcards, snakemake.input, snakemake.params
qs, stage = p.quantizers, p.stage
role = STAGES[stage]["eval_role"]
arrival = records.read("arrival", inp.arrival)
check_arrival(arrival, inp.arrival, inp.splits)
emb, manifest, runs = efficiency.compressed_test_vectors(inp.embeddings, inp.splits, p.runs, inp.checkpoints, stage)
rows, skipped = [], []
for (method, k, m, docs, queries), path in zip(runs, inp.checkpoints):
    if m.seed != int(p.seed):
        raise records.RecordError(f"{path}: a checkpoint of seed {m.seed}, declared for seed {p.seed}")
    got, left = efficiency.arrival_code_rows(method, k, docs, queries, emb.doc_ids, manifest, arrival,
                                             quantizers.arrival_grid(k, qs), int(qs["seed"]), int(qs["opq_niter"]),
                                             int(p.top_k), stage)
    for r in got:
        rows.append({**r, "method_type": m.type, "supervised": bool(m.supervised), "seed": m.seed,
                     "checkpoint_sha256": sha256_file(path)})
        log.info("%s %dd %s: %d B/vector, nDCG@10 %.4f%s", method, k, r["encoding"], r["bytes_per_vector"],
                 r["ndcg@10"], f", fit on {r['train_rows']} rows in {r['fit_seconds']:.1f} s" if r["fit_seconds"] else "")
    for s in left:
        log.warning("%s %dd %s left out: %d centroids per sub-quantizer, %d known documents", method, k,
                    s["encoding"], s["centroids"], s["known_docs"])
    skipped += left
qids = eval_queries(manifest, stage)
records.write("arrival_codes", snakemake.output[0], {
    "experiment": w.experiment, "dataset": w.dataset, "backbone": w.backbone, "seed": int(p.seed), "stage": stage,
    "role": role, "n_queries": len(qids), "query_ids": qids, "strata": arrival["strata"][role],
    "known_docs": len(known_docs(emb.doc_ids, arrival)), "arrival_sha256": sha256_file(inp.arrival),
    "rows": rows, "skipped": skipped, "quantizers": dict(qs), "faiss": efficiency.faiss_info(),
    "versions": provenance.versions(), "runtime": provenance.runtime(snakemake.threads)})
