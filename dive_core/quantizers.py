"""The quantizers of vector indexes as encodings (docs/methods.md#index-quantizers): FAISS's product
quantization (PQ), rotated PQ (OPQ + PQ), RaBitQ and 4-bit scalar quantization, each one name used
by the frontier, arrival and efficiency studies.

A name (an ``encoding`` of a frontier row) and the FAISS factory string it stands for
(:func:`factory_string`), for a d-dimensional vector:

* ``pq{M}`` (``PQ{M}x8``): M sub-quantizers of 256 centroids, one byte each; ``pq{M}x{b}``: b bits
  each (``PQ{M}x{b}``, 2^b centroids), M x b / 8 bytes rounded up;
* ``opq{M}`` (``OPQ{M},PQ{M}x8``): an orthogonal rotation (FAISS's ``OPQMatrix``, ``niter``
  alternating iterations) learned so that PQ loses least, then PQ; ``opq{M}x{b}`` likewise;
* ``rabitq`` (``RaBitQ``): 1 bit a dimension around the corpus centroid plus the per-vector factors
  FAISS stores (8 bytes); ``rabitq{b}`` (``RaBitQ{b}``): its multi-bit form (b bits a dimension);
* ``sq4`` (``SQ4``): 4 bits a dimension, a per-coordinate range trained on the fitting rows.

:func:`fit` trains one on the rows it is given (the corpus, or the documents known at training time
in the arrival study) with the seed of FAISS's k-means (``ClusteringParameters.seed``, of PQ and of
OPQ's inner PQ; OPQ's initial rotation is FAISS's own fixed random draw), and :func:`build` adds the
corpus. Every index searches by inner product, the query in float32 against the codes (FAISS's
asymmetric distance; RaBitQ's query not quantized, ``qb = 0``). :func:`code_bytes` is what the
index holds per vector (``sa_code_size``: RaBitQ's factors included); :func:`codebook_bytes` what
the trained, empty index takes serialized (codebooks, rotation, ranges: stated once, not per
vector).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

import numpy as np

POINTS_PER_CENTROID = 39  # FAISS's ClusteringParameters.min_points_per_centroid: it warns below this
OPQ_NITER = 10  # OPQ's alternating iterations (FAISS's default 50); config quantizers.opq_niter
_NAME = re.compile(r"^(?:(?P<kind>pq|opq)(?P<m>[1-9][0-9]*)(?:x(?P<bits>[1-9][0-9]*))?"
                   r"|rabitq(?P<rbits>[1-9])?|sq4)$")


@dataclass(frozen=True)
class Quantizer:
    """One parsed quantizer name: ``kind`` pq | opq | rabitq | sq4, ``m`` sub-quantizers (PQ, OPQ),
    ``bits`` per sub-quantizer (PQ, OPQ) or per dimension (RaBitQ, SQ4)."""

    name: str
    kind: str
    m: int | None
    bits: int


def parse(name: str) -> Quantizer:
    """The quantizer a name stands for; an unknown name is refused, naming the known forms."""
    match = _NAME.match(name) if isinstance(name, str) else None
    if not match:
        raise ValueError(f"unknown quantizer {name!r}; known: pq<M>, pq<M>x<bits>, opq<M>, opq<M>x<bits>, "
                         "rabitq, rabitq<bits>, sq4")
    if match["kind"]:
        return Quantizer(name, match["kind"], int(match["m"]), int(match["bits"] or 8))
    if name == "sq4":
        return Quantizer(name, "sq4", None, 4)
    return Quantizer(name, "rabitq", None, int(match["rbits"] or 1))


def is_quantizer(name: str) -> bool:
    try:
        parse(name)
    except ValueError:
        return False
    return True


def factory_string(name: str, d: int) -> str:
    """FAISS's factory string of quantizer ``name`` for ``d`` dimensions; a PQ whose M does not divide
    ``d`` is refused."""
    q = parse(name)
    if q.kind in ("pq", "opq"):
        if d % q.m:
            raise ValueError(f"quantizer {name!r}: {q.m} sub-quantizers do not divide the dimension {d}")
        pq = f"PQ{q.m}x{q.bits}"
        return f"OPQ{q.m},{pq}" if q.kind == "opq" else pq
    if q.kind == "sq4":
        return "SQ4"
    return "RaBitQ" if q.bits == 1 else f"RaBitQ{q.bits}"


def fits(name: str, d: int) -> bool:
    """Whether quantizer ``name`` applies to ``d`` dimensions: PQ and OPQ need M to divide ``d``
    and to be at most ``d / 2`` (sub-vectors of 2 coordinates or more); RaBitQ and SQ4 any."""
    q = parse(name)
    return q.kind not in ("pq", "opq") or (d % q.m == 0 and q.m <= d // 2)


def min_training_points(name: str) -> int | None:
    """The rows FAISS's k-means asks for (39 per centroid) to train one PQ sub-quantizer of ``name``;
    None for the quantizers without centroids (RaBitQ, SQ4)."""
    n = centroids(name)
    return None if n is None else POINTS_PER_CENTROID * n


def centroids(name: str) -> int | None:
    """The centroids of one sub-quantizer of ``name`` (2^bits; None for RaBitQ and SQ4): the fewest
    training rows its k-means accepts at all."""
    q = parse(name)
    return 2 ** q.bits if q.kind in ("pq", "opq") else None


def grid(d: int, settings: dict) -> list[str]:
    """The quantizer names applied to ``d``-dimensional vectors under ``settings`` (config
    ``quantizers:``): PQ and OPQ at every M of ``pq_m`` / ``opq_m`` that divides ``d`` and is at most
    ``d / 2`` (``divisors``: every divisor of ``d`` from 4 to d / 2), RaBitQ at each of
    ``rabitq_bits``, SQ4 if ``sq4``; in order of bytes per vector within each kind."""
    def ms(key):
        want = settings.get(key) or []
        cand = [m for m in range(4, d // 2 + 1) if d % m == 0] if want == "divisors" else want
        return [int(m) for m in cand if d % int(m) == 0 and 1 <= int(m) <= d // 2]

    names = [f"pq{m}" for m in ms("pq_m")] + [f"opq{m}" for m in ms("opq_m")]
    names += ["rabitq" if b == 1 else f"rabitq{b}" for b in settings.get("rabitq_bits") or []]
    return names + (["sq4"] if settings.get("sq4") else [])


def arrival_grid(d: int, settings: dict) -> list[str]:
    """:func:`grid` and, for the arrival study, PQ at every M of ``pq_m`` with each of
    ``arrival_bits`` bits per sub-quantizer (``pq{M}x{b}``: fewer centroids, fitted on fewer rows)."""
    names = grid(d, settings)
    pq = [n for n in names if parse(n).kind == "pq"]
    return names + [f"{n}x{int(b)}" for b in settings.get("arrival_bits") or [] if int(b) != 8 for n in pq]


def _faiss():
    import faiss

    return faiss


def empty_index(name: str, d: int, seed: int, opq_niter: int = OPQ_NITER):
    """The untrained FAISS index of ``name`` (inner product), its k-means seeded with ``seed``."""
    faiss = _faiss()
    index = faiss.index_factory(d, factory_string(name, d), faiss.METRIC_INNER_PRODUCT)
    q = parse(name)
    if q.kind == "opq":
        opq = faiss.downcast_VectorTransform(index.chain.at(0))
        opq.niter = int(opq_niter)
        inner = faiss.downcast_index(index.index)
        inner.do_polysemous_training = False
        inner.pq.cp.seed = int(seed)
        opq.pq = inner.pq  # OPQ trains this PQ (seeded) in its iterations, as the index's own
    elif q.kind == "pq":
        index.do_polysemous_training = False  # the factory's default: a slow extra fit our search never uses
        index.pq.cp.seed = int(seed)
    elif q.kind == "rabitq":
        index.qb = 0  # the query in float32: asymmetric distances, as PQ's
    return index


def fit(name: str, train: np.ndarray, seed: int, opq_niter: int = OPQ_NITER):
    """``(index, seconds)``: ``name``'s index for ``train``'s dimension, trained on ``train`` (its
    codebooks, rotation or ranges), empty, and the training's wall-clock seconds. The fit runs on
    one thread: FAISS's k-means of many small sub-quantizers gains little from more, and on a machine
    whose cores other jobs share its OpenMP threads wait on each other (a PQ of 64 sub-quantizers of
    5,183 vectors: 11 s on one thread, over 5 minutes on two of two busy cores)."""
    train = np.ascontiguousarray(train, dtype=np.float32)
    q = parse(name)
    if q.kind in ("pq", "opq") and len(train) < 2 ** q.bits:
        raise ValueError(f"quantizer {name!r}: {len(train)} training rows for {2 ** q.bits} centroids per "
                         "sub-quantizer; fit fewer bits (pq<M>x<bits>) or on more rows")
    index = empty_index(name, train.shape[1], seed, opq_niter)
    return index, train_one_thread(index, train)


def train_one_thread(index, rows: np.ndarray) -> float:
    """Train a FAISS index on ``rows`` on one OpenMP thread (:func:`fit` says why); its seconds."""
    faiss = _faiss()
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        t0 = time.perf_counter()
        index.train(rows)
        return time.perf_counter() - t0
    finally:
        faiss.omp_set_num_threads(threads)


def build(name: str, docs: np.ndarray, seed: int, train: np.ndarray | None = None,
          opq_niter: int = OPQ_NITER) -> tuple[object, dict]:
    """The index of ``name`` over ``docs``, trained on ``train`` (default: ``docs``, the corpus
    only), and what a frontier row states of it: ``fit_seconds``, ``train_rows`` (the training-set
    size), ``codebook_bytes``, ``factory``, ``seed`` (and ``opq_niter`` for OPQ)."""
    docs = np.ascontiguousarray(docs, dtype=np.float32)
    train = docs if train is None else train
    index, seconds = fit(name, train, seed, opq_niter)
    info = {"factory": factory_string(name, docs.shape[1]), "fit_seconds": seconds, "train_rows": int(len(train)),
            "codebook_bytes": codebook_bytes(index), "quantizer_seed": int(seed),
            "opq_niter": int(opq_niter) if parse(name).kind == "opq" else None}
    index.add(docs)
    return index, info


def code_bytes(name: str, d: int) -> int:
    """Bytes one vector's code takes in ``name``'s index of ``d`` dimensions (FAISS's
    ``sa_code_size``: RaBitQ's per-vector factors included)."""
    return int(empty_index(name, d, 0).sa_code_size())


def codebook_bytes(index) -> int:
    """Bytes of a trained index without its vectors, serialized by FAISS: codebooks, rotation,
    ranges or centroid, stated once for the whole corpus."""
    faiss = _faiss()
    if index.ntotal:
        raise ValueError("codebook_bytes reads a trained index before any vector is added")
    return int(faiss.serialize_index(index).size)


def index_bytes(index) -> int:
    """Bytes of the whole index (codes and codebooks) serialized by FAISS: its memory as FAISS
    stores it."""
    return int(_faiss().serialize_index(index).size)
