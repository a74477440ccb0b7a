"""Throughput of backbones of config/config.yaml (default MiniLM) on real SciFact documents:
fp32 vs bf16 autocast and a few batch sizes, with the pipeline's own length-sorted batching, every
backbone in one run on one machine (so their ratios compare).

    BEIR_DATA_DIR=/path/to/beir .venv/bin/python -m benchmarks.embed_speed [--docs 512] [--threads 2]
    ... -m benchmarks.embed_speed --backbone gemma,mpnet --docs 64 --batch-sizes 16 --precisions fp32,bf16

(mpnet and gemma read their folders data/models/<id>: `snakemake --cores 1 data/models/gemma`
fetches one.) Documents are SciFact's first --docs in corpus order; documents go through
encode_docs, so a backbone's document prompt (gemma) is included.

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
    ap.add_argument("--backbone", default="minilm", help="backbones of config/config.yaml, comma-separated")
    ap.add_argument("--precisions", default="fp32,bf16")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    from dive_core.config import load_yaml
    from dive_core.provenance import cpu_model

    from dive_core.provenance import cpu_flags

    config = load_yaml(Path(__file__).resolve().parent.parent / "config" / "config.yaml")["backbones"]
    print(f"cpu {cpu_model()} ({' '.join(cpu_flags())}), threads {a.threads}, torch {torch.__version__}",
          flush=True)
    root = Path(os.environ.get("BEIR_DATA_DIR", "data/beir")) / "scifact"
    ds = load_beir(root)
    texts = [ds.doc_text(d) for d in ds.doc_ids[: a.docs]]
    for backbone in a.backbone.split(","):
        spec, ref = config[backbone], None
        for precision in a.precisions.split(","):
            bb = build_backbone(backbone, {**spec, "precision": precision}, device="cpu")
            for bs in map(int, a.batch_sizes.split(",")):
                encode_all(bb.encode_docs, texts[:bs], bb.dim, bs, "warmup", progress=False)
                t0 = time.perf_counter()
                out = encode_all(bb.encode_docs, texts, bb.dim, bs, "bench", progress=False)
                dt = time.perf_counter() - t0
                line = f"{backbone} {precision} batch {bs:4d}: {len(texts) / dt:7.2f} docs/s ({len(texts)} docs)"
                if precision == "fp32" and ref is None:
                    ref = out
                elif precision != "fp32" and ref is not None:
                    cos = np.sum(ref * out, 1) / np.linalg.norm(ref, axis=1) / np.linalg.norm(out, axis=1)
                    line += f"   vs fp32: max |diff| {np.abs(ref - out).max():.4f}, min cosine {cos.min():.5f}"
                print(line, flush=True)


if __name__ == "__main__":
    main()
