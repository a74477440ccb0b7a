"""Which MKL reproducibility mode to run in: the same bytes across processes, and what each mode
costs. Run from the repository root on an otherwise idle machine:

    .venv/bin/python benchmarks/reproducibility.py [--processes 12] [--repeats 5] [--threads 2]
                     [--old PATH]   # a checkout from before dive_core set a mode (git worktree)

For each mode - ``default`` (MKL's own: no conditional numerical reproducibility), ``AUTO,STRICT``
(the workflow's, dive_core/numerics.py) and ``COMPATIBLE`` (one SSE2 branch on every x86 CPU) -
in fresh processes, modes interleaved:

- ``same bytes``: tests/retrain_probe.py (the CI smoke run's DIVE training) in ``--processes``
  fresh processes; the number of distinct weights hashes and of compressed-corpus hashes
  (1 = reproducible). This checkout always sets a mode, so the ``default`` row of this column
  needs ``--old``, a checkout from before the fix, where the probe runs in MKL's default mode
  (the failure rate of the old code).
- ``matmul``: fp32 2048^3 products, GFLOP/s, median of 7 after warm-up (device_check's measure).
- ``DIVE step``: one optimisation step at the paper's shape (benchmarks/train_step.py's
  ``dive_step``: d 384, k 64, 4 heads, hidden 2048, batch 128), median ms over 30 after 5
  warm-ups; its FLOPs counted by PyTorch's FlopCounterMode, and its FLOP rate as a fraction of
  the same process's matmul rate.

Speed figures are medians over ``--repeats`` fresh processes per mode. The CPU, its flags, the
threads and the mode MKL reports (read from MKL, not from the environment) are printed first;
the last line is one JSON object. Compare figures only within one run on one machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODES = ("default", "AUTO,STRICT", "COMPATIBLE")


def child_speed(mode: str, threads: int) -> None:
    """In a fresh process: matmul rate and DIVE step time in ``mode``; one JSON line."""
    import torch

    if mode == "default":  # MKL computes before dive_core can set a mode: MKL's own default stays
        torch.ones(2, 2) @ torch.ones(2, 2)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        import dive_core  # noqa: F401
    from torch.utils.flop_counter import FlopCounterMode

    from benchmarks.device_check import matmul_gflops
    from benchmarks.train_step import dive_step, timeit
    from dive_core import numerics

    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
    mm = matmul_gflops("cpu", 2048, torch.float32)
    step = dive_step()
    step()
    with FlopCounterMode(display=False) as fc:
        step()
    ms = timeit(step)
    print(json.dumps({"mkl": numerics.mkl_mode(), "matmul_gflops": mm, "step_ms": ms,
                      "step_gflops": fc.get_total_flops() / 1e9}))


def run_child(args: list[str], env: dict, cwd: Path) -> dict:
    out = subprocess.run([sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def env_for(mode: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "MKL_CBWR"}
    if mode != "default":
        env["MKL_CBWR"] = mode
    return env


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--processes", type=int, default=12, help="fresh processes per mode for the same-bytes probe")
    ap.add_argument("--repeats", type=int, default=5, help="fresh processes per mode for the speed figures")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--old", type=Path, help="an older checkout: the probe also runs there, in MKL's default mode")
    ap.add_argument("--modes", nargs="+", default=list(MODES))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        sys.path.insert(0, str(REPO))
        return child_speed(a.child, a.threads)

    sys.path.insert(0, str(REPO))
    from dive_core import provenance

    print(json.dumps({"cpu": provenance.cpu_model(), "cpu_flags": provenance.cpu_flags(), "threads": a.threads,
                      "git_commit": provenance.git_commit(REPO),
                      "env": {k: os.environ[k] for k in provenance.THREAD_ENV if k in os.environ}}), flush=True)
    probe = [str(REPO / "tests" / "retrain_probe.py"), "--threads", str(a.threads)]
    runs = {m: [] for m in a.modes if m != "default" or a.old}
    for i in range(a.processes):  # modes interleaved, so that machine drift hits all alike
        for mode in runs:
            cwd = a.old.resolve() if mode == "default" else REPO
            runs[mode].append(run_child(probe, env_for(mode), cwd))
    speed = {m: [] for m in a.modes}
    for i in range(a.repeats):
        for mode in speed:
            speed[mode].append(run_child([str(Path(__file__).resolve()), "--child", mode, "--threads",
                                          str(a.threads)], env_for(mode), REPO))
    out = {m: {"processes": 0, "weights_hashes": {}, "docs_hashes": 0, "mkl": None} for m in a.modes}
    for mode, rows in runs.items():
        w = Counter(r["weights_sha256"] for r in rows)
        d = Counter(r["docs_sha256"] for r in rows)
        out[mode] = {"processes": len(rows), "weights_hashes": dict(w), "docs_hashes": len(d),
                     "mkl": rows[0].get("mkl")}
    for mode, rows in speed.items():
        mm = statistics.median(r["matmul_gflops"] for r in rows)
        ms = statistics.median(r["step_ms"] for r in rows)
        gf = rows[0]["step_gflops"]
        out[mode].update({"speed_mkl": rows[0]["mkl"], "matmul_gflops": mm, "step_ms": ms, "step_gflops": gf,
                          "step_flop_rate_ratio": gf / (ms / 1000) / mm,
                          "step_ms_spread": [min(r["step_ms"] for r in rows), max(r["step_ms"] for r in rows)]})
    base = out.get("default", {}).get("step_ms")
    print(f"{'mode':<14}{'processes':>10}{'weights':>9}{'docs':>6}{'matmul GF/s':>13}{'step ms':>9}"
          f"{'vs default':>11}{'of matmul':>11}  MKL reports")
    for mode, o in out.items():
        speed_cols = (f"{o['matmul_gflops']:>13.1f}{o['step_ms']:>9.2f}"
                      f"{(o['step_ms'] / base if base else float('nan')):>11.2f}{o['step_flop_rate_ratio']:>11.2f}"
                      if "step_ms" in o else f"{'':>13}{'':>9}{'':>11}{'':>11}")
        print(f"{mode:<14}{o['processes']:>10}{len(o['weights_hashes']):>9}{o['docs_hashes']:>6}{speed_cols}  "
              f"{o.get('speed_mkl')}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
