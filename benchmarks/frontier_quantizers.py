"""Cost of the frontier's quantizer rows on SciFact-sized random data: every (method, dimension) run
of the frontier study (config/config.yaml) gets the quantizer grid of its dimension
(config ``quantizers:``, dive_core.quantizers.grid), fitted on 5,183 documents and searched with
300 queries (top 101), as the frontier job does. Prints each fit's seconds and the total.

    python benchmarks/frontier_quantizers.py [--threads 2] [--docs 5183] [--runs 19]
"""
import argparse
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: the checkout in the working directory first
    sys.path.insert(0, str(Path.cwd()))
from dive_core import quantizers as Q  # noqa: E402
from dive_core.config import load_yaml  # noqa: E402
from dive_core.plan import frontier_quantized  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--docs", type=int, default=5183)
ap.add_argument("--queries", type=int, default=300)
ap.add_argument("--config", default="config/config.yaml")
args = ap.parse_args()

import faiss  # noqa: E402

faiss.omp_set_num_threads(args.threads)
cfg = load_yaml(args.config)
settings = cfg["quantizers"]
runs = [(m, k) for m, k in frontier_quantized(cfg, cfg["backbone"]) if not m.startswith("csr")]
rng = np.random.default_rng(0)
total, t_start = 0.0, time.perf_counter()
for method, k in runs:
    docs = rng.standard_normal((args.docs, k)).astype(np.float32)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    queries = rng.standard_normal((args.queries, k)).astype(np.float32)
    for name in Q.grid(k, settings):
        t0 = time.perf_counter()
        index, info = Q.build(name, docs, int(settings["seed"]), opq_niter=int(settings["opq_niter"]))
        index.search(queries, 101)
        total += time.perf_counter() - t0
        print(f"{method} {k}d {name}: {index.sa_code_size()} B, fit {info['fit_seconds']:.2f} s, "
              f"fit+search {time.perf_counter() - t0:.2f} s", flush=True)
print(f"{len(runs)} runs, quantizer rows {total:.0f} s, wall {time.perf_counter() - t_start:.0f} s "
      f"({args.threads} threads)")
