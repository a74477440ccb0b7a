"""The training step on a device: the plain step (every kernel launched from Python) against the
step replayed from a CUDA graph (``dive_core.training.CapturedStep``), in one process, at the
workflow's shape and at the paper's. Run from the repository root:

    python benchmarks/captured_step.py --device cuda [--out FILE.json] [--profile-dir DIR]
    python benchmarks/captured_step.py --device cpu --shapes 384:64 --steps 60

For each shape ``d:k`` (DIVE, H = 4 heads, hidden 2048, batches of 128, generated normalised
vectors of SciFact's corpus size; the numbers do not depend on the values) it reports:

- ``ms_per_step``: a 2-epoch fit of ``--steps`` optimiser steps per epoch through the workflow's
  own loop (``DIVE.fit`` -> ``run_epochs``), the second epoch's seconds / steps (the graph is
  recorded in the first), median of ``--repeats`` fits, plain and graph;
- ``gflop_per_step`` (PyTorch's ``FlopCounterMode`` over plain steps) and ``share`` = the step's
  FLOP rate / the device's fp32 matrix-product rate (``--matmul-size``^3, median of 7);
- the weights of a ``--hash-epochs``-epoch fit, plain and graph: their ``state_sha256`` and the
  largest absolute difference;
- with ``--fits N`` (N > 1): N fits of N seeds trained together in one process
  (``TorchMethod.fit_together``: stacked parameters, one vmapped step for all), plain and graph:
  ``ms_per_step`` for all N, ``per_fit_ms`` and ``speedup_vs_alone`` = N x the single fit's
  ms / the N fits' ms; and the largest absolute difference of each fit's weights from the same fit
  trained alone (``--hash-epochs`` epochs);
- with ``--profile-dir``: ``torch.profiler`` over ``--profile-steps`` steady-state steps of each, its
  top entries by device time and the number of kernel launches, graph launches and host
  synchronisations per step (``profile_<d>x<k>_<mode>.txt``).

With ``--compile`` DIVE's step is also timed with its ``batch_loss`` compiled by TorchInductor
(``dive_core.training.compiled_loss``, issue 63 item 2): ``compiled`` (fused kernels launched from
Python) and, on a GPU, ``graph_compiled`` (the fused kernels recorded in the CUDA graph), the warm-up
fit paying the compilation (``warmup_fit_s`` of each mode: the discarded fit's seconds, compilation
included; Inductor's cache, ``TORCHINDUCTOR_CACHE_DIR``, shortens it in later processes);
``speedup_compiled`` / ``speedup_graph_compiled`` = plain ms / their ms;
``compiled_weights``: each one's weights after ``--hash-epochs`` epochs against the plain fit's
(largest absolute difference: fusion reorders floating-point operations, so a tolerance, not bytes),
beside the scale such a difference grows to: the plain fit against itself trained on documents
multiplied by (1 + 1e-7 N(0, 1)), last-bit changes (``plain_docs_perturbed_max_abs_diff``).

With ``--method mrl smec search_adaptor`` (and ``dive``, the default) the other methods' steps are
timed too (config/config.yaml's hyperparameters, the same generated data): ``ms_per_step`` of each
training phase (MRL's two stages, SMEC's stages) from its last epoch of a fit of two epochs per phase,
median of ``--repeats`` fits after a discarded one, plain and graph; on a GPU also the weights of the
plain and the replayed fit (``methods`` in the JSON). ``--reference`` adds, for MRL and SMEC, the
step their fixed-shape rewrite replaced (tests/plain_steps_reference.py), its fits alternating with the
new step's in the same process (``alternating``): on a shared machine a fairer before/after than two
processes run one after the other.

On the CPU the graph does not apply (``run_epochs`` ignores ``cuda_graph`` there): ``--device cpu``
times the plain loop, which is how the CPU step is compared before and after a change (run it from
each checkout's root). The last line printed is the whole JSON (also written to ``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the checkout in the working directory first
    sys.path.insert(0, str(Path.cwd()))

import torch  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

import dive_core  # noqa: E402,F401  (MKL's reproducible mode, cuBLAS's workspace)
from dive_core.methods import new_method  # noqa: E402
from dive_core.methods.dive import DIVE  # noqa: E402
from dive_core.training import FitData, TrainLog  # noqa: E402
from benchmarks.device_check import matmul_gflops, sync  # noqa: E402  (the same roofline as device_check)

DOCS, QUERIES = 5183, 809  # SciFact's corpus and training queries


def generated(d: int, triplets: int, device: str) -> FitData:
    g = torch.Generator().manual_seed(0)
    docs = torch.nn.functional.normalize(torch.randn(DOCS, d, generator=g), dim=-1)
    queries = torch.nn.functional.normalize(torch.randn(QUERIES, d, generator=g), dim=-1)
    tq = torch.randint(0, QUERIES, (triplets,), generator=g)
    tp, tn = (torch.randint(0, DOCS, (triplets,), generator=g) for _ in range(2))
    ones = torch.ones(triplets)
    return FitData.from_arrays(docs, queries, tq, tp, tn, ones, 0 * ones, device)


def hparams(epochs: int, batch: int) -> dict:
    """config/config.yaml's DIVE hyperparameters (the benchmark's epochs)."""
    return dict(margin=0.7, lambda_view=0.01, gamma_geo=10.0, tau=0.1, heads=4, triplet_loss="hinge",
                lr=2e-4, epochs=epochs, batch_size=batch, hidden=2048, weight_decay=0.01)


METHODS = ("dive", "mrl", "smec", "search_adaptor")


def method_hparams(method: str, epochs: int, batch: int) -> dict:
    """config/config.yaml's hyperparameters of ``method`` (DIVE's written out in :func:`hparams`),
    with the benchmark's epochs and batch size."""
    if method == "dive":
        return hparams(epochs, batch)
    from dive_core import config as dcfg
    from dive_core import plan

    cfg = dcfg.load_yaml(Path.cwd() / "config" / "config.yaml")
    return dict(plan.method_hparams(cfg, method), epochs=epochs, batch_size=batch)


def fit_epochs(method: str, d: int, k: int) -> int:
    """Epochs of a timing fit: two per training phase (MRL: the unsupervised and the supervised
    stage; SMEC: each of its stages), so that every phase has an epoch after its first."""
    if method == "mrl":
        return 4
    if method == "smec":
        from dive_core.methods.specs import stage_widths

        return 2 * (len(stage_widths(d, k)) - 1)
    return 2


def phase_ms(method: str, rows: list[dict], steps: int, batch: int) -> dict[str, float]:
    """ms per step of each training phase, from its last epoch (MRL's unsupervised stage runs over
    the documents: DOCS / batch steps)."""
    last = {r["phase"]: r["seconds"] for r in rows}
    return {ph: 1000 * sec / (-(-DOCS // batch) if ph == "unsupervised" else steps) for ph, sec in last.items()}


def reference_class(method: str):
    """The class training ``method`` with the step its fixed-shape rewrite replaced (issue 63 item 1;
    kept in tests/plain_steps_reference.py), or None."""
    sys.path.insert(0, str(Path.cwd() / "tests"))
    import plain_steps_reference as ref

    return {"mrl": ref.PlainMRL, "smec": ref.PlainSMEC}.get(method)


def fit(d: int, k: int, data: FitData, epochs: int, batch: int, device: str, graph: bool, method: str = "dive",
        cls=None, compiled: bool = False):
    """A fit of ``method`` through the workflow's loop, the graph on or off, its ``batch_loss`` compiled
    or not (``TorchMethod.compile_step``; ``cls``: a class to train instead of the registered one, e.g.
    :func:`reference_class`); (method, log rows, seconds)."""
    from dive_core.methods.base import method_class
    from dive_core.training import set_seed

    make = cls
    cls = cls or method_class(method)
    flags = {"cuda_graph": graph, "compile_step": compiled}
    was = {name: cls.__dict__.get(name) for name in flags}  # the class's own settings, restored after
    for name, value in flags.items():
        setattr(cls, name, value)
    try:
        hp = method_hparams(method, epochs, batch)
        if make is None:
            m = new_method(method, d, k, hp, 2027, device=device)
        else:
            set_seed(2027)
            m = make(d, k, hp, 2027, device)
        log = TrainLog()
        sync(device)
        t0 = time.perf_counter()
        m.fit(data, log, progress=False)
        sync(device)
        return m, log.rows, time.perf_counter() - t0
    finally:
        for name, value in was.items():
            if value is None:
                delattr(cls, name)
            else:
                setattr(cls, name, value)


def max_abs_diff(a: dict, b: dict) -> float:
    """The largest absolute difference between two state dicts' tensors."""
    return max(float((a[n].double() - b[n].double()).abs().max()) for n in a)


def fit_many(d: int, k: int, data: FitData, epochs: int, batch: int, device: str, graph: bool, fits: int):
    """``fits`` DIVE fits (seeds 2027, 2028, ...) trained together through ``fit_together``; (methods,
    their logs' rows, seconds)."""
    from dive_core.methods.base import TorchMethod

    DIVE.cuda_graph = graph
    try:
        ms = [new_method("dive", d, k, hparams(epochs, batch), 2027 + i, device=device) for i in range(fits)]
        logs = [TrainLog() for _ in ms]
        sync(device)
        t0 = time.perf_counter()
        TorchMethod.fit_together(ms, data, logs, progress=False)
        sync(device)
        return ms, [log.rows for log in logs], time.perf_counter() - t0
    finally:
        DIVE.cuda_graph = True


def step_flops(d: int, k: int, data: FitData, batch: int, device: str, steps: int = 4) -> float:
    m = new_method("dive", d, k, hparams(1, batch), 0, device=device)
    opt = torch.optim.AdamW(m.net.parameters(), lr=2e-4, weight_decay=0.01, fused=True)
    with FlopCounterMode(display=False) as fc:
        for s in range(steps):
            out = m.batch_loss(data, torch.arange(s * batch, (s + 1) * batch, device=device) % data.n_triplets)
            opt.zero_grad(set_to_none=True)
            out["loss"].backward()
            opt.step()
    return fc.get_total_flops() / steps


def profile(d: int, k: int, batch: int, device: str, steps: int, graph: bool, path: Path | None) -> dict:
    """torch.profiler over the second epoch of a 2-epoch fit of ``steps`` steps per epoch (steady
    state: the graph, if any, was recorded in the first)."""
    from torch.profiler import ProfilerActivity, profile as prof

    data = generated(d, steps * batch, device)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.device(device).type == "cuda" else [])
    p = prof(activities=acts)

    def on_epoch(row):  # the loop has read the epoch's sums: the device is idle here
        (p.start if row["epoch"] == 1 else p.stop)()

    DIVE.cuda_graph = graph
    try:
        m = new_method("dive", d, k, hparams(2, batch), 2027, device=device)
        m.fit(data, TrainLog(on_epoch=on_epoch), progress=False)
    finally:
        DIVE.cuda_graph = True
    ev = p.key_averages()
    counts = {e.key: e.count for e in ev}
    per = lambda *names: sum(counts.get(n, 0) for n in names) / steps  # noqa: E731
    sort = "self_cuda_time_total" if torch.device(device).type == "cuda" else "self_cpu_time_total"
    table = ev.table(sort_by=sort, row_limit=15, max_name_column_width=60)
    if path is not None:
        path.write_text(table)
    return {"kernel_launches_per_step": per("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel",
                                            "cuLaunchKernelEx"),
            "graph_launches_per_step": per("cudaGraphLaunch"),
            "host_syncs_per_step": per("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize"),
            "memcpy_per_step": per("cudaMemcpyAsync", "cudaMemcpy"),
            "top": table.splitlines()[:20]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--shapes", nargs="+", default=["384:64", "4096:128"], help="d:k pairs")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=200, help="optimiser steps per timed epoch")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--hash-epochs", type=int, default=5)
    ap.add_argument("--matmul-size", type=int, default=4096)
    ap.add_argument("--profile-dir", default=None)
    ap.add_argument("--profile-steps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--fits", type=int, default=1, help="also time this many fits trained together (> 1)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--method", nargs="+", default=["dive"], choices=METHODS,
                    help="time these methods' steps (DIVE: also FLOPs, profile, fits together)")
    ap.add_argument("--compile", action="store_true",
                    help="DIVE: also time its step with batch_loss compiled by TorchInductor (dive_core.training."
                         "compiled_loss), alone and, on a GPU, recorded in the graph; weights against the plain fit")
    ap.add_argument("--reference", action="store_true",
                    help="MRL, SMEC: also time the step their fixed-shape rewrite replaced "
                         "(tests/plain_steps_reference.py), its fits alternating with the new step's, in this process")
    a = ap.parse_args(argv)
    others = [mt for mt in a.method if mt != "dive"]
    torch.set_num_threads(a.threads)
    dev = a.device
    cuda = torch.device(dev).type == "cuda"
    from dive_core.efficiency import cpu_model

    # the deterministic mode is set by each fit (new_method -> set_seed), so it is not read here
    head = {"device": dev, "gpu": torch.cuda.get_device_name(0) if cuda else None, "torch": torch.__version__,
            "cuda": torch.version.cuda, "cpu": cpu_model(), "threads": torch.get_num_threads(),
            "mkl_cbwr": os.environ.get("MKL_CBWR")}
    print(json.dumps(head), flush=True)
    mm = matmul_gflops(dev, a.matmul_size, torch.float32)
    out = {"header": head, "matmul_gflops_fp32": mm, "shapes": {}, "methods": {}}
    print(f"fp32 matrix product {a.matmul_size}^3: {mm:.1f} GFLOP/s", flush=True)
    modes = [False, True] if cuda else [False]
    for shape in a.shapes:  # the other methods: ms per step of each phase, plain and graph, and weights
        d, k = (int(x) for x in shape.split(":"))
        data = generated(d, a.steps * a.batch, dev)
        for mt in others:
            epochs = fit_epochs(mt, d, k)
            res = {}
            alternating = a.reference and reference_class(mt) is not None
            # on the CPU the alternating fits below time the plain step already
            for graph in ([] if alternating and not cuda else modes):
                name = "graph" if graph else "plain"
                fit(d, k, data, epochs, a.batch, dev, graph, mt)  # warm-up fit, discarded
                runs = [phase_ms(mt, fit(d, k, data, epochs, a.batch, dev, graph, mt)[1], a.steps, a.batch)
                        for _ in range(a.repeats)]
                res[name] = {ph: {"ms_per_step": statistics.median(r[ph] for r in runs),
                                  "spread_ms": [min(r[ph] for r in runs), max(r[ph] for r in runs)]} for ph in runs[0]}
                print(f"{mt} {d}->{k} {name}: " + ", ".join(f"{ph} {v['ms_per_step']:.2f} ms/step"
                                                           for ph, v in res[name].items()), flush=True)
            if cuda:  # the weights of the plain and the replayed fit (SciFact's 88 steps per epoch)
                hdata = generated(d, 88 * a.batch, dev)
                mp = fit(d, k, hdata, epochs, a.batch, dev, False, mt)[0]
                mg = fit(d, k, hdata, epochs, a.batch, dev, True, mt)[0]
                sp, sg = mp.state_dict(), mg.state_dict()
                res["weights"] = {"plain_sha256": mp.state_sha256(), "graph_sha256": mg.state_sha256(),
                                  "max_abs_diff": max(float((sp[n].double() - sg[n].double()).abs().max()) for n in sp),
                                  "epochs": epochs, "steps_per_epoch": 88}
                print(f"{mt} {d}->{k} weights: plain {res['weights']['plain_sha256'][:12]} graph "
                      f"{res['weights']['graph_sha256'][:12]} max |diff| {res['weights']['max_abs_diff']:.3g}", flush=True)
            if alternating:  # the replaced step, fits alternating with the new one
                variants = {"fixed_shape": None, "replaced": reference_class(mt)}
                for cls in variants.values():
                    fit(d, k, data, epochs, a.batch, dev, False, mt, cls)  # warm-up fits, discarded
                runs = {v: [] for v in variants}
                for _ in range(a.repeats):
                    for v, cls in variants.items():
                        runs[v].append(phase_ms(mt, fit(d, k, data, epochs, a.batch, dev, False, mt, cls)[1], a.steps,
                                                a.batch))
                res["alternating"] = {v: {ph: {"ms_per_step": statistics.median(r[ph] for r in rs),
                                               "all_ms": [round(r[ph], 2) for r in rs]} for ph in rs[0]}
                                      for v, rs in runs.items()}
                for v, per in res["alternating"].items():
                    print(f"{mt} {d}->{k} {v} (alternating): " + ", ".join(
                        f"{ph} {x['ms_per_step']:.2f} ms/step {x['all_ms']}" for ph, x in per.items()), flush=True)
            out["methods"].setdefault(mt, {})[shape] = res
            if a.out:
                Path(a.out).write_text(json.dumps(out, indent=1))
    # DIVE's modes: (name, graph, compiled)
    dive_modes = [("graph" if g else "plain", g, False) for g in modes]
    if a.compile:
        dive_modes += [("graph_compiled" if g else "compiled", g, True) for g in modes]
    for shape in (a.shapes if "dive" in a.method else []):
        d, k = (int(x) for x in shape.split(":"))
        data = generated(d, a.steps * a.batch, dev)
        flops = step_flops(d, k, data, a.batch, dev)
        res = {"gflop_per_step": flops / 1e9}
        for name, graph, compiled in dive_modes:
            warm_s = fit(d, k, data, 2, a.batch, dev, graph, compiled=compiled)[2]  # warm-up fit (and compilation)
            secs = [fit(d, k, data, 2, a.batch, dev, graph, compiled=compiled)[1][1]["seconds"] / a.steps
                    for _ in range(a.repeats)]
            ms = 1000 * statistics.median(secs)
            res[name] = {"ms_per_step": ms, "spread_ms": [1000 * min(secs), 1000 * max(secs)], "warmup_fit_s": warm_s,
                         "gflop_per_s": flops / (ms / 1000) / 1e9, "share": flops / (ms / 1000) / 1e9 / mm}
            print(f"{d}->{k} {name}: {ms:.3f} ms/step, {res[name]['gflop_per_s']:.0f} GFLOP/s, "
                  f"{res[name]['share']:.3f} of the product rate; warm-up fit {warm_s:.1f} s", flush=True)
            if a.fits > 1 and not compiled:
                fit_many(d, k, data, 2, a.batch, dev, graph, a.fits)  # warm-up, discarded
                secs = [fit_many(d, k, data, 2, a.batch, dev, graph, a.fits)[1][0][1]["seconds"] / a.steps
                        for _ in range(a.repeats)]
                many = 1000 * statistics.median(secs)
                res[name]["together"] = {"fits": a.fits, "ms_per_step": many, "per_fit_ms": many / a.fits,
                                         "speedup_vs_alone": a.fits * ms / many,
                                         "share": a.fits * flops / (many / 1000) / 1e9 / mm}
                print(f"{d}->{k} {name}, {a.fits} fits together: {many:.3f} ms/step ({many / a.fits:.3f} per fit, "
                      f"{a.fits * ms / many:.2f}x the fits alone), {res[name]['together']['share']:.3f} of the "
                      "product rate", flush=True)
            if a.profile_dir and not compiled:
                pdir = Path(a.profile_dir)
                pdir.mkdir(parents=True, exist_ok=True)
                res[name]["profile"] = profile(d, k, a.batch, dev, a.profile_steps, graph,
                                               pdir / f"profile_{d}x{k}_{name}.txt")
        if cuda or a.compile:  # one plain fit that the graph's and the compiled fits' weights are held against
            hdata = generated(d, 88 * a.batch, dev)  # SciFact's steps per epoch
            mp = fit(d, k, hdata, a.hash_epochs, a.batch, dev, False)[0]
            sp = mp.state_dict()
        if cuda:
            res["speedup"] = res["plain"]["ms_per_step"] / res["graph"]["ms_per_step"]
            mg = fit(d, k, hdata, a.hash_epochs, a.batch, dev, True)[0]
            res["weights"] = {"plain_sha256": mp.state_sha256(), "graph_sha256": mg.state_sha256(),
                              "max_abs_diff": max_abs_diff(sp, mg.state_dict()),
                              "epochs": a.hash_epochs, "steps_per_epoch": 88}
            print(f"{d}->{k} weights after {a.hash_epochs} epochs: plain {res['weights']['plain_sha256'][:12]} "
                  f"graph {res['weights']['graph_sha256'][:12]} max |diff| {res['weights']['max_abs_diff']:.3g}",
                  flush=True)
        if a.compile:  # the compiled step's weights against the plain fit's (a tolerance, not bit-equal)
            res["compiled_weights"] = {"epochs": a.hash_epochs, "steps_per_epoch": 88, "plain_sha256": mp.state_sha256()}
            # the scale to read them against: the plain fit itself, its documents moved in the last bits
            noisy = generated(d, 88 * a.batch, dev)
            g = torch.Generator().manual_seed(1)
            noisy.docs.mul_(1 + 1e-7 * torch.randn(noisy.docs.shape, generator=g).to(dev))
            sn = fit(d, k, noisy, a.hash_epochs, a.batch, dev, False)[0].state_dict()
            res["compiled_weights"]["plain_docs_perturbed_max_abs_diff"] = max_abs_diff(sp, sn)
            print(f"{d}->{k} weights after {a.hash_epochs} epochs: plain with documents x (1 + 1e-7 N(0,1)), max |diff| "
                  f"from plain {res['compiled_weights']['plain_docs_perturbed_max_abs_diff']:.3g}", flush=True)
            for name, graph, compiled in dive_modes:
                if compiled:
                    mc = fit(d, k, hdata, a.hash_epochs, a.batch, dev, graph, compiled=True)[0]
                    diff = max_abs_diff(sp, mc.state_dict())
                    res["compiled_weights"][name] = {"sha256": mc.state_sha256(), "max_abs_diff_vs_plain": diff}
                    print(f"{d}->{k} weights after {a.hash_epochs} epochs: {name} {mc.state_sha256()[:12]}, max |diff| "
                          f"from plain {diff:.3g}", flush=True)
            for name in ("compiled", "graph_compiled"):
                if name in res:
                    res[f"speedup_{name}"] = res["plain"]["ms_per_step"] / res[name]["ms_per_step"]
        if a.fits > 1:  # each fit trained together against the same fit alone
            hdata = generated(d, 88 * a.batch, dev)
            together = fit_many(d, k, hdata, a.hash_epochs, a.batch, dev, cuda, a.fits)[0]
            worst = 0.0
            for i, t in enumerate(together):
                alone = new_method("dive", d, k, hparams(a.hash_epochs, a.batch), 2027 + i, device=dev)
                alone.fit(hdata, TrainLog(), progress=False)
                sa, st = alone.state_dict(), t.state_dict()
                worst = max(worst, max(float((sa[n] - st[n]).abs().max()) for n in sa))
            res["together_weights"] = {"fits": a.fits, "max_abs_diff_vs_alone": worst, "epochs": a.hash_epochs}
            print(f"{d}->{k} {a.fits} fits together vs alone after {a.hash_epochs} epochs: max |diff| {worst:.3g}",
                  flush=True)
        out["shapes"][shape] = res
        if a.out:
            Path(a.out).write_text(json.dumps(out, indent=1))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
