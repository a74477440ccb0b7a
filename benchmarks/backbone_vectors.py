"""Are the workflow's vectors the model's own? Re-encodes a seeded sample of documents and judged
queries of an embedding file with sentence-transformers' own ``encode_document`` /
``encode_query`` (the model folder's prompts) in fp32, and reports the cosine between the two per
row (min, median). The workflow may have embedded in bf16 (``precision:``); this measures what that,
and everything between the texts and the file, changes.

    BEIR_DATA_DIR=/path/to/beir .venv/bin/python -m benchmarks.backbone_vectors \\
        --embeddings results/scifact/gemma/embeddings.h5 --model data/models/gemma --n 200
"""
import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import torch

from dive_core.data import load_beir
from dive_core.embeddings import read_embeddings


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, 1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--embeddings", required=True)
    ap.add_argument("--model", required=True, help="the sentence-transformers folder the file was made from")
    ap.add_argument("--dataset", default="scifact")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=16)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    from sentence_transformers import SentenceTransformer

    emb = read_embeddings(a.embeddings, normalize=False)
    ds = load_beir(Path(os.environ.get("BEIR_DATA_DIR", "data/beir")) / a.dataset)
    rng = np.random.default_rng(a.seed)
    docs = sorted(rng.choice(len(emb.doc_ids), size=min(a.n, len(emb.doc_ids)), replace=False).tolist())
    queries = sorted(rng.choice(len(emb.query_ids), size=min(a.n, len(emb.query_ids)), replace=False).tolist())
    model = SentenceTransformer(a.model, device="cpu")
    out = {"embeddings": a.embeddings, "model": a.model, "n_docs": len(docs), "n_queries": len(queries),
           "precision_of_file": emb.attrs.get("precision"), "reference": "sentence-transformers fp32"}
    t0 = time.perf_counter()
    with torch.inference_mode():
        d = model.encode_document([ds.doc_text(emb.doc_ids[i]) for i in docs], batch_size=a.batch_size)
        q = model.encode_query([ds.queries[emb.query_ids[i]] for i in queries], batch_size=a.batch_size)
    out["seconds"] = round(time.perf_counter() - t0, 1)
    for name, mine, ref in (("documents", emb.docs[docs], d), ("queries", emb.queries[queries], q)):
        c = cosines(mine, ref)
        out[name] = {"min_cosine": float(c.min()), "median_cosine": float(np.median(c))}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
