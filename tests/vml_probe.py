"""MKL's vector math at its first parallel call, in N fresh processes; prints one JSON line.

    python tests/vml_probe.py [--children N] [--threads T] [--parallel P] [--cold]

This interpreter imports dive_core, faiss and torch and computes nothing; it then forks N children, P
at a time (two children of 2 threads on 2 cores: the first calls' threads start unevenly, and the
race below shows more often). Each child sets its thread count (``dive_core.runlog.set_threads``, as every job
does; ``--cold``: ``torch.set_num_threads`` alone, so MKL's vector math is not warmed first), runs a
matrix product (the thread pool starts, as in a training), then computes ``exp`` of the same
49,152 values twice, over T threads (at::vml -> MKL's vmsExp from each thread), and reports
whether the first call's bytes equal the second's. A forked child starts where its parent stands:
MKL's vector math not yet called, the thread pool not yet started.

Output: ``{"children": N, "differ": n, "first_hashes": {sha256[:16]: count}}``; ``differ`` is the
number of children whose first call gave other bytes than their second
(tests/test_reproducibility.py; dive_core/numerics.py says why).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections import Counter
from pathlib import Path

sys.path[:0] = [str(Path.cwd())]

import dive_core  # noqa: E402,F401  (first: MKL's reproducible mode, as every entry point)
import faiss  # noqa: E402,F401  (imported here, not in each child: runlog.set_threads sets its threads)
import numpy as np  # noqa: E402
import torch  # noqa: E402

from dive_core import runlog  # noqa: E402


def child(threads: int, cold: bool) -> str:
    if cold:
        torch.set_num_threads(threads)
    else:
        runlog.set_threads(threads)
    rng = np.random.default_rng(0)
    a, b = (torch.from_numpy(rng.standard_normal(s, dtype=np.float32)) for s in ((256, 384), (384, 2048)))
    (a @ b).sum()
    x = torch.from_numpy(rng.uniform(-20.0, 0.0, size=(3, 128, 128)).astype(np.float32))
    first, second = x.exp(), x.exp()
    return json.dumps({"first": hashlib.sha256(first.numpy().tobytes()).hexdigest()[:16],
                       "same": bool(torch.equal(first, second))})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--children", type=int, default=300)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--parallel", type=int, default=1, help="children running at once")
    ap.add_argument("--cold", action="store_true", help="do not warm MKL's vector math first")
    a = ap.parse_args()
    firsts, differ, running = Counter(), 0, {}

    def reap() -> None:
        nonlocal differ
        pid, status = os.wait()
        with os.fdopen(running.pop(pid)) as f:
            text = f.read()
        if status != 0 or not text:
            sys.exit(f"a child exited with status {status}")
        out = json.loads(text)
        firsts[out["first"]] += 1
        differ += not out["same"]

    for _ in range(a.children):
        if len(running) == a.parallel:
            reap()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: its one result down the pipe, then out without Python's clean-up
            os.close(r)
            os.write(w, child(a.threads, a.cold).encode())
            os._exit(0)
        os.close(w)
        running[pid] = r
    while running:
        reap()
    print(json.dumps({"children": a.children, "differ": differ, "first_hashes": dict(firsts)}))


if __name__ == "__main__":
    main()
