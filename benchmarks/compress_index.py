"""`dive-compress --faiss PATH --index FACTORY` on a large synthetic file: its peak memory, and its
index searched against FAISS's own index built in memory from the same vectors.

    .venv/bin/python -m benchmarks.compress_index [--n 200000] [--d 384] [--k 64] [--index OPQ16,PQ16]
                                                  [--train-size 100000] [--seed 0] [--threads 2] [--tmp DIR]

Three child processes, so that this one stays small (Linux carries a process's peak RSS across
fork and exec): ``--stage prepare`` writes N x d float32 rows (a .npy and its ids, in chunks) and a
freshly initialised DIVE compressor d -> k (configured hyperparameters; identity-initialised, so
its output is a real map of the input); then ``dive-compress`` itself runs, its peak resident memory
read with wait4 (ru_maxrss); ``--stage verify`` then decodes the output, builds
``faiss.index_factory(k, FACTORY, inner product)`` in memory, trained on the same sample
(``dive_core.compress.sample_rows``) and filled with every row at once, and compares: the two
files' bytes, and the top 10 of ``--queries`` compressed random queries. It also runs a factory
string FAISS refuses (``--refused``) and keeps its message. The last line is a JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GEN_ROWS = 16384


def prepare(a) -> dict:
    import numpy as np

    from benchmarks.compress_speed import dive_method
    from dive_core.vectors import VectorWriter

    work = Path(a.tmp)
    rng = np.random.default_rng(a.seed)
    centres = rng.standard_normal((64, a.d)).astype(np.float32)  # some structure for the codebooks to find
    with VectorWriter(work / "in.npy", a.n, a.d) as w:
        for s in range(0, a.n, GEN_ROWS):
            m = min(GEN_ROWS, a.n - s)
            x = centres[rng.integers(0, 64, m)] + rng.standard_normal((m, a.d)).astype(np.float32)
            w.write([f"d{i}" for i in range(s, s + m)], x)
    dive_method(a.d, a.k, seed=a.seed).save(work / "model.pt")
    return {"input_bytes": (work / "in.npy").stat().st_size}


def verify(a) -> dict:
    import faiss
    import numpy as np

    from dive_core import compress as C
    from dive_core.embeddings import l2_normalize
    from dive_core.methods import Method

    work = Path(a.tmp)
    rec = C.read_metadata(work / "out.npy")["faiss_index"]
    _, y = C.decode(work / "out.npy")
    t0 = time.perf_counter()
    ref = faiss.index_factory(a.k, a.index, faiss.METRIC_INNER_PRODUCT)
    ref.train(y[C.sample_rows(len(y), a.train_size, a.seed)])
    ref.add(y)
    ref_seconds = time.perf_counter() - t0
    streamed = faiss.read_index(str(work / "out.faiss"))
    rng = np.random.default_rng(a.seed + 1)
    q = Method.load(work / "model.pt").compress(l2_normalize(rng.standard_normal((a.queries, a.d)).astype(np.float32)))
    _, top_s = streamed.search(q, 10)
    _, top_r = ref.search(q, 10)
    return {"record": rec, "ntotal": int(streamed.ntotal), "top10_equal": bool(np.array_equal(top_s, top_r)),
            "top10_rows_differing": int((top_s != top_r).any(axis=1).sum()), "queries": a.queries,
            "bytes_equal_in_memory": (work / "out.faiss").read_bytes() == bytes(faiss.serialize_index(ref)),
            "in_memory_build_seconds": round(ref_seconds, 1)}


def child(stage: str, a) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.compress_index", "--stage", stage, *_args(a)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"stage {stage} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _args(a) -> list[str]:
    return ["--n", str(a.n), "--d", str(a.d), "--k", str(a.k), "--index", a.index, "--train-size", str(a.train_size),
            "--seed", str(a.seed), "--queries", str(a.queries), "--threads", str(a.threads), "--tmp", str(a.tmp),
            "--refused", a.refused]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--d", type=int, default=384)
    ap.add_argument("--k", type=int, default=64)
    ap.add_argument("--index", default="OPQ16,PQ16")
    ap.add_argument("--train-size", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--refused", default="OPQ16,PQ12", help="a factory string FAISS refuses for k dimensions")
    ap.add_argument("--tmp", help="work folder (default: a temporary one, removed after)")
    ap.add_argument("--stage", choices=("prepare", "verify"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    os.environ.update(OMP_NUM_THREADS=str(a.threads), MKL_NUM_THREADS=str(a.threads))
    if a.stage:
        print(json.dumps(prepare(a) if a.stage == "prepare" else verify(a)))
        return
    with tempfile.TemporaryDirectory(dir=a.tmp) as tmp:
        a.tmp = tmp
        report = {"n": a.n, "d": a.d, "k": a.k, "index": a.index, "train_size": a.train_size, "seed": a.seed,
                  "threads": a.threads, **child("prepare", a)}
        cmd = [str(Path(sys.executable).parent / "dive-compress"), str(Path(tmp) / "model.pt"),
               str(Path(tmp) / "in.npy"), str(Path(tmp) / "out.npy"), "--faiss", str(Path(tmp) / "out.faiss"),
               "--index", a.index, "--faiss-train-size", str(a.train_size), "--faiss-seed", str(a.seed), "--quiet",
               "--threads", str(a.threads)]
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        stdout = p.stdout.read()
        _, status, usage = os.wait4(p.pid, 0)
        seconds = time.perf_counter() - t0
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"dive-compress failed ({os.waitstatus_to_exitcode(status)}): {stdout}")
        report.update({"wall_s": round(seconds, 1), "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
                       "index_bytes": (Path(tmp) / "out.faiss").stat().st_size,
                       "output_bytes": (Path(tmp) / "out.npy").stat().st_size, "stdout": stdout.strip()})
        report.update(child("verify", a))
        bad = subprocess.run([*cmd[:3], str(Path(tmp) / "bad.npy"), "--faiss", str(Path(tmp) / "bad.faiss"),
                              "--index", a.refused, "--quiet"], capture_output=True, text=True)
        report["refused"] = {"index": a.refused, "returncode": bad.returncode,
                             "message": bad.stderr.strip().splitlines()[-1],
                             "wrote_nothing": not (Path(tmp) / "bad.npy").exists()
                             and not (Path(tmp) / "bad.faiss").exists()}
        print(json.dumps(report))


if __name__ == "__main__":
    main()
