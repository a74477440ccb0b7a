"""The FAISS index of a compressed file: row i of the index is row i of the file. Without a factory
string, the file's own vectors or codes written as a stream (IndexFlatIP, the scalar quantizer); with
one (``--index``, a ``compress:`` entry's ``faiss_index``), FAISS's index of that string, trained on
a seeded sample of the file's rows and filled chunk by chunk (:func:`index_options`, recorded in the
file's metadata as ``faiss_index``)."""

from __future__ import annotations

import re
import struct
import warnings
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from ..atomic import atomic_path
from ..quantizers import POINTS_PER_CENTROID as MIN_POINTS_PER_CENTROID  # FAISS warns below this
from ..vector_checks import where
from ..vectors import CHUNK_ROWS, VectorFile
from .codec import _ranges_of
from .errors import CompressError
from .files import _bar, decode_chunks, open_sets, read_metadata

TRAIN_SIZE = 100_000  # rows of the training sample by default (FAISS's k-means keeps at most 256 a centroid)
TRAIN_SEED = 0  # the sample's numpy Generator seed by default
CLI_NAMES = {"index": "--index", "train_size": "--faiss-train-size"}
# an index that cannot be filled as a stream, and why (FAISS's class name prefix)
NOT_STREAMED = {"IndexNSG": "builds its graph from every vector in one add (FAISS: NSG does not support "
                            "incremental addition)",
                "IndexIDMap": "adds rows only with ids of their own (add_with_ids); row i is row i here"}
SAMPLE_RULE = "rows numpy.random.default_rng(seed).choice(n, train_size, replace=False), in row order"


def option_names(name: str | None = None) -> dict[str, str]:
    """How refusals name the options: ``dive-compress``'s (:data:`CLI_NAMES`), or the keys of the
    ``compress:`` entry ``name``."""
    return dict(CLI_NAMES) if name is None else {"index": f"compress.{name}.faiss_index",
                                                 "train_size": f"compress.{name}.faiss_train_size"}


def _faiss_reason(exc: Exception) -> str:
    """FAISS's own words, without the C++ function and source line before them."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    m = re.search(r" at \S+:\d+: (?:Error: )?(.*)$", text)
    return m.group(1) if m else text


def _nodes(index) -> list:
    """``index`` and every index or vector transform inside it, downcast (the caller keeps ``index``
    alive: the children are views into it)."""
    import faiss

    out, todo = [], [faiss.downcast_index(index)]
    while todo:
        node = todo.pop()
        out.append(node)
        for attr in ("index", "quantizer", "base_index", "refine_index", "storage"):
            child = getattr(node, attr, None)
            if isinstance(child, faiss.Index):
                todo.append(faiss.downcast_index(child))
        chain = getattr(node, "chain", None)
        if chain is not None:
            out.extend(faiss.downcast_VectorTransform(chain.at(i)) for i in range(chain.size()))
    return out


def factory_index(spec: str, k: int, option: str = CLI_NAMES["index"]):
    """An empty FAISS index of the factory string ``spec`` over ``k``-dimensional vectors with the
    inner product (how the project searches its unit vectors). Refused, naming ``option``: a string
    FAISS refuses, an index FAISS builds with another metric, and one that cannot be filled as a
    stream of chunks (:data:`NOT_STREAMED`)."""
    import faiss

    if not isinstance(spec, str) or not spec.strip():
        raise CompressError(f"{option} {spec!r}: expected a FAISS factory string, such as 'OPQ16,PQ16'")
    try:
        index = faiss.index_factory(int(k), spec, faiss.METRIC_INNER_PRODUCT)
    except (RuntimeError, ValueError) as exc:
        raise CompressError(f"{option} {spec!r}: FAISS refuses this factory string for the compressed vectors "
                            f"({k} dimensions): {_faiss_reason(exc)}") from None
    for node in _nodes(index):
        for prefix, why in NOT_STREAMED.items():
            if type(node).__name__.startswith(prefix):
                raise CompressError(f"{option} {spec!r}: FAISS's {type(node).__name__} cannot be filled as a stream "
                                    f"of row chunks: it {why}")
    if index.metric_type != faiss.METRIC_INNER_PRODUCT:
        raise CompressError(f"{option} {spec!r}: FAISS builds this index with another metric than the inner product "
                            "it was asked for; the compressed vectors are searched by inner product")
    return index


def min_train_rows(index) -> int:
    """The fewest training rows FAISS's k-means accepts for ``index`` (one per centroid: a product
    quantizer's 2^nbits, OPQ's 256, an IVF's nlist, an additive quantizer's 2^nbits); 0 for an
    index that needs no training, 1 for one trained without centroids (a scalar quantizer)."""
    if index.is_trained:
        return 0
    need = 1
    for node in _nodes(index):
        pq = getattr(node, "pq", None)
        if type(node).__name__ == "OPQMatrix":
            need = max(need, 256 if pq is None else int(pq.ksub))  # OPQ trains a PQ of 8 bits unless given one
        elif pq is not None and hasattr(pq, "ksub"):
            need = max(need, int(pq.ksub))
        if hasattr(node, "nlist"):
            need = max(need, int(node.nlist))
        aq = getattr(node, "aq", None)
        if aq is not None and hasattr(aq, "nbits"):
            import faiss

            need = max(need, 2 ** int(faiss.vector_to_array(aq.nbits).max()))
    return need


def indexed_set(sets: Sequence[VectorFile], path: str | Path) -> VectorFile:
    """The vector set an index is made of: the only one, or an HDF5 file's ``corpus`` group."""
    if len(sets) == 1:
        return sets[0]
    named = [vf for vf in sets if vf.group == "corpus"]
    if not named:
        raise CompressError(f"{path} holds {len(sets)} vector sets: choose the one to index (group)")
    return named[0]


def index_options(spec: str | None, train_size: int, seed: int, k: int, sets: Sequence[VectorFile],
                  names: Mapping[str, str] = CLI_NAMES) -> dict | None:
    """The factory index's options, checked before any row is read (None without ``spec``): FAISS
    must accept ``spec`` for ``k``-dimensional vectors and fill it as a stream
    (:func:`factory_index`), and the sample, ``min(train_size, rows)`` rows of the indexed set,
    must hold at least :func:`min_train_rows` (a warning below FAISS's 39 a centroid). ``names``:
    how refusals name the options (:func:`option_names`)."""
    if spec is None:
        return None
    index = factory_index(spec, k, names["index"])
    if isinstance(train_size, bool) or not isinstance(train_size, int) or train_size < 1:
        raise CompressError(f"{names['train_size']} {train_size!r}: expected a number of rows, at least 1")
    vf = indexed_set(sets, sets[0].path)
    size, need = min(int(train_size), vf.n), min_train_rows(index)
    if size < need:
        raise CompressError(f"{names['index']} {spec!r} trains on at least {need} rows (one per centroid), but its "
                            f"sample holds {size}: {names['train_size']} {train_size} of {where(vf)}'s {vf.n} rows")
    if need > 1 and size < MIN_POINTS_PER_CENTROID * need:
        warnings.warn(f"{names['index']} {spec!r}: a sample of {size} rows ({names['train_size']}) is below the "
                      f"{MIN_POINTS_PER_CENTROID} x {need} = {MIN_POINTS_PER_CENTROID * need} FAISS asks for; its "
                      "centroids may fit these rows and few others", stacklevel=2)
    return {"factory": spec, "train_size": int(train_size), "seed": int(seed)}


def index_record(options: Mapping, n: int) -> dict:
    """What an output's record says of the factory index made from its ``n`` rows (``faiss_index``)."""
    import faiss

    size = min(int(options["train_size"]), int(n))
    return {"factory": options["factory"], "metric": "inner product", "train_size": size,
            "train_size_asked": int(options["train_size"]), "seed": int(options["seed"]), "sample": SAMPLE_RULE,
            "faiss": faiss.__version__}


def sample_rows(n: int, size: int, seed: int) -> np.ndarray:
    """The row numbers of the training sample (:data:`SAMPLE_RULE`), in increasing order."""
    return np.sort(np.random.default_rng(int(seed)).choice(int(n), size=min(int(size), int(n)), replace=False))


def training_sample(vectors: str | Path, group: str | None, n: int, size: int, seed: int,
                    rows: int = CHUNK_ROWS) -> np.ndarray:
    """The sampled rows (:func:`sample_rows`) of a compressed file as float32, gathered in one pass
    over its chunks: memory is the sample and one chunk."""
    chosen = sample_rows(n, size, seed)
    out = None
    pos = 0
    for _, chunk in decode_chunks(vectors, group, rows):
        lo, hi = np.searchsorted(chosen, [pos, pos + len(chunk)])
        if out is None:
            out = np.empty((len(chosen), chunk.shape[1]), np.float32)
        out[lo:hi] = chunk[chosen[lo:hi] - pos]
        pos += len(chunk)
    return out


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
    scalar quantizer of the file's encoding for float16 and int8 (the stored codes themselves).
    A file whose record names a factory index (``faiss_index``, :func:`index_options`) gets that
    index instead (:func:`_write_factory_index`)."""
    vectors, index_path = Path(vectors), Path(index_path)
    vf = indexed_set(open_sets(vectors, group), vectors)
    options = read_metadata(vectors, vf.group).get("faiss_index")
    if options is not None:
        return _write_factory_index(vectors, vf, index_path, options, rows, progress)
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


def _write_factory_index(vectors: Path, vf: VectorFile, index_path: Path, options: Mapping, rows: int,
                         progress: bool) -> Path:
    """The factory index ``options`` names, of the rows of ``vf`` (float32: float16 widened, int8
    decoded): trained on the seeded sample (:func:`training_sample`), then filled chunk by chunk and
    written under a temporary name. Memory: the sample, one chunk and the index itself (its codes:
    16 bytes a vector for PQ16), never the file's vectors at once. A graph index (HNSW) is filled
    on one thread: FAISS's threads would link its rows in another order each run."""
    import faiss

    index = factory_index(options["factory"], vf.dim, f"{where(vf)}: faiss_index")
    if not index.is_trained:
        sample = training_sample(vectors, vf.group, vf.n, options["train_size"], options["seed"], rows)
        try:
            index.train(sample)
        except RuntimeError as exc:
            raise CompressError(f"{where(vf)}: FAISS cannot train {options['factory']!r} on its sample of "
                                f"{len(sample)} rows (--faiss-train-size, a compress: entry's faiss_train_size): "
                                f"{_faiss_reason(exc)}") from None
        del sample
    graph = any(type(node).__name__.startswith("IndexHNSW") for node in _nodes(index))
    threads = faiss.omp_get_max_threads()
    if graph:
        faiss.omp_set_num_threads(1)
    try:
        with _bar(vf.n, "faiss index", progress) as bar:
            for _, chunk in decode_chunks(vectors, vf.group, rows):
                index.add(np.ascontiguousarray(chunk, dtype=np.float32))
                bar.update(len(chunk))
    finally:
        faiss.omp_set_num_threads(threads)
    with atomic_path(index_path, suffix=".faiss.tmp") as tmp:
        faiss.write_index(index, str(tmp))
    return index_path
