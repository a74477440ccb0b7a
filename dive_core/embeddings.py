"""HDF5 embedding store: one file per (dataset, backbone).

Layout (``records.LAYOUTS["embeddings"]``, checked by every reader; a corpus shard's is
``records.LAYOUTS["embedding_shard"]``)::

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

import contextlib
import hashlib
import json
import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from . import records
from .atomic import atomic_path
from .paths import QUERIES_PART, parse_part, part_name  # noqa: F401  (part names, re-exported)

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
    batches: Sequence[int] | None = None,
) -> np.ndarray:
    """Vectors of ``texts`` encoded in length-sorted batches; with ``store``, written into its
    memory-mapped matrix, skipping the batches it already holds.

    All batches (the default): the matrix holds every text, in input order. ``batches`` (numbers
    into :func:`length_sorted_batches`, a shard's range): the matrix holds those batches' texts
    only, in encoding order (rows :func:`batch_rows` of the input)."""
    from tqdm import tqdm

    every = length_sorted_batches(texts, batch_size)
    numbers = range(len(every)) if batches is None else list(batches)
    n_rows = len(texts) if batches is None else sum(len(every[b]) for b in numbers)
    out = store.matrix if store is not None else np.zeros((n_rows, dim), dtype=np.float32)
    skip = store.done if store is not None else set()
    if skip:
        log.info("%s: resuming, %d of %d batches already encoded", desc, len(skip & set(numbers)),
                 len(numbers))
    offset = 0
    with tqdm(total=n_rows, desc=desc, unit="text", disable=not progress, mininterval=5.0) as bar:
        for b in numbers:
            idx = every[b]
            target = idx if batches is None else np.arange(offset, offset + len(idx))
            offset += len(idx)
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
            out[target] = vecs
            if store is not None:
                store.mark(b)
            bar.update(len(idx))
    return out


def shard_batches(n_batches: int, shard: int, shards: int) -> range:
    """Batch numbers of corpus shard ``shard`` (1-based) of ``shards``: contiguous, near-equal
    ranges of the length-sorted batch sequence, together covering every batch once. A shard
    encodes whole batches of the unsharded run, each with the same texts and padding, so the
    gathered vectors are the unsharded ones bit for bit (a batch's padded length changes how
    the kernels round)."""
    if not 1 <= shard <= shards:
        raise ValueError(f"shard {shard} of {shards}: shards are numbered 1..{shards}")
    return range((shard - 1) * n_batches // shards, shard * n_batches // shards)


def batch_rows(texts: Sequence[str], batch_size: int, batches: Sequence[int]) -> np.ndarray:
    """Input positions of ``batches``' texts, in encoding order (the rows of a shard's matrix)."""
    every = length_sorted_batches(texts, batch_size)
    parts = [every[b] for b in batches]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


JSON_ATTRS = "json_attrs"  # file attribute listing the attributes stored as JSON


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"attribute value of type {type(o).__name__} is not JSON serialisable")


def _write_attrs(f, attrs: Mapping[str, Any], kind: str, **fixed: Any) -> None:
    """Write ``attrs`` on an HDF5 object, then ``fixed`` and the record ``kind``'s format tag.
    Non-scalar attributes become JSON strings, their names listed in :data:`JSON_ATTRS` so that
    reading decodes exactly those (a plain string that happens to be valid JSON stays a string);
    numpy scalars are stored as their Python value. The inverse is :func:`_read_attrs`."""
    json_keys: list[str] = []
    for k, v in attrs.items():
        if k in (JSON_ATTRS, "format", *fixed):
            raise ValueError(f"attribute name {k!r} is reserved")
        if isinstance(v, np.generic):
            v = v.item()
        if not isinstance(v, (str, int, float, bool)):
            v = json.dumps(v, sort_keys=True, default=_json_default)
            json_keys.append(k)
        f.attrs[k] = v
    f.attrs[JSON_ATTRS] = json.dumps(json_keys)
    for k, v in fixed.items():
        f.attrs[k] = v
    f.attrs["format"] = records.FORMATS[kind]


def _read_attrs(f) -> dict[str, Any]:
    """An HDF5 object's attributes, JSON ones decoded (the inverse of :func:`_write_attrs`)."""
    raw = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
    json_keys = set(json.loads(raw.pop(JSON_ATTRS, "[]")))
    return {k: json.loads(v) if k in json_keys else (v.item() if isinstance(v, np.generic) else v)
            for k, v in raw.items()}


def _read_ids(ds) -> list[str]:
    return [s.decode() if isinstance(s, bytes) else s for s in ds[()]]


class EmbeddingFile:
    """An embedding file (``records.LAYOUTS["embeddings"]``) written group by group and row chunk by
    row chunk, in any row order, so that memory never holds a whole matrix::

        with EmbeddingFile(path, dim) as f:
            f.begin("corpus", doc_ids)
            f.put("corpus", rows, vectors)   # rows: a slice, or increasing row numbers
            f.begin("queries", query_ids)
            ...
            f.finish(attrs)                  # content_sha256 from what was written, attributes, checks

    The file appears under ``path`` only after :meth:`finish` and a clean exit."""

    def __init__(self, path: str | Path, dim: int):
        self.path, self.dim = Path(path), int(dim)
        self.ids: dict[str, list[str]] = {}
        self.sha: str | None = None

    def __enter__(self) -> "EmbeddingFile":
        import h5py

        self._stack = contextlib.ExitStack()
        tmp = self._stack.enter_context(atomic_path(self.path, suffix=".h5.tmp"))
        self.f = self._stack.enter_context(h5py.File(tmp, "w", track_order=True))
        return self

    def begin(self, group: str, ids: Sequence[str]) -> None:
        self.ids[group] = list(ids)
        records.h5_dataset("embeddings", self.f, f"{group}/ids", data=self.ids[group])
        records.h5_dataset("embeddings", self.f, f"{group}/emb", shape=(len(self.ids[group]), self.dim))

    def put(self, group: str, rows: slice | np.ndarray, mat: np.ndarray) -> None:
        """Write ``mat`` into ``rows`` of ``group`` (consecutive runs of row numbers as one write)."""
        ds, mat = self.f[f"{group}/emb"], np.asarray(mat, dtype=np.float32)
        if isinstance(rows, slice):
            ds[rows] = mat
            return
        rows = np.asarray(rows)
        if not len(rows):
            return
        breaks = np.flatnonzero(np.diff(rows) != 1) + 1
        for a, b in zip(np.r_[0, breaks], np.r_[breaks, len(rows)]):
            ds[rows[a]:rows[a] + (b - a)] = mat[a:b]

    def finish(self, attrs: Mapping[str, Any]) -> str:
        sha = content_sha256([(self.ids[g], self.f[f"{g}/emb"]) for g in ("corpus", "queries")])
        _write_attrs(self.f, attrs, "embeddings", content_sha256=sha)
        records.check_h5("embeddings", self.f, self.path)
        self.sha = sha
        return sha

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None and self.sha is None:
            try:
                raise ValueError(f"{self.path}: written without finish(); nothing kept")
            except ValueError:
                self._stack.__exit__(*sys.exc_info())
                raise
        return bool(self._stack.__exit__(exc_type, exc, tb))


def write_embeddings(
    path: str | Path,
    doc_ids: Sequence[str],
    docs: np.ndarray,
    query_ids: Sequence[str],
    queries: np.ndarray,
    attrs: Mapping[str, Any],
) -> str:
    doc_ids, query_ids = list(doc_ids), list(query_ids)
    for name, ids, mat in (("corpus", doc_ids, docs), ("queries", query_ids, queries)):
        mat = np.asarray(mat)
        if mat.ndim != 2 or mat.shape[0] != len(ids):
            raise ValueError(f"{name}: {len(ids)} ids but embedding matrix of shape {mat.shape}")
    if np.asarray(docs).shape[1] != np.asarray(queries).shape[1]:
        raise ValueError(f"corpus dim {np.asarray(docs).shape[1]} != queries dim "
                         f"{np.asarray(queries).shape[1]}")
    with EmbeddingFile(path, np.shape(docs)[1]) as f:
        for group, ids, mat in (("corpus", doc_ids, docs), ("queries", query_ids, queries)):
            f.begin(group, ids)
            for s in range(0, len(mat), 65536):  # in row chunks: no second copy in memory
                f.put(group, slice(s, s + 65536), mat[s:s + 65536])
        return f.finish(attrs)


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

    def doc_positions(self, ids: Sequence[str]) -> np.ndarray:
        """The row numbers of the documents ``ids`` in :attr:`docs` (in the order of ``ids``)."""
        idx = self.doc_index()
        missing = [d for d in ids if d not in idx]
        if missing:
            raise KeyError(f"{len(missing)} documents have no embedding, e.g. {missing[:3]}")
        return np.asarray([idx[d] for d in ids], dtype=np.int64)

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
        f = h5py.File(path, "r")
    except OSError as exc:
        raise ValueError(f"{path}: not a valid embedding file: {exc}") from exc
    with f:
        records.check_h5("embeddings", f, path)  # datasets, types and shapes, before any is read
        attrs = records.check("embeddings", _read_attrs(f), path)
        try:
            doc_ids, query_ids = _read_ids(f["corpus/ids"]), _read_ids(f["queries/ids"])
            docs = np.asarray(f["corpus/emb"][()], dtype=np.float32)  # stored as float32: no copy
            queries = np.asarray(f["queries/emb"][()], dtype=np.float32)
        except OSError as exc:
            raise ValueError(f"{path}: not a valid embedding file: {exc}") from exc
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


def _checked_inputs(doc_ids, doc_texts, query_ids, query_texts) -> None:
    for name, ids, texts in (("corpus", doc_ids, doc_texts), ("queries", query_ids, query_texts)):
        if len(ids) != len(texts):
            raise ValueError(f"{name}: {len(ids)} ids but {len(texts)} texts")
        if len(set(ids)) != len(ids):
            raise ValueError(f"{name}: duplicate ids")


def inputs_key(backbone, batch_size: int, doc_ids, doc_texts, query_ids, query_texts) -> str:
    """sha256 of everything that decides the vectors: backbone, device, batch size, ids, texts.
    Keys a resumable work folder, and ties a sharded embedding's parts to one another."""
    return hashlib.sha256(json.dumps(
        {"backbone": backbone.id, "dim": backbone.dim, "device": backbone.device, "batch_size": batch_size,
         "attributes": backbone.attributes, "docs": [list(doc_ids), list(doc_texts)],
         "queries": [list(query_ids), list(query_texts)]}, sort_keys=True, default=_json_default).encode()).hexdigest()


def _work_folder(out_path: str | Path, key: str) -> Path:
    """``<out>.partial/`` for a resumable job, emptied if a run with other inputs left it."""
    import shutil

    work = Path(str(out_path) + ".partial")
    if work.exists() and (work / "key").is_file() and (work / "key").read_text() != key:
        log.info("%s: left by a run with other inputs; starting afresh", work)
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    (work / "key").write_text(key)
    return work


def _backbone_attrs(backbone, batch_size: int, extra_attrs: Mapping[str, Any] | None) -> dict[str, Any]:
    return {"backbone": backbone.id, "dim": backbone.dim, "device": backbone.device,
            "document_text": "title + ' ' + text, stripped", "batch_size": batch_size,
            **backbone.attributes, **(extra_attrs or {})}


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
    import shutil

    _checked_inputs(doc_ids, doc_texts, query_ids, query_texts)
    work = _work_folder(out_path, inputs_key(backbone, batch_size, doc_ids, doc_texts, query_ids, query_texts))
    t0 = time.perf_counter()
    docs = encode_all(backbone.encode_docs, doc_texts, backbone.dim, batch_size, "corpus", progress,
                      ResumableMatrix(work, "corpus", len(doc_ids), backbone.dim))
    t1 = time.perf_counter()
    queries = encode_all(backbone.encode_queries, query_texts, backbone.dim, batch_size, "queries", progress,
                         ResumableMatrix(work, "queries", len(query_ids), backbone.dim))
    t2 = time.perf_counter()
    attrs = {**_backbone_attrs(backbone, batch_size, extra_attrs),
             "seconds_corpus": round(t1 - t0, 3), "seconds_queries": round(t2 - t1, 3)}
    sha = write_embeddings(out_path, doc_ids, docs, query_ids, queries, attrs)
    del docs, queries
    shutil.rmtree(work, ignore_errors=True)
    log.info("wrote %s: %d docs, %d queries, dim %d (%.1fs + %.1fs)", out_path, len(doc_ids),
             len(query_ids), backbone.dim, t1 - t0, t2 - t1)
    return {"content_sha256": sha, "seconds_corpus": t1 - t0, "seconds_queries": t2 - t1}


# ---- sharded embedding: one job per corpus range (and one for the queries), then a gather --------
# the part names and their grammar: dive_core.paths (part_name, parse_part), also the rules' wildcard


def embed_part(
    backbone,
    part: str,
    doc_ids: Sequence[str],
    doc_texts: Sequence[str],
    query_ids: Sequence[str],
    query_texts: Sequence[str],
    out_path: str | Path,
    batch_size: int,
    extra_attrs: Mapping[str, Any] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Encode one part of a sharded embedding (see :func:`part_name`) into a shard file
    (record ``embedding_shard``: ``/ids``, ``/rows`` the input positions, ``/emb``), resumable like
    :func:`embed_dataset`; :func:`gather_embeddings` assembles the parts."""
    import shutil

    import h5py

    _checked_inputs(doc_ids, doc_texts, query_ids, query_texts)
    key = inputs_key(backbone, batch_size, doc_ids, doc_texts, query_ids, query_texts)
    shard, shards = parse_part(part)
    if shard is None:
        ids, texts, encode, batches, desc = query_ids, query_texts, backbone.encode_queries, None, "queries"
        rows = np.arange(len(ids))
    else:
        ids, texts, encode, desc = doc_ids, doc_texts, backbone.encode_docs, f"corpus {shard}/{shards}"
        batches = shard_batches(len(length_sorted_batches(texts, batch_size)), shard, shards)
        rows = batch_rows(texts, batch_size, batches)
    work = _work_folder(out_path, key)
    t0 = time.perf_counter()
    mat = encode_all(encode, texts, backbone.dim, batch_size, desc, progress,
                     ResumableMatrix(work, "part", len(rows), backbone.dim), batches=batches)
    seconds = time.perf_counter() - t0
    attrs = {**_backbone_attrs(backbone, batch_size, extra_attrs), "part": part, "shard": shard or 0,
             "shards": shards or 0, "inputs_key": key, "n_docs": len(doc_ids), "n_queries": len(query_ids),
             "seconds": round(seconds, 3)}
    with atomic_path(out_path, suffix=".h5.tmp") as tmp:
        with h5py.File(tmp, "w", track_order=True) as f:  # the datasets of records.LAYOUTS["embedding_shard"]
            records.h5_dataset("embedding_shard", f, "ids", data=[ids[i] for i in rows])
            records.h5_dataset("embedding_shard", f, "rows", data=np.asarray(rows, dtype=np.int64))
            records.h5_dataset("embedding_shard", f, "emb", data=np.asarray(mat, dtype=np.float32))
            _write_attrs(f, attrs, "embedding_shard")
            records.check_h5("embedding_shard", f, out_path)
    del mat
    shutil.rmtree(work, ignore_errors=True)
    log.info("wrote %s: %s, %d rows, dim %d (%.1fs)", out_path, part, len(rows), backbone.dim, seconds)
    return {"part": part, "rows": len(rows), "seconds": seconds}


SHARD_ONLY_ATTRS = ("part", "shard", "shards", "inputs_key", "n_docs", "n_queries", "seconds")


def gather_embeddings(paths: Sequence[str | Path], out_path: str | Path) -> dict[str, Any]:
    """Assemble the parts of a sharded embedding (one ``queries`` part and corpus shards 1..n of
    one run: same inputs key) into the embeddings file. Its vectors, ids and ``content_sha256``
    are those of the unsharded run; its attributes are the queries part's (``runtime`` included)
    plus ``shards``, the summed ``seconds_corpus`` and every part's runtime (``part_runtimes``). Missing, duplicated, foreign
    or overlapping parts are refused, naming the files."""
    import h5py

    parts: dict[str, tuple[Path, dict]] = {}
    for p in map(Path, paths):
        try:
            f = h5py.File(p, "r")
        except OSError as exc:
            raise ValueError(f"{p}: not a readable embedding shard: {exc}") from exc
        with f:
            records.check_h5("embedding_shard", f, p)
            attrs = records.check("embedding_shard", _read_attrs(f), p)
        if attrs["part"] in parts:
            raise ValueError(f"{p} and {parts[attrs['part']][0]}: the same part {attrs['part']!r} twice")
        parts[attrs["part"]] = (p, attrs)
    if QUERIES_PART not in parts:
        raise ValueError(f"no queries part among {[str(p) for p in paths]}")
    first = parts[QUERIES_PART][1]
    corpus = sorted((a["shard"], a["shards"], p) for name, (p, a) in parts.items() if name != QUERIES_PART)
    n = corpus[0][1] if corpus else 0
    if [s for s, _, _ in corpus] != list(range(1, n + 1)) or any(m != n for _, m, _ in corpus):
        raise ValueError(f"corpus shards {[(s, m) for s, m, _ in corpus]} from {[str(p) for p in paths]}: "
                         f"expected shards 1..{n} of {n}, each once")
    for p, a in parts.values():
        if a["inputs_key"] != first["inputs_key"]:
            raise ValueError(f"{p}: embedded from other inputs (backbone, texts or batch size) than "
                             f"{parts[QUERIES_PART][0]}; delete the shards and rerun")
    dim, n_docs, n_queries = int(first["dim"]), int(first["n_docs"]), int(first["n_queries"])
    docs = np.zeros((n_docs, dim), dtype=np.float32)
    doc_ids: list[str | None] = [None] * n_docs
    filled = np.zeros(n_docs, dtype=bool)
    for _, _, p in corpus:
        with h5py.File(p, "r") as f:
            rows = f["rows"][()]
            if filled[rows].any():
                raise ValueError(f"{p}: rows already filled by another shard")
            filled[rows] = True
            docs[rows] = f["emb"][()]
            for r, i in zip(rows, _read_ids(f["ids"])):
                doc_ids[r] = i
    if not filled.all():
        raise ValueError(f"the shards {[str(p) for _, _, p in corpus]} leave {int((~filled).sum())} of "
                         f"{n_docs} documents without a vector")
    with h5py.File(parts[QUERIES_PART][0], "r") as f:
        query_ids, queries = _read_ids(f["ids"]), np.asarray(f["emb"][()], dtype=np.float32)
    if len(query_ids) != n_queries:
        raise ValueError(f"{parts[QUERIES_PART][0]}: {len(query_ids)} queries, expected {n_queries}")
    attrs = {k: v for k, v in first.items() if k not in SHARD_ONLY_ATTRS and k != "format"}
    attrs.update(shards=n, seconds_corpus=round(sum(parts[part_name(s, n)][1]["seconds"] for s, _, _ in corpus), 3),
                 seconds_queries=first["seconds"],
                 part_runtimes={name: a.get("runtime") for name, (_, a) in sorted(parts.items())})
    sha = write_embeddings(out_path, doc_ids, docs, query_ids, queries, attrs)
    log.info("wrote %s from %d corpus shards and the queries part (content_sha256 %s)", out_path, n, sha[:12])
    return {"content_sha256": sha, "shards": n}

