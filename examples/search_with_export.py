"""Encode texts with an exported DIVE model and search a FAISS index of compressed documents.

    .venv/bin/python examples/search_with_export.py [EXPORT_DIR]

EXPORT_DIR defaults to the SciFact DIVE-64d run (build it with
`snakemake --cores 1 results/scifact/minilm/dive/k64/final/seed2027/export`). The documents are
the workflow's stored MiniLM embeddings, compressed with the exported compressor alone (no
re-encoding); the two queries are new texts encoded by the exported sentence-transformers model.
"""
import os
import sys
from pathlib import Path

import faiss
from sentence_transformers import SentenceTransformer

from dive_core import load_compressor
from dive_core.data import load_beir
from dive_core.embeddings import read_embeddings

folder = sys.argv[1] if len(sys.argv) > 1 else "results/scifact/minilm/dive/k64/final/seed2027/export"
model = SentenceTransformer(folder, device="cpu")  # MiniLM + the trained compressor (sentence-transformers modules)
compressor = load_compressor(folder)  # the compressor alone, for embeddings made elsewhere

stored = read_embeddings("results/scifact/minilm/embeddings.h5")  # (5183, 384) frozen MiniLM vectors
docs = compressor.compress(stored.docs)  # (5183, 64), L2-normalised
index = faiss.IndexFlatIP(docs.shape[1])
index.add(docs)

texts = ["Vitamin D supplementation reduces the risk of fractures in older adults.",
         "Antibiotic resistance genes spread between bacteria by horizontal transfer."]
queries = model.encode(texts)  # (2, 64)
print(f"documents {docs.shape}, {docs.nbytes / 2**20:.2f} MiB; queries {queries.shape}")
scores, rows = index.search(queries, 3)
titles = {d: doc["title"] for d, doc in
          load_beir(Path(os.environ.get("BEIR_DATA_DIR", "data/beir")) / "scifact").corpus.items()}
for text, s, r in zip(texts, scores, rows):
    print(text)
    for score, row in zip(s, r):
        print(f"  {score:.3f}  doc {stored.doc_ids[row]}: {titles[stored.doc_ids[row]][:70]}")
