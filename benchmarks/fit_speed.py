"""What one fit costs at the paper's dimensions on this machine: wall time and peak resident
memory of one DIVE, one Matryoshka-Adaptor and one SMEC fit, d -> k, on generated vectors of a
collection's sizes. Run from the repository root:

    .venv/bin/python benchmarks/fit_speed.py [--d 4096] [--k 128] [--docs 5183] [--queries 809]
                     [--triplets 10000] [--epochs 50] [--methods dive mrl smec] [--threads N]

Defaults: LLM2Vec-Mistral's 4096d -> 128d at SciFact's sizes (5,183 documents, its 809 training
queries, about 10,000 triplets), each method at its configured hyperparameters
(``config/config.yaml``, ``methods.<name>`` and ``training``) with ``--epochs`` epochs. The
vectors are generated (unit-norm Gaussian documents, each query a noisy copy of a relevant
document): the cost of a fit depends on the shapes, not on the values. Each method fits in a
fresh process (its peak RSS is its own: ``ru_maxrss`` of that process, data included), one after
the other. CPU, threads and versions are printed first; the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the checkout in the working directory first
    sys.path.insert(0, str(Path.cwd()))


def generated(d: int, docs: int, queries: int, triplets: int, seed: int = 0):
    import numpy as np

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((docs, d), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    rel = rng.integers(0, docs, size=queries)
    q = x[rel] + 0.5 * rng.standard_normal((queries, d), dtype=np.float32) / np.sqrt(d)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    t_q = rng.integers(0, queries, size=triplets)
    return x, q, t_q, rel[t_q], rng.integers(0, docs, size=triplets)


def fit_one(args) -> dict:
    """One fit in this process: seconds, peak RSS, epochs, steps."""
    import numpy as np
    import torch

    from dive_core import config as dcfg
    from dive_core import plan
    from dive_core.methods import new_method
    from dive_core.training import FitData, TrainLog

    torch.set_num_threads(args.threads)
    cfg = dcfg.load_yaml(Path("config/config.yaml"))
    cfg["training"]["epochs"] = args.epochs
    p = plan.resolve(cfg, dcfg.load_registry(Path("config/datasets.yaml")))
    hp = p.hparams(args.method)
    docs, queries, t_q, t_p, t_n = generated(args.d, args.docs, args.queries, args.triplets)
    ones = np.ones(len(t_q), dtype=np.float32)
    data = FitData.from_arrays(docs, queries, t_q, t_p, t_n, ones, 0 * ones)
    method = new_method(p.method(args.method).type, args.d, args.k, hp, seed=2027)
    log = TrainLog()
    t0 = time.perf_counter()
    method.fit(data, log, progress=False)
    seconds = time.perf_counter() - t0
    return {"method": args.method, "type": method.type, "seconds": round(seconds, 2),
            "epochs_logged": len(log.rows), "seconds_per_epoch": round(seconds / max(len(log.rows), 1), 3),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "hparams": {k: hp[k] for k in sorted(hp) if k in ("epochs", "batch_size", "hidden", "heads", "lr")}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--d", type=int, default=4096)
    ap.add_argument("--k", type=int, default=128)
    ap.add_argument("--docs", type=int, default=5183)
    ap.add_argument("--queries", type=int, default=809)
    ap.add_argument("--triplets", type=int, default=10000)
    ap.add_argument("--epochs", type=int, default=50)
    ap.add_argument("--methods", nargs="+", default=["dive", "mrl", "smec"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--method", help=argparse.SUPPRESS)  # internal: fit this one method in this process
    args = ap.parse_args(argv)
    if args.method:
        print(json.dumps(fit_one(args)))
        return 0
    from dive_core import provenance

    env = {"cpu": provenance.cpu_model(), "threads": args.threads, "versions": provenance.versions()}
    print(json.dumps(env), flush=True)
    rows = []
    for m in args.methods:
        cmd = [sys.executable, __file__, "--method", m] + [f"--{k}={getattr(args, k)}" for k in
                                                           ("d", "k", "docs", "queries", "triplets", "epochs",
                                                            "threads")]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"{m}: the fit failed:\n{proc.stderr[-3000:]}", file=sys.stderr)
            return 1
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    print(json.dumps({**env, "d": args.d, "k": args.k, "docs": args.docs, "queries": args.queries,
                      "triplets": args.triplets, "epochs": args.epochs, "fits": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
