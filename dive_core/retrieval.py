"""Inner-product search with FAISS: the exact flat index (a GPU index when a GPU is present)
and, for the quality-per-byte frontier, the same vectors stored in fewer bytes.

Exact float32 search where a GPU is wanted (``use_gpu``) runs on FAISS's GPU index with
faiss-gpu, else on PyTorch's CUDA matrix product and top-k (:class:`TorchCorpus`; pip installs
faiss-cpu), else on the CPU (:class:`FlatCorpus`). The GPU's top 10 equals the CPU's on SciFact
(``benchmarks/device_check.py``).

Encodings of a d-dimensional float32 vector (``bytes_per_vector``):

* ``float32`` (4d bytes): ``IndexFlatIP``, exact (:func:`search` on a CPU runs its kernel
  straight over the corpus matrix, :class:`FlatCorpus`, so that no second copy is made);
* ``float16`` (2d): ``IndexScalarQuantizer`` QT_fp16, inner product on the decoded values;
* ``sq8`` (d): ``IndexScalarQuantizer`` QT_8bit, one byte per coordinate with a per-coordinate
  range trained on the corpus only;
* ``binary`` (d/8): the sign bits (x > 0, as sentence-transformers' binary quantization),
  ``IndexBinaryFlat``, ranked by Hamming distance (ties: lower corpus row first);
* ``binary_rescore`` (d/8 in the index): the ``RESCORE_OVERSAMPLE`` x k nearest codes by Hamming
  distance, re-ranked by the float32 inner product (the float32 vectors of those candidates only
  are read, from disk in a deployment; they are not counted in the index bytes).
"""

from __future__ import annotations

from typing import Collection, Sequence

import numpy as np

from .sparse import SPARSE_ENCODING, SparseCorpus, code_bytes, is_sparse

ENCODINGS = ("float32", "float16", "sq8", "binary", "binary_rescore")
RESCORE_OVERSAMPLE = 4  # candidates re-ranked per result slot (sentence-transformers' default multiplier)


def bytes_per_vector(encoding: str, d: int, active: int | None = None) -> int:
    """Bytes one corpus vector takes in the index under ``encoding``; ``sparse``: a k-sparse code of
    ``active`` non-zeros among ``d`` latents, stored as (index, fp16 value) pairs
    (:func:`dive_core.sparse.code_bytes`)."""
    if encoding == SPARSE_ENCODING:
        if active is None:
            raise ValueError("a sparse code's bytes need its number of active latents")
        return code_bytes(active, d)
    if encoding == "float32":
        return 4 * d
    if encoding == "float16":
        return 2 * d
    if encoding == "sq8":
        return d
    if encoding in ("binary", "binary_rescore"):
        return -(-d // 8)
    raise ValueError(f"unknown encoding {encoding!r}; known: {ENCODINGS}")


def sign_codes(x: np.ndarray) -> np.ndarray:
    """1-bit codes: bit j = (x_j > 0), packed 8 per byte (big-endian bit order, as numpy)."""
    return np.packbits(np.asarray(x) > 0, axis=1)


def build_index(docs: np.ndarray, use_gpu: bool | str = "auto", encoding: str = "float32"):
    import faiss

    docs = np.ascontiguousarray(docs, dtype=np.float32)
    d = docs.shape[1]
    bytes_per_vector(encoding, d)  # validates the name
    if encoding in ("binary", "binary_rescore"):
        index = faiss.IndexBinaryFlat(8 * bytes_per_vector(encoding, d))
        codes = sign_codes(docs)
        index.add(codes)
        return index
    if encoding == "float32":
        index = faiss.IndexFlatIP(d)
    else:
        qtype = {"float16": faiss.ScalarQuantizer.QT_fp16, "sq8": faiss.ScalarQuantizer.QT_8bit}[encoding]
        index = faiss.IndexScalarQuantizer(d, qtype, faiss.METRIC_INNER_PRODUCT)
        index.train(docs)  # the corpus only
    if _gpu_wanted(use_gpu):
        res = faiss.StandardGpuResources()
        index = faiss.index_cpu_to_gpu(res, 0, index)
        index._gpu_resources = res  # keep alive
    index.add(docs)
    return index


class FlatCorpus:
    """Exact inner-product search straight over a float32 corpus matrix: the kernel that
    ``IndexFlatIP.search`` runs (``faiss.knn_inner_product``), without the index's own copy of
    the vectors, so an evaluation job holds one copy of the corpus, not two."""

    def __init__(self, docs: np.ndarray):
        self.docs = np.ascontiguousarray(docs, dtype=np.float32)  # no copy for a float32 C array
        self.ntotal = len(self.docs)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        import faiss

        return faiss.knn(np.ascontiguousarray(queries, dtype=np.float32), self.docs, k,
                         metric=faiss.METRIC_INNER_PRODUCT)


class TorchCorpus:
    """Exact inner-product search on a CUDA device with PyTorch: the corpus once on the GPU in
    float32 (TF32 off), scores by one matrix product per query batch, the top ``k`` by
    ``torch.topk``; among equal scores the lower corpus row comes first (FAISS orders exact ties
    as its heap leaves them), so the GPU's order does not depend on the kernel."""

    def __init__(self, docs: np.ndarray, device: str = "cuda"):
        import torch

        self.device = torch.device(device)
        self.docs = torch.as_tensor(np.ascontiguousarray(docs, dtype=np.float32), device=self.device)
        self.ntotal = int(self.docs.shape[0])

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        import torch

        q = torch.as_tensor(np.ascontiguousarray(queries, dtype=np.float32), device=self.device)
        tf32 = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False  # exact float32 products, as FAISS's
        try:
            scores = q @ self.docs.T
        finally:
            torch.backends.cuda.matmul.allow_tf32 = tf32
        k = min(k, self.ntotal)
        extra = min(self.ntotal, k + TIE_MARGIN)  # a few more, so ties at the cut are ordered by row
        top, rows = (t.cpu().numpy() for t in torch.topk(scores, extra, dim=1, sorted=True))  # one copy each
        order = np.lexsort((rows, -top), axis=1)[:, :k]
        return np.take_along_axis(top, order, 1), np.take_along_axis(rows.astype(np.int64), order, 1)


TIE_MARGIN = 8  # candidates beyond k that TorchCorpus re-orders by (score, row)


def search_index(docs: np.ndarray, use_gpu: bool | str = "auto", encoding: str = "float32"):
    """What :func:`search` searches: a FAISS GPU index when asked for and present; for exact
    float32 search a :class:`TorchCorpus` on a CUDA device when a GPU is asked for and FAISS has
    none, otherwise a :class:`FlatCorpus` (no second copy); otherwise :func:`build_index`. A
    ``scipy.sparse`` corpus (k-sparse codes) is searched exactly on the CPU by
    :class:`dive_core.sparse.SparseCorpus`."""
    if is_sparse(docs):
        if encoding not in ("float32", SPARSE_ENCODING):
            raise ValueError(f"sparse codes are searched as they are (encoding {SPARSE_ENCODING!r}), "
                             f"not as {encoding!r}")
        return SparseCorpus(docs)
    if encoding == "float32" and not _gpu_wanted(use_gpu):
        if use_gpu and _torch_cuda():
            return TorchCorpus(docs)
        return FlatCorpus(docs)
    return build_index(docs, use_gpu, encoding)


def query_rows(queries):
    """Query rows as an index reads them: float32 C-contiguous, or a ``scipy.sparse`` matrix as it is."""
    return queries if is_sparse(queries) else np.ascontiguousarray(queries, dtype=np.float32)


def _torch_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def faiss_gpus() -> int:
    """GPUs that this FAISS can build indexes on: 0 without FAISS or with pip's faiss-cpu."""
    try:
        import faiss
    except ImportError:  # no FAISS: exact search can still run on PyTorch (TorchCorpus)
        return 0
    return faiss.get_num_gpus() if hasattr(faiss, "StandardGpuResources") else 0


def _gpu_wanted(use_gpu: bool | str) -> bool:
    """Whether a FAISS GPU index is wanted and present (``use_gpu=True`` with no GPU at all, for
    FAISS or for PyTorch, is refused)."""
    if not use_gpu:
        return False
    available = faiss_gpus() > 0
    if use_gpu is True and not available and not _torch_cuda():
        raise RuntimeError("a GPU search was requested but no GPU is available")
    return available


RESCORE_GATHER_BYTES = 64 << 20  # float32 candidate vectors gathered at once when re-scoring


def index_search(index, encoding: str, queries: np.ndarray, k: int, docs: np.ndarray | None = None,
                 oversample: int = RESCORE_OVERSAMPLE) -> tuple[np.ndarray, np.ndarray]:
    """``(scores, rows)`` of the top ``k`` per query, best first (higher score = better)."""
    q = query_rows(queries)
    if encoding not in ("binary", "binary_rescore"):
        return index.search(q, k)
    n = index.ntotal
    kc = min(n, k * oversample) if encoding == "binary_rescore" else min(n, k)
    dist, rows = index.search(sign_codes(q), kc)
    # IndexBinaryFlat's order among equal distances is not specified: lower corpus row first
    order = np.lexsort((rows, dist), axis=1)
    dist, rows = np.take_along_axis(dist, order, 1), np.take_along_axis(rows, order, 1)
    if encoding == "binary":
        return -dist.astype(np.float32), rows
    if docs is None:
        raise ValueError("binary_rescore needs the float32 corpus vectors")
    docs = np.asarray(docs, np.float32)
    exact = np.empty(rows.shape, dtype=np.float32)
    step = max(1, RESCORE_GATHER_BYTES // max(1, rows.shape[1] * docs.shape[1] * 4))
    for s in range(0, len(q), step):  # the gathered candidates stay within RESCORE_GATHER_BYTES
        exact[s:s + step] = np.einsum("qcd,qd->qc", docs[rows[s:s + step]], q[s:s + step])
    top = np.argsort(-exact, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(exact, top, 1), np.take_along_axis(rows, top, 1)


def search(
    docs: np.ndarray,
    doc_ids: Sequence[str],
    queries: np.ndarray,
    query_ids: Sequence[str],
    top_k: int = 100,
    exclude_self: bool | Collection[str] = True,
    batch_size: int = 4096,
    use_gpu: bool | str = "auto",
    encoding: str = "float32",
    index=None,
) -> dict[str, dict[str, float]]:
    """Top ``top_k`` documents per query by inner product, as ``{qid: {doc_id: score}}``
    (``encoding``: how the corpus vectors are stored, see the module docstring; ``index``: an index
    of ``docs`` already built under that encoding, such as a quantizer's of
    :mod:`dive_core.quantizers`, searched instead of one built here).

    ``exclude_self``: drop the hit whose document id equals the query id (the query itself,
    where queries are corpus documents) before cutting to ``top_k``: for every query (True, the
    BEIR convention), for none (False), or for the queries listed (the split manifest's
    ``identical_ids``, see :func:`dive_core.splits.identical_ids`).
    """
    if docs.shape[1] != queries.shape[1]:
        raise ValueError(f"dimension mismatch: docs {docs.shape[1]} vs queries {queries.shape[1]}")
    if index is None:
        index = search_index(docs, use_gpu, encoding)
    elif index.ntotal != len(doc_ids):
        raise ValueError(f"the index given holds {index.ntotal} vectors for {len(doc_ids)} documents")
    drop_all = exclude_self is True
    drop = set() if isinstance(exclude_self, bool) else set(exclude_self)
    k = min(len(doc_ids), top_k + (1 if (drop_all or drop) else 0))
    q = query_rows(queries)
    run: dict[str, dict[str, float]] = {}
    for start in range(0, len(query_ids), batch_size):
        scores, idx = index_search(index, encoding, q[start:start + batch_size], k, docs)
        scores, idx = scores.tolist(), idx.tolist()  # Python floats and ints: no numpy scalar per hit
        for row, qid in enumerate(query_ids[start:start + batch_size]):
            hits: dict[str, float] = {}
            drop_q = drop_all or qid in drop
            for s, i in zip(scores[row], idx[row]):
                if i < 0:
                    continue
                did = doc_ids[i]
                if drop_q and did == qid:
                    continue
                hits[did] = s
                if len(hits) == top_k:
                    break
            run[qid] = hits
    return run
