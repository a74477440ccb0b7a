"""HDF5 embedding store: one file per (dataset, backbone).

Layout::

    /corpus/ids      utf-8 strings (n_docs,)
    /corpus/emb      float32 (n_docs, dim)   backbone output, as produced
    /queries/ids     utf-8 strings (n_queries,)
    /queries/emb     float32 (n_queries, dim)
    attrs            the embeddings record (dive_core.records): format, backbone id, dim,
                     instruction, max_length, pooling, precision, device, source fingerprint
                     (JSON), library versions (JSON), content_sha256
                     json_attrs: JSON list of the attributes stored as JSON strings

``content_sha256`` hashes ids and matrices, so two files with the same vectors have the same
fingerprint whatever HDF5 does with its own metadata. The matrices are stored without
compression: float vectors barely compress (gzip saved a few percent on MiniLM vectors) and every
later job would pay the decompression.

Embedding is resumable: :func:`embed_dataset` fills memory-mapped matrices in
``<out>.partial/`` batch by batch and logs each completed batch, so no whole-corpus buffer is
held in memory and a killed job (hours into an LLM2Vec corpus) resumes from the last completed
batch; the work folder is keyed by everything that decides the vectors (ids, texts, backbone,
batch size) and removed once the final file is written. Batches are fixed (length-sorted), so
a resumed run writes exactly the vectors of an uninterrupted one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from . import records
from .atomic import atomic_path

log = logging.getLogger(__name__)


def content_sha256(parts: Sequence[tuple[Sequence[str], np.ndarray]], chunk: int = 65536) -> str:
    h = hashlib.sha256()
    for ids, mat in parts:
        h.update("\n".join(ids).encode("utf-8"))
        h.update(b"\0")
        for s in range(0, len(mat), chunk):  # in row chunks: no copy of the whole matrix
            h.update(np.ascontiguousarray(mat[s:s + chunk], dtype="<f4").tobytes())
    return h.hexdigest()


class ResumableMatrix:
    """A float32 (n, dim) matrix filled batch by batch: ``<dir>/<name>.npy`` (memory-mapped)
    plus ``<dir>/<name>.done``, an append-only log of completed batch numbers. A batch is logged
    only after its rows are flushed, so a kill at any point loses at most the batch in flight."""

    def __init__(self, directory: Path, name: str, n: int, dim: int):
        directory.mkdir(parents=True, exist_ok=True)
        self.path, self.log = directory / f"{name}.npy", directory / f"{name}.done"
        if self.path.exists():
            self.matrix = np.load(self.path, mmap_mode="r+")
            if self.matrix.shape != (n, dim):
                raise RuntimeError(f"{self.path}: shape {self.matrix.shape}, expected {(n, dim)}")
        else:
            self.matrix = np.lib.format.open_memmap(self.path, mode="w+", dtype=np.float32, shape=(n, dim))
            self.log.unlink(missing_ok=True)
        self.done: set[int] = set()
        if self.log.exists():
            for line in self.log.read_text(encoding="utf-8").splitlines():
                if line.strip().isdigit():
                    self.done.add(int(line))

    def mark(self, batch: int) -> None:
        self.matrix.flush()
        with open(self.log, "a", encoding="utf-8") as fh:
            fh.write(f"{batch}\n")
            fh.flush()
        self.done.add(batch)


def length_sorted_batches(texts: Sequence[str], batch_size: int) -> list[np.ndarray]:
    """Index batches, longest texts first (padding waste is minimal, OOM shows up at once)."""
    order = sorted(range(len(texts)), key=lambda i: (-len(texts[i]), i))
    return [np.asarray(order[i:i + batch_size]) for i in range(0, len(order), batch_size)]


def encode_all(
    encode: Callable[[list[str]], np.ndarray],
    texts: Sequence[str],
    dim: int,
    batch_size: int,
    desc: str,
    progress: bool = True,
    store: ResumableMatrix | None = None,
) -> np.ndarray:
    """Vectors of ``texts`` in input order, encoded in length-sorted batches; with ``store``,
    written into its memory-mapped matrix, skipping the batches it already holds."""
    from tqdm import tqdm

    out = store.matrix if store is not None else np.zeros((len(texts), dim), dtype=np.float32)
    batches = length_sorted_batches(texts, batch_size)
    skip = store.done if store is not None else set()
    if skip:
        log.info("%s: resuming, %d of %d batches already encoded", desc, len(skip), len(batches))
    with tqdm(total=len(texts), desc=desc, unit="text", disable=not progress,
              mininterval=5.0) as bar:
        for b, idx in enumerate(batches):
            if b in skip:
                bar.update(len(idx))
                continue
            vecs = np.asarray(encode([texts[i] for i in idx]))
            if vecs.shape != (len(idx), dim):
                raise RuntimeError(f"{desc}: encoder returned shape {vecs.shape}, expected {(len(idx), dim)}")
            # check after the float32 cast: float64 values beyond float32 range become inf
            vecs = vecs.astype(np.float32)
            if not np.isfinite(vecs).all():
                raise RuntimeError(f"{desc}: encoder returned non-finite values")
            out[idx] = vecs
            if store is not None:
                store.mark(b)
            bar.update(len(idx))
    return out


JSON_ATTRS = "json_attrs"  # file attribute listing the attributes stored as JSON


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"attribute value of type {type(o).__name__} is not JSON serialisable")


def write_embeddings(
    path: str | Path,
    doc_ids: Sequence[str],
    docs: np.ndarray,
    query_ids: Sequence[str],
    queries: np.ndarray,
    attrs: Mapping[str, Any],
) -> str:
    import h5py

    doc_ids, query_ids = list(doc_ids), list(query_ids)
    for name, ids, mat in (("corpus", doc_ids, docs), ("queries", query_ids, queries)):
        mat = np.asarray(mat)
        if mat.ndim != 2 or mat.shape[0] != len(ids):
            raise ValueError(f"{name}: {len(ids)} ids but embedding matrix of shape {mat.shape}")
    if np.asarray(docs).shape[1] != np.asarray(queries).shape[1]:
        raise ValueError(f"corpus dim {np.asarray(docs).shape[1]} != queries dim "
                         f"{np.asarray(queries).shape[1]}")
    # Non-scalar attributes are stored as JSON strings; their names are listed in JSON_ATTRS so
    # that reading decodes exactly those (a plain string that happens to be valid JSON stays a
    # string). numpy scalars are stored as their Python value.
    plain: dict[str, Any] = {}
    json_keys: list[str] = []
    for k, v in attrs.items():
        if k in (JSON_ATTRS, "format"):
            raise ValueError(f"attribute name {k!r} is reserved")
        if isinstance(v, np.generic):
            v = v.item()
        if isinstance(v, (str, int, float, bool)):
            plain[k] = v
        else:
            plain[k] = json.dumps(v, sort_keys=True, default=_json_default)
            json_keys.append(k)

    sha = content_sha256([(doc_ids, docs), (query_ids, queries)])
    str_dt = h5py.string_dtype("utf-8")
    with atomic_path(path, suffix=".h5.tmp") as tmp:
        with h5py.File(tmp, "w", track_order=True) as f:
            for group, ids, mat in (("corpus", doc_ids, docs), ("queries", query_ids, queries)):
                g = f.create_group(group)
                g.create_dataset("ids", data=np.asarray(list(ids), dtype=object), dtype=str_dt,
                                 track_times=False)
                ds = g.create_dataset("emb", shape=np.shape(mat), dtype=np.float32, track_times=False)
                for s in range(0, len(mat), 65536):  # in row chunks: no second copy in memory
                    ds[s:s + 65536] = np.asarray(mat[s:s + 65536], dtype=np.float32)
            for k, v in plain.items():
                f.attrs[k] = v
            f.attrs[JSON_ATTRS] = json.dumps(json_keys)
            f.attrs["content_sha256"] = sha
            f.attrs["format"] = records.FORMATS["embeddings"]
    return sha


@dataclass
class Embeddings:
    """Frozen embeddings of one (dataset, backbone); matrices are L2-normalised on load."""

    doc_ids: list[str]
    docs: np.ndarray
    query_ids: list[str]
    queries: np.ndarray
    attrs: dict[str, Any]

    @property
    def dim(self) -> int:
        return int(self.docs.shape[1])

    def doc_index(self) -> dict[str, int]:
        return {d: i for i, d in enumerate(self.doc_ids)}

    def query_index(self) -> dict[str, int]:
        return {q: i for i, q in enumerate(self.query_ids)}

    def query_rows(self, qids: Sequence[str]) -> np.ndarray:
        idx = self.query_index()
        missing = [q for q in qids if q not in idx]
        if missing:
            raise KeyError(f"{len(missing)} queries have no embedding, e.g. {missing[:3]}")
        return self.queries[[idx[q] for q in qids]]


def l2_normalize(x: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return (x / np.maximum(norms, eps)).astype(np.float32)


def check_finite(path: str | Path, group: str, ids: Sequence[str], mat: np.ndarray,
                 chunk: int = 65536) -> None:
    """Refuse a matrix holding NaN or Inf (a diverged backbone, a corrupted file): name the
    file, the group and the first offending row's id."""
    for s in range(0, mat.shape[0], chunk):
        ok = np.isfinite(mat[s:s + chunk]).all(axis=1)
        if not ok.all():
            bad = np.flatnonzero(~ok)
            row = s + int(bad[0])
            n_bad = sum(int((~np.isfinite(mat[t:t + chunk]).all(axis=1)).sum())
                        for t in range(s, mat.shape[0], chunk))
            raise ValueError(f"{path}: {group}/emb holds NaN or Inf in {n_bad} row(s), first row {row} "
                             f"(id {ids[row]!r}); re-embed (delete the file and rerun)")


def read_embeddings(path: str | Path, normalize: bool = True,
                    expected_source: Mapping[str, str] | None = None,
                    against: str | Path = "the split manifest") -> Embeddings:
    """Read an embedding file (one float32 copy of each matrix), refusing NaN/Inf and, with
    ``expected_source``, a file embedded from other data than the staged data it is used with."""
    import h5py

    path = Path(path)
    try:
        with h5py.File(path, "r") as f:
            doc_ids = [s.decode() if isinstance(s, bytes) else s for s in f["corpus/ids"][()]]
            query_ids = [s.decode() if isinstance(s, bytes) else s for s in f["queries/ids"][()]]
            docs = np.asarray(f["corpus/emb"][()], dtype=np.float32)  # no copy when stored as float32
            queries = np.asarray(f["queries/emb"][()], dtype=np.float32)
            raw = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
    except (OSError, KeyError) as exc:
        raise ValueError(f"{path}: not a valid embedding file: {exc}") from exc
    json_keys = set(json.loads(raw.pop(JSON_ATTRS, "[]")))
    attrs: dict[str, Any] = {}
    for k, v in raw.items():
        if k in json_keys:
            v = json.loads(v)
        attrs[k] = v.item() if isinstance(v, np.generic) else v
    if docs.ndim != 2 or queries.ndim != 2 or len(doc_ids) != len(docs) \
            or len(query_ids) != len(queries) or docs.shape[1] != queries.shape[1]:
        raise ValueError(f"{path}: not a valid embedding file: {len(doc_ids)} doc ids / "
                         f"{docs.shape} docs, {len(query_ids)} query ids / {queries.shape} queries")
    attrs = records.check("embeddings", attrs, path)
    if expected_source is not None:
        from .data import check_same_source

        check_same_source(attrs.get("source_fingerprint"), expected_source, path, against,
                          remedy=f"delete {path} and rerun to re-embed the staged data")
    check_finite(path, "corpus", doc_ids, docs)
    check_finite(path, "queries", query_ids, queries)
    if normalize:  # in place, in chunks: the peak stays near one copy of the corpus matrix
        normalize_rows_(docs)
        normalize_rows_(queries)
    return Embeddings(doc_ids, docs, query_ids, queries, attrs)


def normalize_rows_(x: np.ndarray, eps: float = 1e-12, chunk: int = 65536) -> np.ndarray:
    """L2-normalise the rows of a float32 matrix in place (same result as :func:`l2_normalize`)."""
    for s in range(0, x.shape[0], chunk):
        block = x[s:s + chunk]
        block /= np.maximum(np.linalg.norm(block, axis=1, keepdims=True), eps)
    return x


def embed_dataset(
    backbone,
    doc_ids: Sequence[str],
    doc_texts: Sequence[str],
    query_ids: Sequence[str],
    query_texts: Sequence[str],
    out_path: str | Path,
    batch_size: int,
    extra_attrs: Mapping[str, Any] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Encode corpus and queries with ``backbone`` and write the HDF5 file; returns timings."""
    for name, ids, texts in (("corpus", doc_ids, doc_texts), ("queries", query_ids, query_texts)):
        if len(ids) != len(texts):
            raise ValueError(f"{name}: {len(ids)} ids but {len(texts)} texts")
        if len(set(ids)) != len(ids):
            raise ValueError(f"{name}: duplicate ids")
    import shutil

    work = Path(str(out_path) + ".partial")
    key = hashlib.sha256(json.dumps(
        {"backbone": backbone.id, "dim": backbone.dim, "device": backbone.device, "batch_size": batch_size,
         "attributes": backbone.attributes, "docs": [list(doc_ids), list(doc_texts)],
         "queries": [list(query_ids), list(query_texts)]}, sort_keys=True, default=_json_default).encode()).hexdigest()
    if work.exists() and (work / "key").is_file() and (work / "key").read_text() != key:
        log.info("%s: left by a run with other inputs; starting afresh", work)
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    (work / "key").write_text(key)
    t0 = time.perf_counter()
    docs = encode_all(backbone.encode_docs, doc_texts, backbone.dim, batch_size, "corpus", progress,
                      ResumableMatrix(work, "corpus", len(doc_ids), backbone.dim))
    t1 = time.perf_counter()
    queries = encode_all(backbone.encode_queries, query_texts, backbone.dim, batch_size, "queries", progress,
                         ResumableMatrix(work, "queries", len(query_ids), backbone.dim))
    t2 = time.perf_counter()
    attrs = {
        "backbone": backbone.id,
        "dim": backbone.dim,
        "device": backbone.device,
        "document_text": "title + ' ' + text, stripped",
        "batch_size": batch_size,
        **backbone.attributes,
        **(extra_attrs or {}),
        "seconds_corpus": round(t1 - t0, 3),
        "seconds_queries": round(t2 - t1, 3),
    }
    sha = write_embeddings(out_path, doc_ids, docs, query_ids, queries, attrs)
    del docs, queries
    shutil.rmtree(work, ignore_errors=True)
    log.info("wrote %s: %d docs, %d queries, dim %d (%.1fs + %.1fs)", out_path, len(doc_ids),
             len(query_ids), backbone.dim, t1 - t0, t2 - t1)
    return {"content_sha256": sha, "seconds_corpus": t1 - t0, "seconds_queries": t2 - t1}
