"""Frozen backbone vectors on BEIR's *official* test split (qrels/test.tsv), the split published
BEIR/MTEB figures use; an external check that the workflow's embeddings are right. Reads the
workflow's embedding file (it holds every judged query, so the official test queries too):

    BEIR_DATA_DIR=/path/to/beir .venv/bin/python examples/official_test_split.py DATASET BACKBONE

after `snakemake --cores 2 results/DATASET/BACKBONE/embeddings.h5`. Prints nDCG@10 over the
official test queries (exact inner-product search over L2-normalised vectors: cosine, as MTEB).
"""
import os
import sys
from pathlib import Path

from dive_core import metrics, retrieval
from dive_core.data import load_beir
from dive_core.embeddings import read_embeddings

dataset, backbone = sys.argv[1], sys.argv[2]
root = Path(os.environ.get("BEIR_DATA_DIR", "data/beir")) / dataset
ds = load_beir(root)
test = next((t for name, t in ds.qrels.items() if Path(name).stem.startswith("test")), None)
if test is None:
    sys.exit(f"{root}: no qrels/test.tsv (official test split)")
emb = read_embeddings(f"results/{dataset}/{backbone}/embeddings.h5")
qids = [q for q in test if any(s > 0 for s in test[q].values())]
run = retrieval.search(emb.docs, emb.doc_ids, emb.query_rows(qids), qids, top_k=100, exclude_self=True,
                       use_gpu=False)
per_query = metrics.evaluate({q: test[q] for q in qids}, run)
m = metrics.mean_metrics(per_query)
print(f"{dataset} {backbone} official test split: {len(qids)} queries, nDCG@10 {m['ndcg@10']:.4f}, "
      f"Recall@100 {m['recall@100']:.4f} (weights_sha256 {emb.attrs.get('weights_sha256', '')[:12]})")
