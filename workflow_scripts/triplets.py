"""Rule triplets: split manifest (+ frozen embeddings for hard negatives) -> triplet TSV + meta."""
import _dive_path  # noqa: F401  (this checkout's dive_core on sys.path; keep first)
from pathlib import Path

from dive_core import data, runlog, splits, triplets
from dive_core.atomic import read_json, write_json
from dive_core.data import sha256_file

log = runlog.setup(snakemake.log[0], snakemake.threads)
w, p = snakemake.wildcards, snakemake.params
manifest = read_json(snakemake.input.splits)
ds = data.load_staged(Path(snakemake.input.source).parent)
data.check_same_source(manifest["source_fingerprint"], ds.fingerprint, snakemake.input.splits, snakemake.input.source,
                       remedy=f"delete {snakemake.input.splits} and rerun to split the staged data")
train_qids = splits.train_queries(manifest, w.stage)
qrels = splits.role_qrels(manifest, splits.STAGES[w.stage]["train_roles"])
hard = None
meta_extra = {}
if w.negatives.startswith("hard"):
    from dive_core.embeddings import read_embeddings
    from dive_core.retrieval import search

    emb = read_embeddings(snakemake.input.embeddings, expected_source=manifest["source_fingerprint"],
                          against=snakemake.input.splits)
    run = search(emb.docs, emb.doc_ids, emb.query_rows(train_qids), train_qids, top_k=int(p.hard_pool))
    hard = {q: sorted(r, key=r.get, reverse=True) for q, r in run.items()}
    meta_extra = {"embeddings_content_sha256": emb.attrs.get("content_sha256"), "hard_pool": p.hard_pool}
mode, _, variant = w.negatives.partition("-")
excluded = set()
if variant == "docdisjoint":  # every document relevant to a query this stage evaluates
    eval_qrels = splits.role_qrels(manifest, [splits.STAGES[w.stage]["eval_role"]])
    excluded = {d for rel in eval_qrels.values() for d, s in rel.items() if s > 0}
    meta_extra["doc_disjoint"] = {"excluded_docs": len(excluded), "eval_role": splits.STAGES[w.stage]["eval_role"]}
t = triplets.build_triplets(qrels, train_qids, ds.doc_ids, int(p.seed), int(p.num_negatives),
                            mode, hard, max_per_query=p.max_per_query, excluded_docs=excluded,
                            self_ids=set(manifest["identical_ids"]["ids"]) if "identical_ids" in manifest else None)
triplets.write_triplets(snakemake.output.tsv, t)
meta = {
    "dataset": w.dataset, "backbone": w.backbone, "stage": w.stage, "negatives": w.negatives,
    "seed": int(p.seed), "num_negatives": int(p.num_negatives), "max_per_query": p.max_per_query,
    "train_roles": list(splits.STAGES[w.stage]["train_roles"]),
    "splits_sha256": sha256_file(snakemake.input.splits),
    "source_fingerprint": manifest["source_fingerprint"],
    "tsv_sha256": sha256_file(snakemake.output.tsv),
    "stats": triplets.triplet_stats(t), **meta_extra,
}
write_json(snakemake.output.meta, meta)
log.info("triplets %s/%s %s-%s: %s", w.dataset, w.backbone, w.stage, w.negatives, meta["stats"])
