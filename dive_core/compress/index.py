"""The FAISS index of a compressed file, written as a stream: row i of the index is row i of the file."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from ..atomic import atomic_path
from ..vector_checks import where
from ..vectors import CHUNK_ROWS
from .codec import _ranges_of
from .errors import CompressError
from .files import _bar, open_sets, read_metadata


def faiss_index(encoding: str, k: int, ranges: tuple[np.ndarray, np.ndarray] | None = None):
    """An empty inner-product index for ``encoding``: IndexFlatIP (float32), IndexScalarQuantizer
    QT_fp16 (float16) or QT_8bit with the file's ranges (int8), as the frontier study's indexes."""
    import faiss

    if encoding == "float32":
        return faiss.IndexFlatIP(k)
    qtype = {"float16": faiss.ScalarQuantizer.QT_fp16, "int8": faiss.ScalarQuantizer.QT_8bit}[encoding]
    index = faiss.IndexScalarQuantizer(k, qtype, faiss.METRIC_INNER_PRODUCT)
    if encoding == "int8":
        faiss.copy_array_to_vector(np.concatenate(ranges).astype(np.float32), index.sq.trained)
        index.is_trained = True
    elif not index.is_trained:
        index.train(np.zeros((1, k), np.float32))
    return index


def _index_layout(index, sample: np.ndarray) -> tuple[bytes, bytes, int]:
    """``(head, tail, unit)``: ``index`` serialised with n vectors is ``head + int64(n) + tail +
    int64(n * unit) + the n codes`` (FAISS's format: fourcc, d, ntotal, ..., the codes vector);
    checked against FAISS's own serialisation of the index holding ``sample``'s first row."""
    import faiss

    empty = bytes(faiss.serialize_index(index))
    one = faiss.clone_index(index)
    one.add(np.ascontiguousarray(sample[:1], np.float32))
    full = bytes(faiss.serialize_index(one))
    codes = bytes(index.sa_encode(np.ascontiguousarray(sample[:1], np.float32)))
    n0, size0 = struct.unpack("<q", empty[8:16])[0], struct.unpack("<q", empty[-8:])[0]
    unit = struct.unpack("<q", full[len(empty) - 8:len(empty)])[0]
    if (n0, size0) != (0, 0) or full[:8] != empty[:8] or full[16:len(empty) - 8] != empty[16:-8] \
            or struct.unpack("<q", full[8:16])[0] != 1 or full[len(empty):] != codes:
        raise RuntimeError(f"FAISS {faiss.__version__} serialises {type(index).__name__} in a layout dive-compress "
                           "does not know; build the index in memory instead (dive_core.retrieval.build_index)")
    return empty[:8], empty[16:-8], unit


def write_faiss_index(vectors: str | Path, index_path: str | Path, group: str | None = None,
                      rows: int = CHUNK_ROWS, progress: bool = False) -> Path:
    """A FAISS index of a compressed file, row i = row i of the file, written as a stream (the
    index is never held in memory) under a temporary name: IndexFlatIP for float32 vectors, the
    scalar quantizer of the file's encoding for float16 and int8 (the stored codes themselves)."""
    vectors, index_path = Path(vectors), Path(index_path)
    sets = open_sets(vectors, group)
    if len(sets) > 1:
        named = [vf for vf in sets if vf.group == "corpus"]
        if not named:
            raise CompressError(f"{vectors} holds {len(sets)} vector sets: choose the one to index (group)")
        sets = named
    vf = sets[0]
    encoding = {"float32": "float32", "float16": "float16", "int8": "int8"}.get(vf.dtype)
    if encoding is None:
        raise CompressError(f"{where(vf)}: {vf.dtype} vectors; expected a dive-compress output")
    ranges = _ranges_of(read_metadata(vectors, vf.group)) if encoding == "int8" else None
    index = faiss_index(encoding, vf.dim, ranges)
    sample = np.zeros((1, vf.dim), np.float32)
    head, tail, unit = _index_layout(index, sample)
    with atomic_path(index_path, suffix=".faiss.tmp") as tmp:
        with open(tmp, "wb") as fh, _bar(vf.n, "faiss index", progress) as bar:
            fh.write(head + struct.pack("<q", vf.n) + tail + struct.pack("<q", vf.n * unit))
            for _, chunk in vf.chunks(rows, raw=True):
                if encoding == "int8":
                    codes = (chunk.astype(np.int16) + 128).astype(np.uint8)
                else:
                    codes = index.sa_encode(np.ascontiguousarray(chunk, dtype=np.float32))
                fh.write(np.ascontiguousarray(codes).tobytes())
                bar.update(len(chunk))
    return index_path
