"""How close training runs to the machine's limit: the matrix-product rate of the device, the
training step of every trained method on the workflow's real SciFact artefacts, and DIVE's step
FLOP rate as a fraction of the product rate (a roofline check). Run from the repository root:

    .venv/bin/python benchmarks/device_check.py --device cpu [--precision fp32|bf16]
                     [--dataset scifact] [--backbone minilm] [--stage final] [--k 64]
                     [--steps 40] [--repeats 5] [--threads N] [--methods dive mrl ...]

It reads the workflow's own artefacts (build them first, e.g.
``snakemake --cores 2 results/scifact/minilm/triplets/final-random.tsv``): the frozen embeddings,
the split and the shared triplets of ``--stage``. What it measures, in one process:

- ``matmul_gflops``: an fp32 (n x n) @ (n x n) product (``--matmul-size``, 2048 by default),
  median over repeats after a warm-up; ``matmul_gflops_bf16`` the same in bfloat16.
- per trained method, its configured hyperparameters (``config/config.yaml``) and the
  precision asked for: ``fit`` on the same seeded ``--steps`` batches of real triplets (the
  autoencoder on as many batches of the corpus), median over ``--repeats`` after one discarded
  warm-up, methods interleaved within each repeat. ``seconds_per_step`` = the time inside the
  fit's epochs (its log rows) / optimiser steps; ``seconds_per_epoch`` = one full epoch at that
  rate (the autoencoder's is the corpus; a SMEC epoch is its mean stage epoch; Matryoshka-Adaptor's
  two-stage schedule trains half its epochs on the corpus and half on the triplets, so its
  figure is the mean of one of each); ``setup_seconds`` = the rest of the fit (SMEC's stage
  inputs and neighbour lists; about zero for the others), paid once per fit or stage.
- ``gflops_per_step``: the matrix-product FLOPs of the fit, counted by PyTorch's
  ``FlopCounterMode`` (forward, backward and set-up), divided by its optimiser steps;
  ``flop_rate_ratio`` = (the fit's FLOPs / the fit's seconds) / ``matmul_gflops``.
  ``train_step_gflops`` and the top-level ``flop_rate_ratio`` are DIVE's.

Thread count, CPU (or GPU) model and versions are printed first; the last line is one JSON
object. Timings are wall clock: keep the machine otherwise idle, and compare figures only
within one run on one machine. ``--device cuda`` times on the GPU (synchronising around each
timed region). The script also runs from another checkout's root
(``cd ../other && python ../this/benchmarks/device_check.py``): ``dive_core`` then comes from
that checkout's environment, which is how a before/after pair is measured on one machine.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

if __package__ in (None, ""):  # run as a script: the checkout in the working directory first
    sys.path.insert(0, str(Path.cwd()))

from dive_core import config as dcfg
from dive_core import numerics, plan, provenance, records, splits
from dive_core.embeddings import read_embeddings
from dive_core.methods import new_method
from dive_core.training import FitData, TrainLog, fit_data

METHODS = ("dive", "mrl", "search_adaptor", "smec", "autoencoder")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def sync(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def matmul_gflops(device: str, n: int, dtype: torch.dtype, repeats: int = 7) -> float:
    """GFLOP/s of an (n x n) @ (n x n) product: median of ``repeats`` after two warm-ups."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
    times = []
    for i in range(repeats + 2):
        sync(device)
        t0 = time.perf_counter()
        a @ b
        sync(device)
        if i >= 2:
            times.append(time.perf_counter() - t0)
    return 2 * n**3 / statistics.median(times) / 1e9


def subset(data: FitData, n: int, seed: int = 0) -> FitData:
    """The same ``n`` triplets (a seeded random subset) for every method."""
    idx = torch.randperm(data.n_triplets, generator=torch.Generator().manual_seed(seed))[:n].to(data.device)
    return FitData(data.docs, data.queries, data.t_q[idx], data.t_p[idx], data.t_n[idx],
                   data.y_p[idx], data.y_n[idx])


def corpus_subset(data: FitData, n: int) -> FitData:
    """The first ``n`` corpus rows (the autoencoder's items), no triplets."""
    return FitData(data.docs[:n], data.queries, data.t_q, data.t_p, data.t_n, data.y_p, data.y_n)


def new(name: str, hp: dict, d: int, k: int, seed: int, device: str, precision: str):
    """The method as the workflow builds it (``precision`` passed only where it is not fp32, so
    that a checkout from before the option existed runs too)."""
    kw = {"device": device}
    if precision != "fp32":
        if "precision" not in inspect.signature(new_method).parameters:
            raise SystemExit(f"this checkout's dive_core has no training precision option ({precision})")
        kw["precision"] = precision
    return new_method(hp["__type"], d, k, {h: v for h, v in hp.items() if h != "__type"}, seed, **kw)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    ap.add_argument("--precision", default="fp32", choices=tuple(DTYPES))
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--results", default="results")
    ap.add_argument("--dataset", default="scifact")
    ap.add_argument("--backbone", default="minilm")
    ap.add_argument("--stage", default="final", choices=("select", "final"))
    ap.add_argument("--k", type=int, default=64)
    ap.add_argument("--steps", type=int, default=40, help="optimiser steps per timed fit")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: PyTorch's)")
    ap.add_argument("--matmul-size", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=2027)
    ap.add_argument("--methods", nargs="+", default=list(METHODS))
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    dev = a.device
    config = dcfg.load_yaml(a.config)
    res = Path(a.results) / a.dataset / a.backbone
    emb = read_embeddings(res / "embeddings.h5")
    manifest = records.read("splits", Path(a.results) / a.dataset / "splits.json")
    train_qids = splits.train_queries(manifest, a.stage)
    full = fit_data(emb, train_qids, res / "triplets" / f"{a.stage}-random.tsv", dev)
    hps = {}
    for name in a.methods:
        hp = plan.method_hparams(config, name)
        hp["__type"] = plan.method_type(config, name)
        hps[name] = hp
    gpu = torch.cuda.get_device_name(torch.device(dev)) if torch.device(dev).type == "cuda" else None
    header = {"device": dev, "gpu_name": gpu, "cpu": provenance.cpu_model(), "threads": torch.get_num_threads(),
              "torch": torch.__version__, "numpy": np.__version__, "git_commit": provenance.git_commit("."),
              "mkl": numerics.mkl_mode(),
              "precision": a.precision, "dataset": a.dataset, "backbone": a.backbone, "stage": a.stage, "k": a.k,
              "triplets_per_epoch": full.n_triplets, "corpus_docs": int(full.docs.shape[0])}
    print(json.dumps(header), flush=True)

    mm = matmul_gflops(dev, a.matmul_size, torch.float32)
    mm16 = matmul_gflops(dev, a.matmul_size, torch.bfloat16)
    print(f"matrix product {a.matmul_size}^3: fp32 {mm:.1f} GFLOP/s, bf16 {mm16:.1f} GFLOP/s", flush=True)

    def plan_fit(name):
        """(hp, data, optimiser steps of the timed fit, full-epoch seconds from its log rows)."""
        hp = dict(hps[name])
        batch = int(hp["batch_size"])
        per_epoch = math.ceil(full.n_triplets / batch)  # steps of one full triplet epoch
        corpus_steps = math.ceil(full.docs.shape[0] / batch)
        if hp["__type"] == "autoencoder":  # its items are corpus rows: a full epoch is the corpus
            hp["epochs"] = 1
            n = min(a.steps * batch, full.docs.shape[0])
            steps = math.ceil(n / batch)
            return hp, corpus_subset(full, n), steps, lambda rows: rows[0]["seconds"] / steps * corpus_steps
        part = subset(full, a.steps * batch)
        if hp.get("schedule") == "two_stage":  # one corpus epoch, one triplet epoch: it trains half each
            hp["epochs"] = 2
            return (hp, part, corpus_steps + a.steps,
                    lambda rows: (rows[0]["seconds"] + rows[1]["seconds"] / a.steps * per_epoch) / 2)
        if hp["__type"] == "smec":  # one epoch per stage; a full epoch = the mean stage epoch
            from dive_core.methods.smec import stage_widths
            hp["epochs"] = len(stage_widths(emb.dim, a.k)) - 1
            return (hp, part, hp["epochs"] * a.steps,
                    lambda rows: statistics.mean(r["seconds"] for r in rows) / a.steps * per_epoch)
        hp["epochs"] = 1
        return hp, part, a.steps, lambda rows: rows[0]["seconds"] / a.steps * per_epoch

    fits = {name: plan_fit(name) for name in a.methods}

    def run(name):
        """(fit seconds, seconds inside its epochs, full-epoch seconds)."""
        hp, data, _, epoch_seconds = fits[name]
        m = new(name, hp, emb.dim, a.k, a.seed, dev, a.precision)
        log = TrainLog()
        sync(dev)
        t0 = time.perf_counter()
        m.fit(data, log, progress=False)
        sync(dev)
        return time.perf_counter() - t0, sum(r["seconds"] for r in log.rows), epoch_seconds(log.rows)

    flops = {}
    for name in a.methods:  # warm-up (discarded), with the FLOP count
        hp, data, steps, _ = fits[name]
        m = new(name, hp, emb.dim, a.k, a.seed, dev, a.precision)
        with FlopCounterMode(display=False) as fc:
            m.fit(data, TrainLog(), progress=False)
        flops[name] = fc.get_total_flops()
    runs = {n: [] for n in a.methods}
    for r in range(a.repeats):
        for name in a.methods:
            runs[name].append(run(name))
    out = {}
    for name in a.methods:
        steps = fits[name][2]
        fit_s = statistics.median(t for t, _, _ in runs[name])
        in_epochs = [e for _, e, _ in runs[name]]
        rate = flops[name] / fit_s / 1e9  # over the whole fit, set-up included
        out[name] = {"seconds_per_step": statistics.median(in_epochs) / steps,
                     "seconds_per_epoch": statistics.median(x for _, _, x in runs[name]),
                     "setup_seconds": statistics.median(t - e for t, e, _ in runs[name]),
                     "gflops_per_step": flops[name] / steps / 1e9, "gflops_per_s": rate, "flop_rate_ratio": rate / mm,
                     "spread": [min(in_epochs) / steps, max(in_epochs) / steps]}
    print(f"{'method':<16}{'ms/step':>9}{'s/epoch':>9}{'vs dive':>9}{'set-up s':>10}{'GFLOP/step':>12}"
          f"{'GFLOP/s':>9}{'of matmul':>10}")
    for name, o in out.items():
        rel = f"{o['seconds_per_epoch'] / out['dive']['seconds_per_epoch']:.2f}" if "dive" in out else "-"
        print(f"{name:<16}{1000 * o['seconds_per_step']:>9.2f}{o['seconds_per_epoch']:>9.2f}{rel:>9}"
              f"{o['setup_seconds']:>10.2f}{o['gflops_per_step']:>12.3f}{o['gflops_per_s']:>9.1f}"
              f"{o['flop_rate_ratio']:>10.2f}")
    dive = out.get("dive", {})
    print(json.dumps({
        **{k: header[k] for k in ("device", "gpu_name", "cpu", "threads", "torch", "git_commit", "precision", "mkl")},
        "matmul_gflops": mm, "matmul_gflops_bf16": mm16,
        "train_step_gflops": dive.get("gflops_per_step"), "flop_rate_ratio": dive.get("flop_rate_ratio"),
        "seconds_per_step": {n: o["seconds_per_step"] for n, o in out.items()},
        "seconds_per_epoch": {n: o["seconds_per_epoch"] for n, o in out.items()},
        "gflops_per_step": {n: o["gflops_per_step"] for n, o in out.items()},
        "flop_rate_ratios": {n: o["flop_rate_ratio"] for n, o in out.items()},
        "steps": a.steps, "repeats": a.repeats,
    }))


if __name__ == "__main__":
    main()
