"""Compressing rows: L2-normalised, compressed in batches of at least :data:`MIN_BATCH` rows, chunk
by chunk (:func:`chunk_rows`), and regrouped into the blocks that are written (:func:`write_rows`)."""

from __future__ import annotations

from typing import Iterable, Iterator, Sequence

import numpy as np

from ..vector_checks import bad_rows, where
from ..vectors import CHUNK_ROWS, VectorFile
from .errors import CompressError

MIN_BATCH = 64  # rows of the smallest compute batch: below ~12, BLAS takes other kernels (other last bits)
# float32 intermediates of one compute chunk (input, hidden layers, output), by device type. On a CPU,
# 32 MB chunks compress 768 -> 64 at 0.80 of the matrix-product rate (useful FLOPs, mean of 4 runs,
# 0.78-0.82) against 0.69 for 128 MB ones, whose hidden layer falls out of cache (2 EPYC cores,
# benchmarks/compress_speed.py, docs/performance.md); a GPU wants large ones.
COMPUTE_BYTES = {"cpu": 32 << 20, "cuda": 128 << 20}
WRITE_BYTES = 16 << 20  # one written block of output rows (a Parquet row group)


def chunk_rows(method) -> int:
    """Rows compressed at once: as many as keep one chunk's float32 intermediates (input, the
    adapter's hidden layer and its activation, output) within :data:`COMPUTE_BYTES` of the method's
    device type, a multiple of :data:`MIN_BATCH` (large matrix products, bounded memory)."""
    import torch

    width = int(method.d) + int(method.k) + 2 * int(method.hp.get("hidden", method.d))
    budget = COMPUTE_BYTES.get(torch.device(getattr(method, "device", "cpu")).type, COMPUTE_BYTES["cuda"])
    rows = budget // (4 * width)
    return int(min(CHUNK_ROWS, max(MIN_BATCH, rows - rows % MIN_BATCH)))


def write_rows(k: int) -> int:
    """Rows of one written block (a Parquet row group, one HDF5 write): fixed by ``k`` alone, so the
    CLI and a gathered workflow output write the same blocks (the same bytes)."""
    rows = WRITE_BYTES // (4 * max(1, int(k)))
    return int(min(CHUNK_ROWS, max(1024, rows)))


def compress_rows(method, x: np.ndarray, side: str = "document") -> np.ndarray:
    """L2-normalise the rows of ``x`` (as the workflow normalises embeddings,
    :func:`dive_core.embeddings.normalize_rows_`) and compress them with ``method.compress`` in
    one batch of at least :data:`MIN_BATCH` rows (zero rows pad a shorter one, then are dropped)."""
    from ..embeddings import normalize_rows_

    x = np.asarray(x, dtype=np.float32)
    m = x.shape[0]
    if m < MIN_BATCH:
        padded = np.zeros((MIN_BATCH, x.shape[1]), dtype=np.float32)
        padded[:m] = x
        x = padded
    elif not (x.flags.writeable and x.flags.c_contiguous):
        x = np.array(x, dtype=np.float32, order="C")  # a read-only view (Arrow's buffer): normalised in a copy
    normalize_rows_(x)
    out = np.empty((x.shape[0], int(method.k)), dtype=np.float32)
    method.compress(x, batch_size=x.shape[0], out=out, side=side)
    return out[:m]


def compressed_chunks(method, vf: VectorFile, start: int = 0, stop: int | None = None, rows: int | None = None,
                      bar=None, side: str = "document", monitor=None,
                      allow_zero_rows: bool = False) -> Iterator[tuple[list[str], np.ndarray]]:
    """``(ids, compressed float32 rows)`` of rows ``[start, stop)`` of ``vf``, chunk by chunk, by
    the map of ``side`` (documents or queries); each chunk's input rows and codes go to
    ``monitor.update`` (a :class:`~dive_core.compress.drift.DriftMonitor`) when given. A row with NaN
    or Inf, or (unless ``allow_zero_rows``) only zeros, is refused before its chunk is compressed
    (:func:`dive_core.vector_checks.bad_rows`), naming file, row and id."""
    stop = vf.n if stop is None else stop
    pos = start
    for ids, x in vf.chunks(rows or chunk_rows(method), start=start, stop=stop):
        bad = bad_rows(where(vf), ids, x, pos, allow_zero_rows=allow_zero_rows)
        if bad:
            raise CompressError(str(bad[0]))
        raw = x.copy() if monitor is not None else None  # compress_rows may normalise x in place
        y = compress_rows(method, x, side)
        if monitor is not None:
            monitor.update(raw, y)
        pos += len(ids)
        if bar is not None:
            bar.update(len(ids))
        yield ids, y


def rechunk(chunks: Iterable[tuple[Sequence[str], np.ndarray]], rows: int) -> Iterator[tuple[list[str], np.ndarray]]:
    """The same rows in blocks of exactly ``rows`` (the last one shorter)."""
    ids_buf: list[str] = []
    mats: list[np.ndarray] = []
    have = 0
    for ids, mat in chunks:
        pos = 0
        while pos < len(ids):
            take = min(rows - have, len(ids) - pos)
            ids_buf.extend(ids[pos:pos + take])
            mats.append(mat[pos:pos + take])
            have += take
            pos += take
            if have == rows:
                yield ids_buf, (mats[0] if len(mats) == 1 else np.concatenate(mats))
                ids_buf, mats, have = [], [], 0
    if have:
        yield ids_buf, (mats[0] if len(mats) == 1 else np.concatenate(mats))
