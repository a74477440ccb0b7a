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

from .vectors import ID_COLUMN

SPARSE_ENCODING = "sparse"  # the encoding name of a stored k-sparse code: (uint16 index, fp16 value) pairs
UINT16_LATENTS = 1 << 16  # latents a uint16 index addresses
VALUE_BYTES = 2  # fp16
QUERY_BLOCK_BYTES = 64 << 20  # dense score rows materialised at once by SparseCorpus.search


def code_bytes(active: int, width: int, value_bytes: int = VALUE_BYTES) -> int:
    """Bytes one stored code of ``active`` non-zeros among ``width`` latents takes: an index (uint16
    for ``width <= 65,536``, else uint32) and a value (fp16 by default) per non-zero."""
    if not 1 <= int(active) <= int(width):
        raise ValueError(f"a code has 1 to width = {width} non-zeros, got {active}")
    return int(active) * (index_dtype(width).itemsize + int(value_bytes))


def index_dtype(width: int) -> np.dtype:
    """The index type of a code among ``width`` latents: uint16 up to 65,536 latents, else uint32."""
    return np.dtype(np.uint16 if int(width) <= UINT16_LATENTS else np.uint32)


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
        self.docs_t = self.docs.T.tocsr()  # (width, n): made once, not by every product

    @property
    def nbytes(self) -> int:
        """Bytes the searched structure holds (float32 values, int32 indices, row pointers, of the
        transposed corpus): about 8 per non-zero, twice a stored code's 4."""
        t = self.docs_t
        return int(t.data.nbytes + t.indices.nbytes + t.indptr.nbytes)

    def search(self, queries, k: int) -> tuple[np.ndarray, np.ndarray]:
        q = sparse_rows(queries)
        if q.shape[1] != self.docs.shape[1]:
            raise ValueError(f"dimension mismatch: docs {self.docs.shape[1]} vs queries {q.shape[1]}")
        step = max(1, QUERY_BLOCK_BYTES // (4 * max(1, self.ntotal)))
        parts = [top_rows((q[s:s + step] @ self.docs_t).toarray(), k) for s in range(0, q.shape[0], step)]
        if not parts:
            return np.zeros((0, min(k, self.ntotal)), np.float32), np.zeros((0, min(k, self.ntotal)), np.int64)
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def stored_form(docs, queries):
    """A corpus of k-sparse codes as stored (fp16 values; :func:`code_bytes`) and its queries as
    computed (float32), both as ``scipy.sparse`` rows: what evaluation, the frontier and the
    efficiency study search."""
    return sparse_rows(docs, "float16"), sparse_rows(queries)


def is_sparse(x) -> bool:
    """Whether ``x`` is a ``scipy.sparse`` matrix (without importing scipy for a numpy array)."""
    return type(x).__module__.startswith("scipy.sparse")


# --------------------------------------------------------------------------- code files (dive-compress)
INDICES_COLUMN, VALUES_COLUMN = "indices", "values"
CODES_META_KEY = "dive_sparse_codes"


def top_pairs(x: np.ndarray, active: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row of ``x`` (n, width) as the ``active`` (index, value) pairs a stored code keeps: the
    columns of its ``active`` largest values in ascending column order (a top-k code's non-zeros;
    a row with fewer non-zeros keeps some zeros), indices uint16 (uint32 past 65,536 columns) and
    values fp16, so each row takes :func:`code_bytes` bytes."""
    x = np.asarray(x, dtype=np.float32)
    width = x.shape[1]
    code_bytes(active, width)  # refuses an impossible count
    idx = np.sort(np.argpartition(-x, active - 1, axis=1)[:, :active], axis=1)
    vals = np.take_along_axis(x, idx, 1).astype(np.float16)
    return idx.astype(index_dtype(width)), vals


def write_codes(path, blocks, n: int, width: int, active: int, metadata=None, id_column: str = ID_COLUMN):
    """Write ``n`` k-sparse codes to the Parquet file ``path`` (under a temporary name, renamed when
    every row is written): an id column, ``indices`` and ``values`` (fixed-size lists of ``active``
    uint16 / fp16 each, :func:`top_pairs`), the width in the file's metadata. ``blocks``: ``(ids,
    dense (m, width) rows)``."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from .atomic import atomic_path

    index_type = pa.from_numpy_dtype(index_dtype(width))
    meta = {**{str(k): str(v) for k, v in (metadata or {}).items()},
            CODES_META_KEY: json.dumps({"width": int(width), "active": int(active), "index": str(index_type),
                                        "value": "float16", "bytes_per_code": code_bytes(active, width)})}
    schema = pa.schema([(id_column, pa.string()), (INDICES_COLUMN, pa.list_(index_type, active)),
                        (VALUES_COLUMN, pa.list_(pa.float16(), active))], metadata=meta)
    written = 0
    with atomic_path(path, suffix=".tmp.parquet") as tmp:
        with pq.ParquetWriter(tmp, schema) as out:
            for ids, rows in blocks:
                idx, vals = top_pairs(rows, active)
                out.write_table(pa.Table.from_arrays([
                    pa.array(list(ids), pa.string()),
                    pa.FixedSizeListArray.from_arrays(pa.array(idx.reshape(-1), index_type), active),
                    pa.FixedSizeListArray.from_arrays(pa.array(vals.reshape(-1), pa.float16()), active)],
                    schema=schema))
                written += len(ids)
        if written != n:
            raise ValueError(f"{path}: {written} of {n} codes written")
    return path


def read_codes(path, id_column: str = ID_COLUMN):
    """``(ids, codes)`` of a file written by :func:`write_codes`: codes as a float32 ``scipy.sparse``
    CSR matrix (n, width) of the stored fp16 values, ready for :class:`SparseCorpus`."""
    import json

    import pyarrow.parquet as pq
    import scipy.sparse as sp

    table = pq.read_table(path)
    meta = (table.schema.metadata or {}).get(CODES_META_KEY.encode())
    if meta is None:
        raise ValueError(f"{path}: not a file of sparse codes (no {CODES_META_KEY} in its metadata)")
    info = json.loads(meta)
    n, active = table.num_rows, int(info["active"])
    idx = table.column(INDICES_COLUMN).combine_chunks().flatten().to_numpy().astype(np.int64)
    vals = table.column(VALUES_COLUMN).combine_chunks().flatten().to_numpy(zero_copy_only=False).astype(np.float32)
    codes = sp.csr_matrix((vals, idx, np.arange(0, n * active + 1, active)), shape=(n, int(info["width"])))
    codes.eliminate_zeros()
    return table.column(id_column).to_pylist(), codes
