"""Training speed of every trained method on the real triplets, against DIVE and against a bare
PyTorch loop of DIVE's math, all measured in one run (run from the repository root):

    .venv/bin/python -m benchmarks.train_methods [--dataset scifact] [--stage final] [--steps 60]
                                                 [--repeats 5] [--threads 2]

It reads the workflow's own artifacts (build them first, e.g.
``snakemake --cores 2 results/scifact/minilm/triplets/final-random.tsv``): the frozen embeddings,
the split and the shared triplets of ``--stage``. Every method trains with its configured
hyperparameters (``config/config.yaml``) on the same seeded subset of ``--steps`` batches of
triplets; SMEC runs one epoch per stage on that subset, so its figure is the mean over its
stages; Matryoshka-Adaptor's two-stage schedule runs one unsupervised epoch over the corpus and
one supervised epoch over the subset, and its figure is their mean (it trains half its epochs
each way). The autoencoder trains on the corpus, not on triplets: its epoch is one pass over the
corpus. Reported: median seconds per full epoch over ``--repeats`` runs (after one discarded
warm-up run of each method, methods interleaved in each repeat), the ratio to DIVE and DIVE's
ratio to the bare loop (both paired: the median over repeats of the ratio within a repeat) (`bare_dive_fit`, the same math and initialisation in plain PyTorch; the
script also prints how far the two end up apart in weights). Thread count, CPU model and
versions are printed first. Timings are wall clock: keep the machine otherwise idle.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from dive_core import config as dcfg
from dive_core import plan, provenance, records, splits
from dive_core.provenance import cpu_model
from dive_core.embeddings import read_embeddings
from dive_core.methods import new_method
from dive_core.training import FitData, TrainLog, fit_data, set_seed

METHODS = ("dive", "mrl", "search_adaptor", "smec", "autoencoder")


def subset(data: FitData, n: int, seed: int = 0) -> FitData:
    """The same ``n`` triplets (a seeded random subset) for every method."""
    idx = torch.randperm(data.n_triplets, generator=torch.Generator().manual_seed(seed))[:n]
    return FitData(data.docs, data.queries, data.t_q[idx], data.t_p[idx], data.t_n[idx],
                   data.y_p[idx], data.y_n[idx])


def bare_dive_fit(data: FitData, d: int, k: int, hp: dict, seed: int) -> nn.Module:
    """DIVE's objective and optimiser written as a plain loop: the reference its step is held to.
    Same initialisation order and shuffling generator as the method, so the weights agree."""
    set_seed(seed)
    up, down = nn.Linear(d, int(hp["hidden"])), nn.Linear(int(hp["hidden"]), d)
    nn.init.zeros_(down.weight)
    nn.init.zeros_(down.bias)
    params = list(up.parameters()) + list(down.parameters())
    opt = torch.optim.AdamW(params, lr=float(hp["lr"]), weight_decay=float(hp["weight_decay"]))
    H, m, tau = int(hp["heads"]), float(hp["margin"]), float(hp["tau"])
    lam, gam, B = float(hp["lambda_view"]), float(hp["gamma_geo"]), int(hp["batch_size"])
    gen = torch.Generator().manual_seed(seed)
    for _ in range(int(hp["epochs"])):
        for idx in torch.randperm(data.n_triplets, generator=gen).split(B):
            x = torch.cat([data.queries[data.t_q[idx]], data.docs[data.t_p[idx]], data.docs[data.t_n[idx]]])
            zt = x + down(F.relu(up(x)))
            h = F.normalize(zt[:, : k * H].reshape(-1, H, k), dim=-1)
            hq, hp_, hn = h.chunk(3)
            delta = (hq[:, 0] * hp_[:, 0]).sum(-1) - (hq[:, 0] * hn[:, 0]).sum(-1)
            loss = F.relu(m - delta).mean()
            view = 0.0
            for part in (hq, hp_, hn):
                b = part.shape[0]
                flat = part.reshape(b * H, k)
                eye = torch.eye(b * H, dtype=torch.bool)
                logp = torch.log_softmax((flat @ flat.T / tau).masked_fill(eye, float("-inf")), dim=1)
                owner = torch.arange(b).repeat_interleave(H)
                pos = (owner[:, None] == owner[None, :]) & ~eye
                view = view + (-(logp.masked_fill(~pos, 0.0).sum(1)) / (H - 1)).mean() / 3
            s = h[:, 0]
            off = ~torch.eye(s.shape[0], dtype=torch.bool)
            geo = F.smooth_l1_loss((s @ s.T)[off], (x @ x.T)[off])
            loss = loss + lam * view + gam * geo
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return nn.ModuleDict({"up": up, "down": down})


def time_method(hp: dict, data: FitData, d: int, k: int, seed: int):
    """Seconds for one ``fit``, the fitted method and its per-epoch log."""
    m = new_method(hp["__type"], d, k, {h: v for h, v in hp.items() if h != "__type"}, seed)
    log = TrainLog()
    t0 = time.perf_counter()
    m.fit(data, log, progress=False)
    return time.perf_counter() - t0, m, log


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--dataset", default="scifact")
    ap.add_argument("--backbone", default="minilm")
    ap.add_argument("--stage", default="final", choices=("select", "final"))
    ap.add_argument("--k", type=int, default=64)
    ap.add_argument("--steps", type=int, default=60, help="batches of triplets per timed epoch")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=2027)
    ap.add_argument("--methods", nargs="+", default=list(METHODS))
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    config = dcfg.load_yaml(a.config)
    res = f"results/{a.dataset}/{a.backbone}"
    emb = read_embeddings(f"{res}/embeddings.h5")
    manifest = records.read("splits", f"results/{a.dataset}/splits.json")
    full = fit_data(emb, splits.train_queries(manifest, a.stage), f"{res}/triplets/{a.stage}-random.tsv")
    corpus = fit_data(emb, splits.train_queries(manifest, a.stage))
    hps = {}
    for name in a.methods:
        hp = plan.method_hparams(config, name)
        hp["__type"] = plan.method_type(config, name)
        hps[name] = hp
    batch = int(hps["dive"]["batch_size"]) if "dive" in hps else 128
    part = subset(full, a.steps * batch)
    print(json.dumps({"cpu": cpu_model(), "threads": torch.get_num_threads(), "torch": torch.__version__,
                      "git_commit": provenance.git_commit("."), "dataset": a.dataset, "stage": a.stage,
                      "triplets_per_epoch": full.n_triplets, "timed_triplets": part.n_triplets,
                      "corpus_docs": int(corpus.docs.shape[0]), "k": a.k}))

    def run(name):
        hp = dict(hps[name])
        if hp["__type"] == "autoencoder":  # one pass over the corpus
            hp["epochs"] = 1
            secs, _, _ = time_method(hp, corpus, emb.dim, a.k, a.seed)
            return secs, None
        if hp.get("schedule") == "two_stage":  # one corpus epoch, then one triplet epoch
            hp["epochs"] = 2
            _, m, log = time_method(hp, part, emb.dim, a.k, a.seed)
            unsup, sup = (r["seconds"] for r in log.rows)  # as trained: half the epochs each
            return (unsup + sup * full.n_triplets / part.n_triplets) / 2, m
        if hp["__type"] == "smec":  # one epoch per stage over the subset
            from dive_core.methods.smec import stage_widths
            hp["epochs"] = len(stage_widths(emb.dim, a.k)) - 1
        else:
            hp["epochs"] = 1
        secs, m, _ = time_method(hp, part, emb.dim, a.k, a.seed)
        return secs / hp["epochs"] * full.n_triplets / part.n_triplets, m

    def run_bare():
        hp = dict(hps["dive"], epochs=1)
        t0 = time.perf_counter()
        net = bare_dive_fit(part, emb.dim, a.k, hp, a.seed)
        return (time.perf_counter() - t0) * full.n_triplets / part.n_triplets, net

    names = list(a.methods) + (["bare_dive_loop"] if "dive" in a.methods else [])
    for name in names:  # warm-up, discarded
        (run_bare() if name == "bare_dive_loop" else run(name))
    times = {n: [] for n in names}
    models = {}
    for _ in range(a.repeats):
        for name in names:
            secs, model = run_bare() if name == "bare_dive_loop" else run(name)
            times[name].append(secs)
            models[name] = model
    med = {n: statistics.median(t) for n, t in times.items()}
    # ratios are paired: each repeat's time over DIVE's time in the same repeat, then the median
    ratio = ({n: statistics.median(a / b for a, b in zip(times[n], times["dive"])) for n in names}
             if "dive" in times else {})
    print(f"{'method':<16}{'s/epoch (median)':>18}{'min':>9}{'max':>9}{'ratio to dive':>15}")
    for n in names:
        r = f"{ratio[n]:.3f}" if ratio else "-"
        print(f"{n:<16}{med[n]:>18.2f}{min(times[n]):>9.2f}{max(times[n]):>9.2f}{r:>15}")
    if "dive" in models and "bare_dive_loop" in models:
        dive_sd = models["dive"].net["adapter"].state_dict()
        bare = models["bare_dive_loop"]
        diff = max(float((dive_sd[f"{mod}.{w}"] - getattr(bare[mod], w)).detach().abs().max())
                   for mod in ("up", "down") for w in ("weight", "bias"))
        print(f"DIVE step vs bare loop: {1 / ratio['bare_dive_loop']:.3f}x (goal <= 1.10); "
              f"max |weight difference| after the same steps: {diff:.2e}")
    print(json.dumps({"seconds_per_epoch_median": med, "paired_ratio_to_dive": ratio or None,
                      "repeats": a.repeats, "note": "autoencoder epoch = one pass over the corpus"}))


if __name__ == "__main__":
    main()
