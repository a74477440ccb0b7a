"""Memory and time of every workflow stage on a synthetic corpus of any size, each stage in its
own process as the workflow runs it (run from the repository root):

    .venv/bin/python -m benchmarks.scale --docs 500000 --dim 384 --queries 10000 [--threads 2]

It writes a synthetic dataset in BEIR layout under ``--workdir`` (default: a temporary folder,
removed afterwards unless ``--keep``): N documents in clusters, Q queries each judged relevant to
1-3 documents of its cluster, and precomputed clustered unit embeddings of dimension D in the
workflow's HDF5 format (no backbone involved). Then, through ``dive_core`` and in a fresh
process each, as the workflow's jobs do:

* ``stage``     stage the files (fingerprints, strict parse of every line);
* ``embed``     write the embedding file (the precomputed vectors, read in row chunks from disk);
* ``splits``    the split manifest (rank rule, overlap statistics);
* ``triplets``  the final stage's triplets (10 random negatives per positive pair);
* ``train``     one epoch of DIVE (configured hyperparameters, ``epochs`` set to 1);
* ``pca``       PCA from the chunked covariance;
* ``evaluate``  the frozen (full-dimension) vectors: exact search of the test queries over the
  whole corpus, pytrec_eval metrics, per-query TSV and result JSON;
* ``evaluate_dive``  the same for the DIVE checkpoint (compressed vectors);
* ``faiss_bare``  a bare FAISS ``IndexFlatIP`` search of the same test queries over the same
  matrix (index built before the clock starts; the clock covers ``search`` only).

Each stage's wall seconds and peak resident memory (``ru_maxrss`` of its process, from
``wait4``) are measured. The last output line is one JSON object::

    {"docs": N, "dim": D, "queries": Q, "matrix_mb": <float32 corpus matrix MB>,
     "faiss_bare_seconds": ..., "stages": {"<stage>": {"seconds": ..., "peak_rss_mb": ...}, ...},
     ...}

with ``evaluate`` also reporting its in-process ``search_seconds`` (the part that a bare FAISS
search does) and the goals checked: every stage's peak at most 2.5x the matrix, and evaluation
within 1.2x of the bare search. Keep the machine otherwise idle.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

STAGES = ("stage", "embed", "splits", "triplets", "train", "pca", "evaluate", "evaluate_dive", "faiss_bare")
SEED = 2027
K = 64  # DIVE's and PCA's output dimension (smaller when d < 4K: DIVE needs k x heads <= d)


# ------------------------------------------------------------------------------ synthetic data
def build(work: Path, n_docs: int, dim: int, n_queries: int, chunk: int = 65536) -> None:
    """BEIR files under ``work/beir/synth`` and the raw (unstaged) embedding matrices."""
    rng = np.random.default_rng(SEED)
    n_clusters = max(1, min(n_queries, n_docs // 50))
    centers = rng.standard_normal((n_clusters, dim), dtype=np.float32)
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    root = work / "beir" / "synth"
    (root / "qrels").mkdir(parents=True, exist_ok=True)
    with open(root / "corpus.jsonl", "w", encoding="utf-8") as fh:
        for j in range(n_docs):
            fh.write(json.dumps({"_id": f"d{j}", "title": f"cluster {j % n_clusters}",
                                 "text": f"synthetic document {j}"}) + "\n")
    docs = np.lib.format.open_memmap(work / "docs.npy", mode="w+", dtype=np.float32, shape=(n_docs, dim))
    for s in range(0, n_docs, chunk):  # doc j belongs to cluster j % n_clusters
        rows = np.arange(s, min(n_docs, s + chunk))
        x = centers[rows % n_clusters] + 0.08 * rng.standard_normal((len(rows), dim), dtype=np.float32)
        docs[s:s + len(rows)] = x / np.linalg.norm(x, axis=1, keepdims=True)
    docs.flush()
    del docs
    qcluster = rng.integers(0, n_clusters, n_queries)
    queries = centers[qcluster] + 0.12 * rng.standard_normal((n_queries, dim), dtype=np.float32)
    np.save(work / "queries.npy", queries / np.linalg.norm(queries, axis=1, keepdims=True))
    members_per_cluster = -(-n_docs // n_clusters)
    with open(root / "queries.jsonl", "w", encoding="utf-8") as fq, \
            open(root / "qrels" / "test.tsv", "w", encoding="utf-8") as fr:
        fr.write("query-id\tcorpus-id\tscore\n")
        for i, c in enumerate(qcluster):
            fq.write(json.dumps({"_id": f"q{i}", "text": f"synthetic query {i}"}) + "\n")
            n_rel = int(rng.integers(1, 4))
            members = rng.choice(members_per_cluster, size=min(n_rel, members_per_cluster), replace=False)
            for m in members:
                j = int(c + m * n_clusters)
                if j < n_docs:
                    fr.write(f"q{i}\td{j}\t1\n")
                else:  # the cluster's last member slot does not exist: its first member instead
                    fr.write(f"q{i}\td{int(c)}\t1\n")


# ------------------------------------------------------------------------------ stages
def _paths(work: Path) -> dict[str, Path]:
    return {"staged": work / "data" / "synth", "splits": work / "results" / "splits.json",
            "emb": work / "results" / "embeddings.h5", "triplets": work / "results" / "final-random.tsv",
            "dive": work / "results" / "dive.pt", "pca": work / "results" / "pca.pt",
            "eval": work / "results" / "eval_frozen.json", "eval_dive": work / "results" / "eval_dive.json"}


def _hparams(name: str) -> dict:
    from dive_core import config as dcfg
    from dive_core import plan

    config = dcfg.load_yaml(Path(__file__).resolve().parent.parent / "config" / "config.yaml")
    config["training"]["epochs"] = 1
    return plan.method_hparams(config, name)


def run_stage(stage: str, work: Path) -> dict:
    """One stage, in this process; returns what it wants reported beside its time and memory."""
    from dive_core import atomic, data, records, splits, triplets

    p = _paths(work)
    if stage == "stage":
        m = data.stage_dataset("synth", {"subdir": "synth"}, p["staged"], local_dir=work / "beir")
        return {"counts": m["counts"]}
    if stage == "embed":  # the embedding job's output: the precomputed vectors, written in row chunks
        from dive_core.embeddings import write_embeddings

        docs = np.load(work / "docs.npy", mmap_mode="r")
        ds = data.load_staged(p["staged"])
        qids = splits.judged_queries(ds.relevant())
        queries = np.load(work / "queries.npy")
        qpos = {f"q{i}": i for i in range(len(queries))}
        write_embeddings(p["emb"], [f"d{j}" for j in range(len(docs))], docs, qids,
                         queries[[qpos[q] for q in qids]],
                         {"backbone": "synthetic", "source_fingerprint": ds.fingerprint})
        return {"n_docs": len(docs), "n_queries": len(qids)}
    if stage == "splits":
        ds = data.load_staged(p["staged"])
        manifest = splits.make_manifest(ds, "synth", SEED)
        records.write("splits", p["splits"], manifest)
        return {"counts": manifest["counts"]}
    if stage == "triplets":
        manifest = records.read("splits", p["splits"])
        ds = data.load_staged(p["staged"])
        qrels = splits.role_qrels(manifest, splits.STAGES["final"]["train_roles"])
        t = triplets.build_triplets(qrels, splits.train_queries(manifest, "final"), ds.doc_ids, SEED, 10)
        triplets.write_triplets(p["triplets"], t)
        return {"n_triplets": len(t.query_ids)}
    import torch

    from dive_core.embeddings import read_embeddings
    from dive_core.methods import Method, new_method
    from dive_core.training import TrainLog, fit_data

    manifest = records.read("splits", p["splits"])
    emb = read_embeddings(p["emb"], expected_source=manifest["source_fingerprint"], against=p["splits"])
    if stage in ("train", "pca"):
        name = "dive" if stage == "train" else "pca"
        qids = splits.train_queries(manifest, "final")
        fd = fit_data(emb, qids, p["triplets"] if name == "dive" else None)
        method = new_method(name, emb.dim, min(K, emb.dim // 4), _hparams(name), SEED, "cpu")
        t0 = time.perf_counter()
        method.fit(fd, TrainLog(), progress=False)
        method.save(p["dive" if name == "dive" else "pca"], {"train_seconds": time.perf_counter() - t0})
        return {"fit_seconds": round(time.perf_counter() - t0, 3), "n_triplets": int(fd.t_q.shape[0])}
    if stage in ("evaluate", "evaluate_dive"):
        from dive_core.evaluation import evaluate_method, write_per_query

        method = (new_method("frozen", emb.dim, emb.dim, {}, SEED) if stage == "evaluate"
                  else Method.load(p["dive"]))
        t0 = time.perf_counter()
        per_query, summary = evaluate_method(method, emb, manifest, "final", 100, use_gpu=False, consume=True)
        out = p["eval" if stage == "evaluate" else "eval_dive"]
        write_per_query(out.with_suffix(".tsv"), per_query, manifest["ids"]["test"])
        atomic.write_json(out, {"metrics": summary["metrics"], "timings": summary["timings"]})
        return {"evaluation_seconds": round(time.perf_counter() - t0, 3),
                **{k: round(v, 3) for k, v in summary["timings"].items()},
                "ndcg@10": round(summary["metrics"]["ndcg@10"], 4), "n_queries": summary["n_queries"]}
    if stage == "faiss_bare":
        import faiss

        q = emb.query_rows(splits.eval_queries(manifest, "final"))
        index = faiss.IndexFlatIP(emb.dim)
        index.add(emb.docs)
        t0 = time.perf_counter()
        index.search(q, 100)
        # not rounded to milliseconds: on a small test corpus the bare search takes less than 1 ms,
        # and the ratios below divide by it
        return {"search_seconds": round(time.perf_counter() - t0, 6), "faiss_threads": faiss.omp_get_max_threads(),
                "torch_threads": torch.get_num_threads()}
    raise ValueError(f"unknown stage {stage!r}; known: {STAGES}")


def measure(stage: str, work: Path, threads: int, extra: list[str] | None = None) -> dict:
    """Run one stage in a child process: wall seconds, peak RSS (wait4) and its own report.
    Linux carries a process's peak RSS across fork and exec, so a child's ``ru_maxrss`` is at
    least this process's RSS when it started the child: this process therefore stays small (the
    synthetic data are written by a child too)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    cmd = [sys.executable, "-m", "benchmarks.scale", "--stage", stage, "--workdir", str(work),
           "--threads", str(threads), *(extra or [])]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"stage {stage} failed ({proc.returncode})")
    report = json.loads(out.strip().splitlines()[-1])
    return {"seconds": round(seconds, 2), "peak_rss_mb": round(usage.ru_maxrss / 1024, 1), **report}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=500_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    ap.add_argument("--stage", choices=("build", *STAGES), help=argparse.SUPPRESS)  # one stage, in this process
    a = ap.parse_args()
    if a.stage == "build":
        build(a.workdir, a.docs, a.dim, a.queries)
        print(json.dumps({}))  # measure() times it and reads its peak RSS
        return
    if a.stage:
        import torch

        torch.set_num_threads(a.threads)
        print(json.dumps(run_stage(a.stage, a.workdir)))
        return

    from dive_core import provenance

    work = a.workdir or Path(tempfile.mkdtemp(prefix="dive-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    rt = provenance.runtime(a.threads)
    print(f"# {a.docs} docs x {a.dim} dims, {a.queries} queries, {a.threads} threads, {rt['cpu']} "
          f"({', '.join(rt['cpu_flags'])}); work folder {work}", flush=True)
    try:
        built = measure("build", work, a.threads, ["--docs", str(a.docs), "--dim", str(a.dim),
                                                    "--queries", str(a.queries)])
        print(f"# synthetic data written in {built['seconds']:.1f} s (peak RSS {built['peak_rss_mb']:.0f} MB)",
              flush=True)
        stages = {}
        for stage in STAGES:
            stages[stage] = measure(stage, work, a.threads)
            print(f"# {stage}: {json.dumps(stages[stage])}", flush=True)
    finally:
        if not a.keep and a.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    matrix_mb = a.docs * a.dim * 4 / 2**20
    bare = stages.pop("faiss_bare")
    worst = max(stages, key=lambda s: stages[s]["peak_rss_mb"])
    ev = stages["evaluate"]
    result = {
        "docs": a.docs, "dim": a.dim, "queries": a.queries, "matrix_mb": round(matrix_mb, 1),
        "faiss_bare_seconds": bare["search_seconds"], "faiss_bare_peak_rss_mb": bare["peak_rss_mb"],
        "stages": stages, "build": {k: built[k] for k in ("seconds", "peak_rss_mb")},
        "goals": {
            "max_peak_over_matrix": round(stages[worst]["peak_rss_mb"] / matrix_mb, 3), "max_peak_stage": worst,
            "peak_goal": 2.5,
            "evaluate_search_over_bare": round(ev["search_seconds"] / bare["search_seconds"], 3),
            "evaluate_in_process_over_bare": round(ev["evaluation_seconds"] / bare["search_seconds"], 3),
            "evaluate_process_over_bare": round(ev["seconds"] / bare["search_seconds"], 3),
            "evaluate_goal": 1.2,
        },
        "threads": a.threads, "cpu": rt["cpu"], "cpu_flags": rt["cpu_flags"],
        "max_rss_self_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
