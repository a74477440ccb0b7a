"""k-sparse codes (CSR's, :mod:`dive_core.methods.csr`): the bytes a stored code takes, and exact
inner-product search over codes held as ``scipy.sparse`` CSR matrices.

A code of ``active`` non-zeros among ``width`` latents is stored as ``active`` (index, value) pairs:
a uint16 index while ``width <= 65,536`` (a uint32 one beyond) and an fp16 value, so 4 bytes a
non-zero (:func:`code_bytes`; 16 latents: 64 bytes), the same as one float32 coordinate of a dense
vector: a code of ``topk`` latents takes the bytes of a float32 vector of ``topk`` dimensions.

:class:`SparseCorpus` scores only the latents a query and a document share (``Q @ D^T`` in CSR form)
and returns the top k per query as the dense search does (:mod:`dive_core.retrieval`), best first,
among equal scores the lower corpus row first. Ties are common here: a document that shares no
latent with a query scores exactly 0, so the cut of a top 100 may fall among many zero scores.
FAISS's dense kernel keeps among exact ties the rows its heap happens to leave (not a fixed rule);
:class:`SparseCorpus` keeps the lower rows, as the GPU search (``TorchCorpus``) orders them.
"""

from __future__ import annotations

import numpy as np

UINT16_LATENTS = 1 << 16  # latents a uint16 index addresses
VALUE_BYTES = 2  # fp16
QUERY_BLOCK_BYTES = 64 << 20  # dense score rows materialised at once by SparseCorpus.search


def code_bytes(active: int, width: int, value_bytes: int = VALUE_BYTES) -> int:
    """Bytes one stored code of ``active`` non-zeros among ``width`` latents takes: an index (uint16
    for ``width <= 65,536``, else uint32) and a value (fp16 by default) per non-zero."""
    if not 1 <= int(active) <= int(width):
        raise ValueError(f"a code has 1 to width = {width} non-zeros, got {active}")
    return int(active) * ((2 if int(width) <= UINT16_LATENTS else 4) + int(value_bytes))


def sparse_rows(x, value_dtype: str = "float32"):
    """``x`` as a float32 ``scipy.sparse`` CSR matrix of its non-zeros (x: dense rows, or a sparse
    matrix); ``value_dtype="float16"`` rounds the values as a stored code holds them."""
    import scipy.sparse as sp

    m = sp.csr_matrix(x, dtype=np.float32)
    m.eliminate_zeros()
    if value_dtype != "float32":
        m.data = m.data.astype(value_dtype).astype(np.float32)
    m.sort_indices()
    return m


def top_rows(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(scores, rows)`` of the ``k`` best columns of each row of ``scores``, best first, among
    equal scores the lower column first (every column tied with the k-th best is a candidate)."""
    n = scores.shape[1]
    k = min(int(k), n)
    kth = -np.partition(-scores, k - 1, axis=1)[:, k - 1:k]  # the k-th best score of each row
    out_s = np.empty((len(scores), k), dtype=np.float32)
    out_r = np.empty((len(scores), k), dtype=np.int64)
    for i, row in enumerate(scores):
        cand = np.flatnonzero(row >= kth[i, 0])  # ascending columns
        best = cand[np.argsort(-row[cand], kind="stable")[:k]]  # stable: lower column first among ties
        out_s[i], out_r[i] = row[best], best
    return out_s, out_r


class SparseCorpus:
    """Exact inner-product search over sparse codes, with the interface of
    :class:`dive_core.retrieval.FlatCorpus`: ``search(queries, k) -> (scores, rows)``; queries may
    be dense rows or a sparse matrix."""

    def __init__(self, docs):
        self.docs = sparse_rows(docs)
        self.ntotal = int(self.docs.shape[0])

    def search(self, queries, k: int) -> tuple[np.ndarray, np.ndarray]:
        q = sparse_rows(queries)
        if q.shape[1] != self.docs.shape[1]:
            raise ValueError(f"dimension mismatch: docs {self.docs.shape[1]} vs queries {q.shape[1]}")
        step = max(1, QUERY_BLOCK_BYTES // (4 * max(1, self.ntotal)))
        parts = [top_rows((q[s:s + step] @ self.docs.T).toarray(), k) for s in range(0, q.shape[0], step)]
        if not parts:
            return np.zeros((0, min(k, self.ntotal)), np.float32), np.zeros((0, min(k, self.ntotal)), np.int64)
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def is_sparse(x) -> bool:
    """Whether ``x`` is a ``scipy.sparse`` matrix (without importing scipy for a numpy array)."""
    return type(x).__module__.startswith("scipy.sparse")
