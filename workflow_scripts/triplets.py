"""Rule triplets: split manifest (+ frozen embeddings for hard negatives) -> triplet TSV + its record."""
import _dive_path  # noqa: F401  (this checkout's dive_core on sys.path; keep first)
from pathlib import Path

from dive_core import data, plan, records, runlog, splits, triplets
from dive_core.data import sha256_file

log = runlog.setup(snakemake.log[0], snakemake.threads)
w, p, inp = snakemake.wildcards, snakemake.params, snakemake.input
manifest = records.read("splits", inp.splits)
ds = data.load_staged(Path(inp.source).parent)
data.check_same_source(manifest["source_fingerprint"], ds.fingerprint, inp.splits, inp.source,
                       remedy=f"delete {inp.splits} and rerun to split the staged data")
train_qids = splits.train_queries(manifest, w.stage)
qrels = splits.role_qrels(manifest, splits.STAGES[w.stage]["train_roles"])
mode, variant = plan.parse_negatives(w.negatives)
hard = None
meta_extra = {}
arrival = None
if variant == plan.ARRIVAL:  # only documents known at training time may be a positive or a negative
    arrival = records.read("arrival", inp.arrival)
    splits.check_arrival(arrival, inp.arrival, inp.splits)
    train_qids = splits.known_queries(train_qids, manifest, arrival)
    meta_extra["arrival"] = {"arrival_sha256": sha256_file(inp.arrival), "arriving_docs": len(arrival["arriving"])}
doc_ids = splits.known_docs(ds.doc_ids, arrival)
if mode == "hard":
    from dive_core.embeddings import read_embeddings
    from dive_core.retrieval import search

    emb = read_embeddings(inp.embeddings, expected_source=manifest["source_fingerprint"], against=inp.splits)
    # the frozen top-k among the documents a triplet may hold (a copy only when some arrive later)
    docs, ids = (emb.docs, emb.doc_ids) if arrival is None else (emb.docs[emb.doc_positions(doc_ids)], doc_ids)
    run = search(docs, ids, emb.query_rows(train_qids), train_qids, top_k=int(p.hard_pool))
    hard = {q: sorted(r, key=r.get, reverse=True) for q, r in run.items()}
    meta_extra.update(embeddings_content_sha256=emb.attrs["content_sha256"], hard_pool=p.hard_pool)
excluded = set()
if variant == plan.DOC_DISJOINT:  # every document relevant to a query this stage evaluates
    eval_qrels = splits.role_qrels(manifest, [splits.STAGES[w.stage]["eval_role"]])
    excluded = {d for rel in eval_qrels.values() for d, s in rel.items() if s > 0}
    meta_extra["doc_disjoint"] = {"excluded_docs": len(excluded), "eval_role": splits.STAGES[w.stage]["eval_role"]}
t = triplets.build_triplets(qrels, train_qids, doc_ids, int(p.seed), int(p.num_negatives), mode, hard,
                            max_per_query=p.max_per_query, excluded_docs=excluded,
                            self_ids=set(manifest["identical_ids"]["ids"]))
triplets.write_triplets(snakemake.output.tsv, t)
meta = records.write("triplets", snakemake.output.meta, {
    "dataset": w.dataset, "backbone": w.backbone, "stage": w.stage, "negatives": w.negatives,
    "seed": int(p.seed), "num_negatives": int(p.num_negatives), "max_per_query": p.max_per_query,
    "train_roles": list(splits.STAGES[w.stage]["train_roles"]),
    "splits_sha256": sha256_file(inp.splits),
    "source_fingerprint": manifest["source_fingerprint"],
    "tsv_sha256": sha256_file(snakemake.output.tsv),
    "stats": triplets.triplet_stats(t), **meta_extra,
})
log.info("triplets %s/%s %s-%s: %s", w.dataset, w.backbone, w.stage, w.negatives, meta["stats"])
