"""Threads a job on a small machine: one training on two threads, against two trainings on one thread
each, at once. Which gets more trainings done on 2 cores (config/budget_cpu.yaml gives one thread a
job), and whether every run gives the same weights.

    .venv/bin/python benchmarks/threads_per_job.py [--results results] [--dataset scifact]
        [--backbone minilm] [--methods mrl dive] [--k 64] [--epochs 6] [--repeats 2]

Trains each method's select-stage map of a finished run (its checkpoint's hyperparameters, seed 2027,
``--epochs`` epochs, the run's embeddings, splits and triplets) in fresh processes: (a) one on 2
threads, (b) one on 1 thread, (c) two on 1 thread each, started together. Prints one JSON line per
method: the median over repeats of each setting's wall seconds (c: the slower process's), the
throughput of (c) against (a) (trainings a second), and the weights' sha256 seen in each setting.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

from wait_policy import REPO, start_together  # benchmarks/wait_policy.py, beside this script


def child(a) -> None:
    """One training, on the threads ``--threads``; prints its weights' sha256."""
    sys.path.insert(0, str(REPO))
    from dive_core import records, runlog, splits
    from dive_core.embeddings import read_embeddings
    from dive_core.methods import new_method
    from dive_core.training import TrainLog, fit_data

    runlog.set_threads(a.threads)
    import torch

    base = Path(a.results) / a.dataset
    ckpt = torch.load(base / a.backbone / a.method / f"k{a.k}" / "select" / "seed2027" / "model.pt",
                      weights_only=False)
    manifest = records.read("splits", base / "splits.json")
    emb = read_embeddings(base / a.backbone / "embeddings.h5", expected_source=manifest["source_fingerprint"],
                          against=base / "splits.json")
    triplets = base / a.backbone / "triplets" / "select-random.tsv"
    data = fit_data(emb, splits.train_queries(manifest, "select"), triplets, "cpu")
    method = new_method(ckpt["type"], emb.dim, a.k, {**ckpt["hparams"], "epochs": a.epochs}, 2027, "cpu", "fp32")
    method.fit(data, TrainLog(), progress=False)
    print(json.dumps({"weights_sha256": method.state_sha256()}))


def at_once(a, method: str, threads: int, n: int) -> tuple[float, set[str]]:
    """``n`` trainings of ``method`` on ``threads`` threads each, started together: the slowest's wall
    seconds and the weights' hashes."""
    cmd = [sys.executable, __file__, "--child", "--threads", str(threads), "--method", method,
           "--results", a.results, "--dataset", a.dataset, "--backbone", a.backbone, "--k", str(a.k),
           "--epochs", str(a.epochs)]
    wall, _, hashes = start_together(cmd, n)
    return wall, hashes


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", default="results")
    ap.add_argument("--dataset", default="scifact")
    ap.add_argument("--backbone", default="minilm")
    ap.add_argument("--methods", nargs="+", default=["mrl", "dive"])
    ap.add_argument("--k", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--method", help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.results = str(Path(a.results).resolve())
    if a.child:
        return child(a)
    settings = {"one on 2 threads": (2, 1), "one on 1 thread": (1, 1), "two on 1 thread each": (1, 2)}
    for method in a.methods:
        walls, seen = {}, {}
        for _ in range(a.repeats):  # interleaved, so a slow spell of the machine touches every setting
            for name, (threads, n) in settings.items():
                wall, hashes = at_once(a, method, threads, n)
                walls.setdefault(name, []).append(wall)
                seen.setdefault(name, set()).update(hashes)
        med = {name: round(statistics.median(w), 2) for name, w in walls.items()}
        print(json.dumps({
            "method": method, "epochs": a.epochs, "cpus": os.cpu_count(), "wall_seconds": med,
            "throughput_two_at_once_vs_one_on_2_threads": round(2 * med["one on 2 threads"]
                                                                 / med["two on 1 thread each"], 3),
            "weights_sha256": {name: sorted(h) for name, h in seen.items()},
            "same_weights": len(set().union(*seen.values())) == 1}))


if __name__ == "__main__":
    main()
