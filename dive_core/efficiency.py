"""Retrieval efficiency of a flat inner-product index (docs/protocol.md#efficiency-and-quality-per-byte), measured
as FAISS's own benchmarks do: index construction and file loading are not timed; each figure is
the median over independent repetitions, each after a discarded warm-up; thread count, CPU and
FAISS version are recorded.

Per index (one corpus matrix at one dimension):

* ``index_bytes`` = ntotal x ``bytes_per_vector`` (the codes FAISS stores; float32: 4d per vector;
  a k-sparse code: 4 bytes per active latent, :mod:`dive_core.sparse`), and ``searched_bytes``, what
  the search holds and reads (FAISS flat: the same; the sparse search's float32 / int32 structure:
  about twice its codes);
* single-query latency: ``n_single`` searches of one query each (top-10), the median and the
  99th percentile within a repetition, then the median of each over the repetitions;
* batched throughput: all evaluated queries in one ``search`` call, queries per second, median
  over repetitions;
* the physical limit: a single-query flat search must read the whole index once, so
  ``lower_bound_ms = searched_bytes / bandwidth`` with the bandwidth of a streaming read from main
  memory measured in the same run (:func:`memory_bandwidth`), and ``latency_ratio_to_bound`` =
  measured median / lower bound. An index that fits in the CPU caches is read faster than main
  memory streams (a ratio below 1), so the row also holds ``read_ms_same_size``, the time to read
  an array of the index's size again and again as the searches do (:func:`read_time_ms`), and
  the latency's ratio to it.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Sequence

import numpy as np

from .provenance import cpu_model
from .retrieval import build_index, bytes_per_vector
from .sparse import SPARSE_ENCODING, SparseCorpus, stored_form


def faiss_info() -> dict:
    import faiss

    from .retrieval import faiss_gpus

    gpus = faiss_gpus()
    return {"faiss_version": faiss.__version__, "faiss_threads": faiss.omp_get_max_threads(),
            "device": "gpu" if gpus > 0 else "cpu", "cpu": cpu_model(), "cpu_count": os.cpu_count()}


def _read(a: np.ndarray) -> float:
    return float(a.max())  # one vectorised pass over the array: memory-bound, not compute-bound


def read_time_ms(nbytes: int, repeats: int = 5, inner: int = 20) -> float:
    """Median time (ms) to read ``nbytes`` once on one core, the way repeated single-query searches
    read their index: the same array again and again (an index that fits in the caches is read
    at cache speed). Each repetition times ``inner`` consecutive reads after a discarded one."""
    a = np.ones(max(1, nbytes // 4), dtype=np.float32)
    times = []
    for _ in range(repeats):
        _read(a)
        t0 = time.perf_counter()
        for _ in range(inner):
            _read(a)
        times.append((time.perf_counter() - t0) / inner * 1e3)
    return statistics.median(times)


def memory_bandwidth(megabytes: int = 1024, repeats: int = 5) -> dict:
    """Main-memory streaming-read bandwidth of one core in GB/s (1e9 bytes/s): a ``megabytes``
    array (far larger than any cache) read once per repetition (:func:`read_time_ms`), median over
    ``repeats``. One core, because FAISS searches a single query on one thread (it parallelises
    over queries)."""
    nbytes = megabytes * 2 ** 20
    seconds = read_time_ms(nbytes, repeats=repeats, inner=1) / 1e3
    return {"bandwidth_gb_s": nbytes / seconds / 1e9, "bandwidth_bytes": int(nbytes),
            "bandwidth_threads": 1, "bandwidth_repeats": repeats}


def _batched_qps(index, q: np.ndarray, k: int, threads: int | None = None) -> float:
    """Queries per second of one ``search`` call over all of ``q`` (after a warm-up of its first 32),
    on ``threads`` OpenMP threads (None: as set)."""
    import faiss

    before = faiss.omp_get_max_threads()
    if threads is not None:
        faiss.omp_set_num_threads(threads)
    try:
        index.search(q[: min(q.shape[0], 32)], k)  # warm-up of the batched path
        t0 = time.perf_counter()
        index.search(q, k)
        return q.shape[0] / (time.perf_counter() - t0)
    finally:
        faiss.omp_set_num_threads(before)


def time_index(docs: np.ndarray, queries: np.ndarray, k: int = 10, n_single: int = 300, repeats: int = 5,
               use_gpu: bool | str = "auto", warmup: int = 20, active: int | None = None,
               encoding: str = "float32", quantizer_seed: int = 0, opq_niter: int | None = None) -> dict:
    """Latency and throughput of a flat inner-product index over ``docs`` (see the module
    docstring). ``queries``: the evaluated queries, cycled for the single-query searches.
    ``active``: ``docs`` are k-sparse codes (csr), searched exactly over their stored form
    (fp16 values) by :class:`dive_core.sparse.SparseCorpus` on one thread, a query's scores
    computed over the latents it shares with each document. ``encoding``: an index quantizer of
    :mod:`dive_core.quantizers` instead of the flat index (fitted on ``docs``, not timed), searched
    by FAISS (asymmetric distances over every code). Batched throughput is measured on all threads
    (``throughput_qps``) and on one (``throughput_qps_one_thread``); ``memory_bytes``: the index
    serialized by FAISS (codes and codebooks; the flat index: its vectors; the sparse search: its
    structure)."""
    from . import quantizers as Q

    one = None
    if active is not None:
        stored, q = stored_form(docs, queries)
        index = SparseCorpus(stored)
        singles = [q[i % q.shape[0]] for i in range(n_single)]  # one-row sparse matrices
        searched = memory = index.nbytes
    elif Q.is_quantizer(encoding):
        index, _ = Q.build(encoding, docs, quantizer_seed,
                           opq_niter=Q.OPQ_NITER if opq_niter is None else opq_niter)
        q = np.ascontiguousarray(queries, dtype=np.float32)
        singles = [q[i % len(q)][None, :] for i in range(n_single)]
        searched = int(index.ntotal) * int(index.sa_code_size())  # the codes an exhaustive search reads
        memory = Q.index_bytes(index)
        one = 1
    else:
        index = build_index(docs, use_gpu)
        q = np.ascontiguousarray(queries, dtype=np.float32)
        singles = [q[i % len(q)][None, :] for i in range(n_single)]
        searched = memory = int(docs.shape[0]) * bytes_per_vector("float32", int(docs.shape[1]))
        one = 1 if not _gpu_index(index) else None
    med, p99, qps, qps1 = [], [], [], []
    for _ in range(repeats):
        for x in singles[:warmup]:
            index.search(x, k)  # discarded warm-up
        lat = []
        for x in singles:
            t0 = time.perf_counter()
            index.search(x, k)
            lat.append((time.perf_counter() - t0) * 1e3)
        med.append(float(np.median(lat)))
        p99.append(float(np.percentile(lat, 99)))
        if active is None:
            qps.append(_batched_qps(index, q, k))
            qps1.append(_batched_qps(index, q, k, one) if one else float("nan"))
        else:  # the sparse search runs on one thread
            index.search(q[: min(q.shape[0], 32)], k)
            t0 = time.perf_counter()
            index.search(q, k)
            qps.append(q.shape[0] / (time.perf_counter() - t0))
            qps1.append(qps[-1])
    return {"latency_ms_median": statistics.median(med), "latency_ms_p99": statistics.median(p99),
            "throughput_qps": statistics.median(qps), "throughput_qps_one_thread": statistics.median(qps1),
            "n_single": n_single, "batch_queries": int(q.shape[0]),
            "searched_bytes": searched, "memory_bytes": int(memory),
            "repeats": repeats, "k": k}


LATENCY_QUERIES = 200
"""How many held-out queries :func:`single_query_ms` times, one at a time, per code."""


def single_query_ms(index, queries, n: int = LATENCY_QUERIES, k: int = 10, encoding: str = "float32",
                    docs: np.ndarray | None = None) -> float:
    """The median milliseconds of one query's search at ``k`` on one thread, on the machine that runs
    this: the first ``n`` rows of ``queries`` each searched alone through
    :func:`dive_core.retrieval.index_search` (``encoding``: how ``index`` stores the corpus; ``docs``:
    the float32 corpus a rescoring search reads), after one discarded warm-up search. FAISS's thread
    count is restored after."""
    import faiss

    from .retrieval import index_search

    rows = [queries[i:i + 1] for i in range(min(n, queries.shape[0]))]
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        index_search(index, encoding, rows[0], k, docs)
        times = []
        for x in rows:
            t0 = time.perf_counter()
            index_search(index, encoding, x, k, docs)
            times.append(1000 * (time.perf_counter() - t0))
    finally:
        faiss.omp_set_num_threads(threads)
    return float(np.median(times))


def _gpu_index(index) -> bool:
    return "Gpu" in type(index).__name__


def measure(entries: Sequence[tuple], bandwidth_gb_s: float, **timing) -> list[dict]:
    """One row per ``(method, dim, docs, queries[, active[, encoding]])`` with bytes, timings, the
    bandwidth bound and the ratios to the first entry (the full dimension). ``active``: the number of
    non-zeros of a k-sparse code (csr), stored as (index, fp16 value) pairs
    (:func:`dive_core.sparse.code_bytes`) and searched by :class:`~dive_core.sparse.SparseCorpus`;
    None or absent: a FAISS index, flat (``encoding`` float32, the default) or an index quantizer's
    (:mod:`dive_core.quantizers`: its bytes per vector the codes it holds)."""
    from . import quantizers as Q

    rows = []
    for method, dim, docs, queries, *rest in entries:
        active = rest[0] if rest else None
        encoding = rest[1] if len(rest) > 1 else ("float32" if active is None else SPARSE_ENCODING)
        n, d = docs.shape
        if Q.is_quantizer(encoding):
            bpv = Q.code_bytes(encoding, d)
        else:
            bpv = bytes_per_vector("float32" if active is None else SPARSE_ENCODING, d, active)
        row = {"method": method, "dim": int(dim), "active": active, "encoding": encoding, "n_docs": int(n),
               "bytes_per_vector": bpv, "index_bytes": int(n) * bpv,
               **time_index(docs, queries, active=active, encoding=encoding if active is None else "float32",
                            **timing)}
        # the bound and the same-size read use the bytes the search reads: a FAISS flat index holds
        # the stored vectors; the sparse search a float32 / int32 structure, about twice the codes
        row["lower_bound_ms"] = row["searched_bytes"] / (bandwidth_gb_s * 1e9) * 1e3
        row["latency_ratio_to_bound"] = row["latency_ms_median"] / row["lower_bound_ms"]
        # an index that fits in the caches is read faster than DRAM streams: the same-size read
        row["read_ms_same_size"] = read_time_ms(row["searched_bytes"], repeats=timing.get("repeats", 5),
                                                inner=max(1, min(20, int(2e9 // max(row["searched_bytes"], 1)))))
        row["latency_ratio_to_read"] = row["latency_ms_median"] / row["read_ms_same_size"]
        rows.append(row)
    full = rows[0]
    for row in rows:
        row["memory_ratio_to_full"] = full["index_bytes"] / row["index_bytes"]
        row["latency_speedup_vs_full"] = full["latency_ms_median"] / row["latency_ms_median"]
        row["throughput_ratio_to_full"] = row["throughput_qps"] / full["throughput_qps"]
    return rows


def unit_vectors(n: int, d: int, seed: int = 0, chunk: int = 100_000) -> np.ndarray:
    """``n`` random unit vectors (float32), generated in chunks so the peak stays near one copy."""
    rng = np.random.default_rng(seed)
    out = np.empty((n, d), dtype=np.float32)
    for s in range(0, n, chunk):
        x = rng.standard_normal((min(chunk, n - s), d), dtype=np.float32)
        out[s:s + len(x)] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


def compressed_test_vectors(embeddings_path, splits_path, runs, checkpoints, stage: str = "final"):
    """For each ``(method, k)`` of ``runs`` and its checkpoint: ``(method, k, method object,
    compressed corpus, compressed evaluated queries)`` (``stage`` final: the test queries; select:
    the validation queries), plus the embeddings and split manifest that the caller needs, as
    ``(emb, manifest, items)``."""
    from . import records
    from .embeddings import read_embeddings
    from .methods import Method
    from .splits import eval_queries

    manifest = records.read("splits", splits_path)
    emb = read_embeddings(embeddings_path, expected_source=manifest["source_fingerprint"], against=splits_path)
    qrows = emb.query_rows(eval_queries(manifest, stage))

    def items():
        for (method, k), path in zip(runs, checkpoints):
            m = Method.load(path)
            yield method, int(k), m, m.compress(emb.docs), m.compress(qrows, side="query")

    return emb, manifest, items()


def frontier_rows(method: str, k: int, docs: np.ndarray, queries: np.ndarray, doc_ids, manifest, stage: str,
                  top_k: int = 100, encodings: Sequence[str] | None = None, active: int | None = None,
                  quantizers: Sequence[str] = (), quantizer_seed: int = 0, opq_niter: int | None = None,
                  fit_rows: np.ndarray | None = None, latency_queries: int = 0) -> list[dict]:
    """Held-out quality of one method's compressed vectors under every encoding of
    :mod:`dive_core.retrieval`, through the project's evaluation path. ``active``: the vectors are
    k-sparse codes of that many non-zeros (csr), with one encoding, their stored form
    (:data:`dive_core.sparse.SPARSE_ENCODING`: (index, fp16 value) pairs, searched exactly).
    Each row's ``per_query`` holds its nDCG@10 per evaluated query, in the order of
    :func:`dive_core.splits.eval_queries` (the record's ``query_ids``), for the paired tests.

    ``quantizers``: names of :mod:`dive_core.quantizers` (``pq16``, ``opq16``, ``rabitq``, ``sq4``)
    whose index is fitted on the corpus rows ``fit_rows`` (default: every corpus row; the documents
    known at training time in the arrival study) with ``quantizer_seed`` and searched by FAISS
    (asymmetric distances); their rows also hold the factory string, the fit's seconds, the
    training-set size and the codebook bytes (:func:`dive_core.quantizers.build`). Not for
    k-sparse codes.

    ``latency_queries``: when above 0, each row also holds ``latency_ms``, one query's search at k = 10
    on one thread on this machine (:func:`single_query_ms` over the first that many evaluated
    queries), through the index its encoding is stored in and the evaluation searched (the
    quantizer's; for the other encodings :func:`dive_core.retrieval.search_index`'s: FAISS's exact
    flat kernel, its fp16, SQ8 or binary index, or a k-sparse code's exact search)."""
    from . import quantizers as Q
    from .evaluation import evaluate_vectors
    from .retrieval import ENCODINGS, RESCORE_OVERSAMPLE, search_index
    from .splits import eval_queries

    if active is not None:
        if quantizers:
            raise ValueError(f"{method}: k-sparse codes are stored as they are, not through quantizers {quantizers}")
        (docs, queries), encodings = stored_form(docs, queries), (SPARSE_ENCODING,)
    qids = eval_queries(manifest, stage)
    niter = Q.OPQ_NITER if opq_niter is None else int(opq_niter)
    rows = []
    for enc in [*(ENCODINGS if encodings is None else encodings), *quantizers]:
        index, extra = None, {}
        if Q.is_quantizer(enc):
            train = docs if fit_rows is None else np.asarray(docs)[fit_rows]
            index, extra = Q.build(enc, docs, quantizer_seed, train, niter)
            nbytes = int(index.sa_code_size())
        else:
            nbytes = bytes_per_vector(enc, k, active)
            if latency_queries:  # the index evaluated is the one timed: built once
                index = search_index(docs, False, enc)
        per_query, summary = evaluate_vectors(docs, doc_ids, queries, manifest, stage, top_k, use_gpu=False,
                                              encoding=enc, index=index)
        timed = {}
        if latency_queries:
            timed = {"latency_ms": single_query_ms(index, queries, latency_queries, 10, enc, docs)}
        del index
        rows.append({"method": method, "dim": int(k), "active": active, "encoding": enc, **timed,
                     "bytes_per_vector": nbytes,
                     "n_queries": summary["n_queries"], **{m: summary["metrics"][m] for m in ("ndcg@10", "recall@10")},
                     "rescore_oversample": RESCORE_OVERSAMPLE if enc == "binary_rescore" else None,
                     **{f: extra.get(f) for f in QUANTIZER_FIELDS},
                     "per_query": {"ndcg@10": [per_query[q]["ndcg@10"] for q in qids]}})
    return rows


def arrival_code_rows(method: str, k: int, docs: np.ndarray, queries: np.ndarray, doc_ids, manifest, arrival,
                      names: Sequence[str], seed: int, opq_niter: int, top_k: int = 100,
                      stage: str = "final") -> tuple[list[dict], list[dict]]:
    """``(rows, skipped)``: :func:`frontier_rows` of one arrival-fitted method's vectors (its float32
    row, then each quantizer of ``names``) with every codebook, rotation and range fitted on the
    documents the arrival manifest ``arrival`` keeps known (:func:`dive_core.splits.known_docs`), the
    whole corpus searched, the queries ``stage`` evaluates (final: test; select: validation). A quantizer with more centroids per sub-quantizer than there
    are known documents cannot be fitted: it goes to ``skipped`` (name, centroids, known rows)."""
    from . import quantizers as Q
    from .splits import known_docs

    keep = set(known_docs(doc_ids, arrival))
    fit = np.array([i for i, d in enumerate(doc_ids) if d in keep], dtype=np.int64)
    ok = [n for n in names if (Q.centroids(n) or 0) <= len(fit)]
    skipped = [{"method": method, "dim": int(k), "encoding": n, "centroids": Q.centroids(n), "known_docs": len(fit)}
               for n in names if n not in ok]
    rows = frontier_rows(method, k, docs, queries, doc_ids, manifest, stage, top_k, encodings=("float32",),
                         quantizers=ok, quantizer_seed=seed, opq_niter=opq_niter, fit_rows=fit)
    return rows, skipped


QUANTIZER_FIELDS = ("factory", "fit_seconds", "train_rows", "codebook_bytes", "quantizer_seed", "opq_niter")
"""What a frontier row states of its quantizer (None for the other encodings)."""


def pareto_front(rows: Sequence[dict], metric: str = "ndcg@10") -> list[bool]:
    """For each row: no other row has at most its bytes per vector and a higher ``metric``, or
    fewer bytes and at least its ``metric`` (the quality-per-byte Pareto front)."""
    out = []
    for r in rows:
        dominated = any((o["bytes_per_vector"] <= r["bytes_per_vector"] and o[metric] > r[metric])
                        or (o["bytes_per_vector"] < r["bytes_per_vector"] and o[metric] >= r[metric])
                        for o in rows)
        out.append(not dominated)
    return out
