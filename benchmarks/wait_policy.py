"""OpenMP's wait policy when trainings share the cores: wall and CPU seconds of the CI smoke run's DIVE
training (tests/retrain_probe.py, 2 threads) alone and two at once, under the libraries' default
policy and under ``OMP_WAIT_POLICY=PASSIVE``, and whether every run gave the same weights.

    .venv/bin/python benchmarks/wait_policy.py [--repeats 3]

By default torch's and MKL's OpenMP threads spin for a while after each parallel region before they
sleep; on a machine whose cores are shared beyond their count (the test suite's two workers on two
cores) the spinning threads take the cores the other process needs. tests/conftest.py sets the
passive policy for the suite (docs/performance.md, "Cores shared beyond their count"). Prints one
JSON line: per setting, the median over repeats of the slowest process's wall seconds and of the
processes' CPU seconds summed, and the weights hashes seen.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROBE = REPO / "tests" / "retrain_probe.py"


def start_together(cmd: list[str], n: int, env: dict | None = None) -> tuple[float, float, set[str]]:
    """``n`` processes of ``cmd`` started together, each printing a JSON line with ``weights_sha256``
    last: the slowest's wall seconds, their CPU seconds, their hashes (benchmarks/threads_per_job.py
    uses it too)."""
    before, t0 = os.times(), time.perf_counter()
    procs = [subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, text=True) for _ in range(n)]
    hashes = set()
    for p in procs:
        out, _ = p.communicate()
        if p.returncode:
            sys.exit(f"{' '.join(cmd)} failed ({p.returncode})")
        hashes.add(json.loads(out.strip().splitlines()[-1])["weights_sha256"])
    wall, after = time.perf_counter() - t0, os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return wall, cpu, hashes


def run_at_once(n: int, policy: str | None) -> tuple[float, float, set[str]]:
    """``n`` probes started together, under OpenMP's wait ``policy`` (None: the default)."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    return start_together([sys.executable, str(PROBE)], n, env)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    results, seen = {}, set()
    for n in (1, 2):
        for policy in (None, "PASSIVE"):
            walls, cpus = [], []
            for _ in range(a.repeats):
                wall, cpu, hashes = run_at_once(n, policy)
                walls.append(wall)
                cpus.append(cpu)
                seen |= hashes
            results[f"{n} at once, {policy or 'default'}"] = {"wall_s": round(statistics.median(walls), 3),
                                                              "cpu_s": round(statistics.median(cpus), 3)}
    print(json.dumps({"cpu": os.cpu_count(), "repeats": a.repeats, "runs": results,
                      "weights_sha256": sorted(seen), "same_weights": len(seen) == 1}))


if __name__ == "__main__":
    main()
