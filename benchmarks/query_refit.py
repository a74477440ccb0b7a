"""What refitting a query_side compressor's query side costs, against re-compressing a corpus
(docs/compressors.md#refitting-the-query-side), on one machine in one run.

    .venv/bin/python -m benchmarks.query_refit RUN_DIR [--n 1000000] [--repeats 3] [--threads 2] [--tmp DIR]

RUN_DIR is a trained run of the workflow, ``results/<dataset>/<backbone>/<method>/k<k>/<stage>/seed<seed>``
of a ``query_side`` method (its ``model.pt``). From the run's checkpoint record the script finds the
inputs the training job read (embeddings, splits, arrival manifest, triplets: the paths of the workflow
layout) and times:

* ``refit``: :func:`dive_core.methods.query_side.refit_query_side` on the run's own training data
  at another seed (median of ``--repeats``), after one warm-up refit; the document map is copied;
* ``recompress``: what a change of the document side would cost instead: ``dive-compress`` of N
  synthetic rows at the backbone's dimension (default 1,000,000; generated in chunks in a temporary
  folder, not timed) through the run's compressor, float32, with the FAISS index (``--faiss``): read,
  normalise, compress, write, index. One timed pass after a warm-up on the first 100,000 rows.
  It does not count re-embedding the corpus with the backbone, which a changed document side of
  a new backbone would need too, and which costs far more.

It also checks that the compressed file and the index written with the refitted compressor are
byte-identical to those of the original (on the first 100,000 rows). The last line is a JSON object
with both times, their ratio, the CPU (dive_core.provenance.runtime) and torch threads.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
GEN_ROWS = 65536


def run_inputs(run_dir: Path, meta: dict) -> dict:
    """The training job's inputs of a run, by the workflow's layout (checked against the record)."""
    ds, bb, stage = meta["dataset"], meta["backbone"], meta["stage"]
    res = REPO / "results" / ds
    arrival = meta["method"].endswith("-arrival")  # its negatives are then "<kind>-arrival"
    return {"embeddings": res / bb / "embeddings.h5", "splits": res / "splits.json",
            "arrival": res / "arrival.json" if arrival else None,
            "triplets": res / bb / "triplets" / f"{stage}-{meta['negatives']}.tsv"}


def fit_data_of(run_dir: Path, method):
    from dive_core import records, splits
    from dive_core.data import sha256_file
    from dive_core.embeddings import read_embeddings
    from dive_core.training import fit_data

    meta = method.meta
    inp = run_inputs(run_dir, meta)
    manifest = records.read("splits", inp["splits"])
    emb = read_embeddings(inp["embeddings"], expected_source=manifest["source_fingerprint"])
    qids = splits.train_queries(manifest, meta["stage"])
    docs = None
    if inp["arrival"] is not None:
        arrival = records.read("arrival", inp["arrival"])
        docs = splits.known_docs(emb.doc_ids, arrival)
        qids = splits.known_queries(qids, manifest, arrival)
    if sha256_file(inp["triplets"]) != meta["fingerprints"]["triplets_sha256"]:
        raise SystemExit(f"{inp['triplets']}: not the triplets {run_dir} was trained on")
    return fit_data(emb, qids, inp["triplets"], doc_ids=docs)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tmp", type=Path, default=None)
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    from dive_core import compress as C
    from dive_core import provenance
    from dive_core.methods import Method
    from dive_core.methods.query_side import refit_query_side
    from dive_core.training import TrainLog
    from dive_core.vectors import VectorWriter

    method = Method.load(args.run_dir / "model.pt")
    if method.type != "query_side":
        raise SystemExit(f"{args.run_dir}: a {method.type} run; this benchmark needs a query_side one")
    data = fit_data_of(args.run_dir, method)
    refit_query_side(method, data, TrainLog(), seed=method.seed + 1, progress=False)  # warm-up
    times = []
    for r in range(args.repeats):
        t0 = time.perf_counter()
        new = refit_query_side(method, data, TrainLog(), seed=method.seed + 1 + r, progress=False)
        times.append(time.perf_counter() - t0)
    refit = statistics.median(times)

    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        tmp = Path(tmp)
        src = tmp / "corpus.npy"
        rng = np.random.default_rng(0)
        with VectorWriter(src, args.n, method.d) as w:
            for s in range(0, args.n, GEN_ROWS):
                m = min(GEN_ROWS, args.n - s)
                w.write([f"d{i}" for i in range(s, s + m)], rng.standard_normal((m, method.d), dtype=np.float32))
        # byte-identity on a 100,000-row slice, which is also the warm-up
        small = tmp / "small.npy"
        with VectorWriter(small, min(args.n, 100_000), method.d) as w:
            for ids, x in C.open_sets(src, None)[0].chunks(GEN_ROWS, stop=min(args.n, 100_000), raw=True):
                w.write(ids, x)
        outs = []
        for name, m in (("old", method), ("new", new)):
            C.compress_file(m, small, tmp / f"{name}.npy", progress=False)
            C.write_faiss_index(tmp / f"{name}.npy", tmp / f"{name}.faiss", progress=False)
            outs.append([(tmp / f"{name}{e}").read_bytes() for e in (".npy", ".meta.json", ".faiss")])
        identical = outs[0] == outs[1]
        differing = [e for e, a, b in zip((".npy", ".meta.json", ".faiss"), *outs) if a != b]
        t0 = time.perf_counter()
        C.compress_file(method, src, tmp / "all.npy", progress=False)
        C.write_faiss_index(tmp / "all.npy", tmp / "all.faiss", progress=False)
        recompress = time.perf_counter() - t0

    out = {"run": str(args.run_dir), "type": method.type, "doc_map": method.hp["doc_map"],
           "query_map": method.hp["query_map"], "d": method.d, "k": method.k, "n_triplets": data.n_triplets,
           "n_fit_docs": int(data.docs.shape[0]), "refit_seconds_median": refit, "refit_seconds": times,
           "recompress_rows": args.n, "recompress_seconds": recompress, "recompress_over_refit": recompress / refit,
           "corpus_and_index_byte_identical_after_refit": identical, "differing_files": differing,
           "threads": torch.get_num_threads(), "runtime": provenance.runtime(args.threads)}
    print(f"refit of the query side: {refit:.2f} s (median of {args.repeats}); re-compressing {args.n} vectors "
          f"+ FAISS index: {recompress:.1f} s ({recompress / refit:.0f}x); corpus and index byte-identical after "
          f"the refit: {identical}", file=sys.stderr)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
