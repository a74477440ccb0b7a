"""Vector files: embeddings computed anywhere (a GPU cluster, an embedding service), read and
written in row chunks so that memory never grows with the file.

Three formats, chosen by the file's extension:

* ``.parquet``: a string id column (default ``id``) and a vector column (default ``embedding``)
  holding a fixed-size or variable list of float16, float32 or float64 (or int8: codes written by
  ``dive-compress --encoding int8``);
* ``.npy``: an (n, d) float16/float32/float64 matrix, with ``<name>.ids.txt`` beside it, one id a
  line, in row order (and ``<name>.meta.json`` when the file has metadata);
* ``.h5`` / ``.hdf5``: the workflow's own layout, ``ids`` (strings) and ``emb`` (n, d) datasets,
  at the file's root or in a group (``corpus`` / ``queries`` in an ``embeddings.h5``).

:func:`open_vectors` reads any of them (:class:`VectorFile`, chunks of ids and float32 rows);
:class:`VectorWriter` writes them, under a temporary name renamed into place when complete.
``python -m dive_core.vectors export EMBEDDINGS.h5 DIR`` writes a workflow embedding file out as
``DIR/corpus.<ext>`` and ``DIR/queries.<ext>``, what a ``family: vectors`` backbone reads back.
No torch.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from .atomic import atomic_path
from .data import sha256_file
from .vector_checks import bad_rows, duplicate_ids, where, wrong_dimension

EXTENSIONS = {".parquet": "parquet", ".pq": "parquet", ".npy": "npy", ".h5": "h5", ".hdf5": "h5"}
FLOAT_TYPES = ("float16", "float32", "float64")
ENCODINGS = ("float32", "float16", "int8")
# Parquet column names when none are given (a `vectors` backbone, a `compress:` entry, dive-compress)
ID_COLUMN = "id"
VECTOR_COLUMN = "embedding"
CHUNK_ROWS = 65536


class VectorFileError(ValueError):
    """A vector file that cannot be read as asked; the message names the file."""


def vector_format(path: str | os.PathLike) -> str:
    """``parquet`` / ``npy`` / ``h5`` from the file's extension; an unknown one is refused."""
    ext = Path(path).suffix.lower()
    if ext not in EXTENSIONS:
        raise VectorFileError(f"{path}: unknown vector file type {ext or '(no extension)'!r}; expected one of "
                              f"{sorted(EXTENSIONS)} (Parquet, NumPy .npy with .ids.txt beside it, HDF5)")
    return EXTENSIONS[ext]


def ids_path(npy: str | os.PathLike) -> Path:
    """The id list beside a ``.npy`` matrix: ``corpus.npy`` -> ``corpus.ids.txt``."""
    return Path(npy).with_suffix(".ids.txt")


def meta_path(npy: str | os.PathLike) -> Path:
    """The metadata beside a ``.npy`` matrix (what Parquet and HDF5 keep inside the file):
    ``corpus.npy`` -> ``corpus.meta.json``, a JSON object of strings."""
    return Path(npy).with_suffix(".meta.json")


def h5_sets(path: str | os.PathLike) -> list[str | None]:
    """The vector sets of an HDF5 file: ``[None]`` for ``ids`` + ``emb`` at its root, else the
    groups that hold them (``corpus``, ``queries`` of an ``embeddings.h5``)."""
    import h5py

    try:
        with h5py.File(path, "r") as f:
            if "ids" in f and "emb" in f:
                return [None]
            return [g for g in f if isinstance(f[g], h5py.Group) and {"ids", "emb"} <= set(f[g])]
    except OSError as exc:
        raise VectorFileError(f"{path}: not a readable HDF5 file: {exc}") from None


def _ids_text(values: Sequence[Any], path: Path, start: int) -> list[str]:
    out = []
    for i, v in enumerate(values):
        if v is None or (isinstance(v, str) and v == ""):
            raise VectorFileError(f"{path}: row {start + i}: empty id")
        if isinstance(v, bytes):
            v = v.decode("utf-8")
        out.append(v if isinstance(v, str) else str(v))
    return out


class VectorFile:
    """One vector file, opened for reading in row chunks (:meth:`chunks`)."""

    def __init__(self, path: str | os.PathLike, *, id_column: str = ID_COLUMN, vector_column: str = VECTOR_COLUMN,
                 group: str | None = None):
        self.path = Path(path)
        self.format = vector_format(self.path)
        self.id_column, self.vector_column, self.group = id_column, vector_column, group
        if not self.path.is_file():
            raise VectorFileError(f"{self.path}: no such vector file")
        getattr(self, f"_open_{self.format}")()

    # ---- opening: n, dim and the stored dtype, without reading the vectors --------------------
    def _open_parquet(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            # read through a small buffer, row group by row group: memory does not grow with the file
            self._pq = pq.ParquetFile(self.path, buffer_size=1 << 20, pre_buffer=False)
        except (OSError, pa.ArrowException) as exc:
            raise VectorFileError(f"{self.path}: not a readable Parquet file: {exc}") from None
        schema = self._pq.schema_arrow
        missing = [c for c in (self.id_column, self.vector_column) if c not in schema.names]
        if missing:
            raise VectorFileError(f"{self.path}: no column(s) {missing}; it has {schema.names} (set id_column / "
                                  "vector_column)")
        vtype = schema.field(self.vector_column).type
        if not (pa.types.is_list(vtype) or pa.types.is_large_list(vtype) or pa.types.is_fixed_size_list(vtype)):
            raise VectorFileError(f"{self.path}: column {self.vector_column!r} is {vtype}, not a list of floats")
        value = vtype.value_type
        if str(value) not in (*FLOAT_TYPES, "halffloat", "float", "double", "int8"):
            raise VectorFileError(f"{self.path}: column {self.vector_column!r} holds {value}; expected float16, "
                                  "float32 or float64")
        self.dtype = {"halffloat": "float16", "float": "float32", "double": "float64"}.get(str(value), str(value))
        self.n = int(self._pq.metadata.num_rows)
        if pa.types.is_fixed_size_list(vtype):
            self.dim = int(vtype.list_size)
        else:  # a variable list: the first row's length; every row is checked against it
            self.dim = 0
            for batch in self._pq.iter_batches(batch_size=1, columns=[self.vector_column]):
                col = batch.column(0)
                self.dim = len(col[0]) if col[0].is_valid else 0
                break
        self.meta = {k.decode(): v.decode() for k, v in (self._pq.schema_arrow.metadata or {}).items()}

    def _open_npy(self) -> None:
        try:
            self._mat = np.load(self.path, mmap_mode="r")
        except (OSError, ValueError) as exc:
            raise VectorFileError(f"{self.path}: not a readable .npy matrix: {exc}") from None
        if self._mat.ndim != 2:
            raise VectorFileError(f"{self.path}: a {self._mat.ndim}-d array; expected (n, d)")
        if self._mat.dtype.name not in (*FLOAT_TYPES, "int8"):
            raise VectorFileError(f"{self.path}: dtype {self._mat.dtype}; expected float16, float32 or float64")
        self.ids_file = ids_path(self.path)
        if not self.ids_file.is_file():
            raise VectorFileError(f"{self.path}: no id list {self.ids_file.name} beside it (one id a line, "
                                  "in row order)")
        if self._mat.dtype.hasobject or not self._mat.flags.c_contiguous:
            raise VectorFileError(f"{self.path}: a Fortran-ordered or object array; expected a C-ordered (n, d) matrix")
        self.n, self.dim = map(int, self._mat.shape)
        self.dtype = self._mat.dtype.name
        self._offset = int(self._mat.offset)  # where the rows start, after the .npy header
        del self._mat  # rows are read with np.fromfile: mapped pages would count as resident memory
        with open(self.ids_file, "rb") as fh:
            n_ids = sum(1 for _ in fh)
        if n_ids != self.n:
            raise VectorFileError(f"{self.ids_file}: {n_ids} ids for the {self.n} rows of {self.path.name}")
        meta = meta_path(self.path)
        self.meta = json.loads(meta.read_text(encoding="utf-8")) if meta.is_file() else {}

    def _open_h5(self) -> None:
        import h5py

        try:
            f = h5py.File(self.path, "r")
        except OSError as exc:
            raise VectorFileError(f"{self.path}: not a readable HDF5 file: {exc}") from None
        with f:
            root = f[self.group] if self.group and self.group in f else (f if not self.group else None)
            if root is None:
                raise VectorFileError(f"{self.path}: no group {self.group!r} (it has {sorted(f)})")
            if "ids" not in root or "emb" not in root:
                groups = [g for g in h5_sets(self.path) if g]
                hint = f"; its groups {groups} have them: choose one" if groups else ""
                raise VectorFileError(f"{self.path}: no 'ids' and 'emb' datasets at {root.name}{hint}")
            emb = root["emb"]
            if emb.ndim != 2 or emb.shape[0] != root["ids"].shape[0]:
                raise VectorFileError(f"{self.path}: {root.name}: emb of shape {emb.shape} for "
                                      f"{root['ids'].shape[0]} ids")
            if emb.dtype.name not in (*FLOAT_TYPES, "int8"):
                raise VectorFileError(f"{self.path}: {root.name}/emb has dtype {emb.dtype}; expected a float type")
            self.n, self.dim, self.dtype = int(emb.shape[0]), int(emb.shape[1]), emb.dtype.name
            self._root = root.name
            self.meta = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in emb.attrs.items()}

    # ---- reading -----------------------------------------------------------------------------
    def chunks(self, rows: int = CHUNK_ROWS, raw: bool = False, start: int = 0,
               stop: int | None = None) -> Iterator[tuple[list[str], np.ndarray]]:
        """``(ids, vectors)`` of rows ``[start, stop)``, at most ``rows`` at a time; vectors as
        float32 (as stored with ``raw``). Rows of another length than :attr:`dim` and null vectors
        are refused."""
        stop = self.n if stop is None else min(int(stop), self.n)
        if 0 <= start < stop:
            yield from getattr(self, f"_chunks_{self.format}")(rows, raw, int(start), stop)

    def id_chunks(self, rows: int = CHUNK_ROWS) -> Iterator[list[str]]:
        """The ids, ``rows`` at a time from the first row, without reading the vectors (the id
        check of :mod:`dive_core.vector_checks`)."""
        if self.format == "parquet":
            pos = 0
            for batch in self._pq.iter_batches(batch_size=rows, columns=[self.id_column]):
                yield _ids_text(batch.column(0).to_pylist(), self.path, pos)
                pos += batch.num_rows
        elif self.format == "npy":
            with open(self.ids_file, encoding="utf-8", newline="\n") as fh:  # as _chunks_npy reads them
                for s in range(0, self.n, rows):
                    lines = [fh.readline().rstrip("\r\n") for _ in range(min(rows, self.n - s))]
                    yield _ids_text(lines, self.ids_file, s)
        else:
            import h5py

            with h5py.File(self.path, "r") as f:
                for s in range(0, self.n, rows):
                    yield _ids_text(list(f[self._root]["ids"][s:s + rows]), self.path, s)

    def _cast(self, mat: np.ndarray, raw: bool) -> np.ndarray:
        return mat if raw else np.asarray(mat, dtype=np.float32)

    def _chunks_parquet(self, rows: int, raw: bool, start: int, stop: int):
        import pyarrow.compute as pc

        meta, first, pos = self._pq.metadata, 0, 0
        while first < meta.num_row_groups and pos + meta.row_group(first).num_rows <= start:
            pos += meta.row_group(first).num_rows  # row groups wholly before `start` are not read
            first += 1
        groups = list(range(first, meta.num_row_groups))
        batches = self._pq.iter_batches(batch_size=rows, columns=[self.id_column, self.vector_column],
                                        row_groups=groups) if groups else []
        for batch in batches:
            at, pos = pos, pos + batch.num_rows  # the file rows [at, pos) of this batch
            a, b = max(start - at, 0), min(stop - at, batch.num_rows)
            if a < b:
                yield self._parquet_rows(batch.slice(a, b - a), at + a, raw, pc)
            if pos >= stop:
                break

    def _parquet_rows(self, batch, first_row: int, raw: bool, pc) -> tuple[list[str], np.ndarray]:
        ids = _ids_text(batch.column(0).to_pylist(), self.path, first_row)
        col = batch.column(1)
        if col.null_count:
            bad = [ids[i] for i, v in enumerate(col.is_valid().to_pylist()) if not v]
            raise VectorFileError(f"{self.path}: {col.null_count} null vector(s) in rows {first_row}..; "
                                  f"first ids {bad[:5]}")
        lengths = pc.list_value_length(col).to_numpy(zero_copy_only=False)
        wrong = np.flatnonzero(lengths != self.dim)
        if len(wrong):
            raise VectorFileError(f"{self.path}: {len(wrong)} vector(s) in rows {first_row}.. have another length "
                                  f"than {self.dim} (e.g. {lengths[wrong[0]]}); first ids {[ids[i] for i in wrong[:5]]}")
        flat = col.flatten().to_numpy(zero_copy_only=False)
        return ids, self._cast(flat.reshape(len(ids), self.dim), raw)

    def _chunks_npy(self, rows: int, raw: bool, start: int, stop: int):
        dtype = np.dtype(self.dtype)
        with open(self.ids_file, encoding="utf-8", newline="\n") as fh:  # lines as counted: split on \n only
            for _ in range(start):
                fh.readline()
            for s in range(start, stop, rows):
                e = min(s + rows, stop)
                ids = _ids_text([fh.readline().rstrip("\r\n") for _ in range(e - s)], self.ids_file, s)
                mat = np.fromfile(self.path, dtype=dtype, count=(e - s) * self.dim,
                                  offset=self._offset + s * self.dim * dtype.itemsize)
                yield ids, self._cast(mat.reshape(e - s, self.dim), raw)

    def _chunks_h5(self, rows: int, raw: bool, start: int, stop: int):
        import h5py

        with h5py.File(self.path, "r") as f:
            root = f[self._root]
            for s in range(start, stop, rows):
                e = min(s + rows, stop)
                yield _ids_text(list(root["ids"][s:e]), self.path, s), self._cast(root["emb"][s:e], raw)


def open_vectors(path: str | os.PathLike, **kwargs: Any) -> VectorFile:
    return VectorFile(path, **kwargs)


# ---- writing ---------------------------------------------------------------------------------
class VectorWriter:
    """Write ``n`` vectors of dimension ``dim`` chunk by chunk (:meth:`write`) to ``path`` in the
    format its extension names, stored as ``encoding`` (float32, float16, or int8 codes). Use as a
    context manager: the file (and a .npy's id list) appears only when every row was written."""

    def __init__(self, path: str | os.PathLike, n: int, dim: int, *, encoding: str = "float32",
                 id_column: str = ID_COLUMN, vector_column: str = VECTOR_COLUMN, group: str | None = None,
                 metadata: Mapping[str, str] | None = None):
        if encoding not in ENCODINGS:
            raise ValueError(f"encoding {encoding!r}: expected one of {ENCODINGS}")
        self.path, self.format = Path(path), vector_format(path)
        self.n, self.dim, self.encoding = int(n), int(dim), encoding
        self.id_column, self.vector_column, self.group = id_column, vector_column, group or None
        self.metadata = {str(k): str(v) for k, v in (metadata or {}).items()}
        self.written = 0

    def __enter__(self) -> "VectorWriter":
        self._stack = contextlib.ExitStack()
        self._tmp = self._stack.enter_context(atomic_path(self.path, suffix=".tmp" + self.path.suffix))
        if self.format == "npy":  # the header, then the rows in order (no memory map: RSS stays flat)
            if self.metadata:
                meta_tmp = self._stack.enter_context(atomic_path(meta_path(self.path)))
                meta_tmp.write_text(json.dumps(self.metadata, sort_keys=True), encoding="utf-8")
            self._ids_tmp = self._stack.enter_context(atomic_path(ids_path(self.path)))
            self._ids_fh = open(self._ids_tmp, "w", encoding="utf-8", newline="\n")
            self._fh = open(self._tmp, "wb")
            np.lib.format.write_array_header_1_0(self._fh, {
                "descr": np.lib.format.dtype_to_descr(np.dtype(self.encoding)), "fortran_order": False,
                "shape": (self.n, self.dim)})
        elif self.format == "h5":
            import h5py

            self._h5 = h5py.File(self._tmp, "w", track_order=True)
            root = self._h5.require_group(self.group) if self.group else self._h5
            self._ids = root.create_dataset("ids", shape=(self.n,), dtype=h5py.string_dtype("utf-8"),
                                            track_times=False)
            self._emb = root.create_dataset("emb", shape=(self.n, self.dim), dtype=self.encoding,
                                            track_times=False)
            for k, v in self.metadata.items():
                self._emb.attrs[k] = v
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            value = {"float32": pa.float32(), "float16": pa.float16(), "int8": pa.int8()}[self.encoding]
            self._schema = pa.schema([(self.id_column, pa.string()),
                                      (self.vector_column, pa.list_(value, self.dim))],
                                     metadata=self.metadata or None)
            self._pq = pq.ParquetWriter(self._tmp, self._schema)
        return self

    def write(self, ids: Sequence[str], mat: np.ndarray) -> None:
        mat = np.asarray(mat)
        if mat.ndim != 2 or mat.shape != (len(ids), self.dim):
            raise ValueError(f"{self.path}: chunk of shape {mat.shape} for {len(ids)} ids of dimension {self.dim}")
        if self.written + len(ids) > self.n:
            raise ValueError(f"{self.path}: more than the {self.n} rows announced")
        mat = mat.astype(self.encoding, copy=False)
        s, e = self.written, self.written + len(ids)
        if self.format == "npy":
            self._fh.write(np.ascontiguousarray(mat).tobytes())
            self._ids_fh.writelines(f"{i}\n" for i in ids)
        elif self.format == "h5":
            self._ids[s:e] = list(ids)
            self._emb[s:e] = mat
        else:
            import pyarrow as pa

            vectors = pa.FixedSizeListArray.from_arrays(pa.array(mat.reshape(-1)), self.dim)
            self._pq.write_table(pa.Table.from_arrays([pa.array(list(ids), pa.string()), vectors],
                                                      schema=self._schema))
        self.written = e

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            if self.format == "npy":
                self._ids_fh.close()
                self._fh.close()
            elif self.format == "h5":
                self._h5.close()
            else:
                self._pq.close()
            if exc_type is None and self.written != self.n:
                raise ValueError(f"{self.path}: {self.written} of {self.n} rows written")
        except BaseException:
            self._stack.__exit__(*sys.exc_info())
            raise
        return bool(self._stack.__exit__(exc_type, exc, tb))


# ---- a family: vectors backbone: files in, the workflow's embeddings.h5 out --------------------
SHOWN = 5  # offending ids named per problem


def source_path(spec: Mapping[str, Any], role: str, dataset: str) -> Path:
    """The ``corpus`` / ``queries`` file of a vectors backbone for ``dataset``."""
    return Path(str(spec[role]).replace("{dataset}", dataset))


def pinned_sha256(spec: Mapping[str, Any], role: str, dataset: str) -> str | None:
    """``sha256.<role>`` of a vectors backbone: one value, or a mapping dataset -> value."""
    pin = (spec.get("sha256") or {}).get(role)
    return pin.get(dataset) if isinstance(pin, Mapping) else pin


class _Problems:
    """Counts and the first few of each kind of bad row in one file (an id, or where a
    :class:`~dive_core.vector_checks.BadRow` is: row and id)."""

    def __init__(self) -> None:
        self.found: dict[str, tuple[int, list[str]]] = {}

    def add(self, what: str, labels: Sequence[str], count: int | None = None) -> None:
        count = len(labels) if count is None else count
        if count:
            n, first = self.found.get(what, (0, []))
            self.found[what] = (n + count, (first + list(labels[:SHOWN]))[:SHOWN])

    def add_ids(self, what: str, ids: Sequence[str], count: int | None = None) -> None:
        self.add(what, [repr(i) for i in ids[:SHOWN]], len(ids) if count is None else count)

    def raise_if_any(self, path: str, context: str) -> None:
        if self.found:
            lines = [f"  - {n} {what} (first: {', '.join(first)})" for what, (n, first) in self.found.items()]
            raise VectorFileError(f"{path}: cannot be ingested {context}:\n" + "\n".join(lines))


BAD_ROWS = {"duplicate": "duplicate id(s)", "nonfinite": "vector(s) with NaN or Inf", "zero": "all-zero vector(s)"}


def ingest_role(writer, group: str, vf: "VectorFile", target_ids: Sequence[str], context: str,
                also_known: set[str] | frozenset = frozenset(), rows: int = CHUNK_ROWS) -> None:
    """Copy the rows of ``vf`` whose ids are ``target_ids`` into ``group`` of an open embedding
    file (``writer.put(group, positions, rows)``), at the position of their id; refuse the file,
    naming every kind of problem with its count and first ids (rows and ids for what
    :mod:`dive_core.vector_checks` finds): ids that are neither targets nor in ``also_known`` (known
    but not wanted, e.g. unjudged queries: skipped, whatever their vectors hold), repeated ids (of
    any row), NaN/Inf, all-zero vectors, and target ids the file lacks."""
    index = {i: n for n, i in enumerate(target_ids)}
    filled = np.zeros(len(target_ids), dtype=bool)
    bad = _Problems()
    role = "documents" if group == "corpus" else "queries"
    place = where(vf)
    for b in duplicate_ids(place, lambda: vf.id_chunks(rows)):
        bad.add(BAD_ROWS[b.kind], [b.at()])
    start = 0
    for ids, mat in vf.chunks(rows):
        pos = np.fromiter((index.get(i, -1) for i in ids), dtype=np.int64, count=len(ids))
        skipped = np.fromiter((p < 0 and i in also_known for i, p in zip(ids, pos)), dtype=bool, count=len(ids))
        bad.add_ids(f"id(s) not among the staged {role}", [i for i, p, s in zip(ids, pos, skipped) if p < 0 and not s])
        for b in bad_rows(place, ids, mat, start, checked=~skipped):
            bad.add(BAD_ROWS[b.kind], [b.at()])
        start += len(ids)
        keep = np.flatnonzero(pos >= 0)
        order = keep[np.argsort(pos[keep], kind="stable")]  # no id repeats once nothing is refused
        filled[pos[order]] = True
        if not bad.found and len(order):
            writer.put(group, pos[order], mat[order])
    missing = np.flatnonzero(~filled)
    bad.add_ids(f"staged {role} missing" if group == "corpus" else "judged queries missing",
                [target_ids[i] for i in missing[:SHOWN]], count=len(missing))
    bad.raise_if_any(place, context)


def open_source(spec: Mapping[str, Any], role: str, dataset: str) -> "VectorFile":
    """The ``role`` file of a vectors backbone for ``dataset``, opened; an HDF5 file in the
    workflow's own layout is read from its ``corpus`` / ``queries`` group."""
    path = source_path(spec, role, dataset)
    group = None
    if vector_format(path) == "h5" and path.is_file():
        import h5py

        with h5py.File(path, "r") as f:
            group = role if role in f and "ids" not in f else None
    return VectorFile(path, id_column=spec.get("id_column", ID_COLUMN), vector_column=spec.get("vector_column", VECTOR_COLUMN),
                      group=group)


def ingest(backbone_id: str, spec: Mapping[str, Any], dataset: str, doc_ids: Sequence[str],
           query_ids: Sequence[str], known_queries: set[str], out_path: str | os.PathLike,
           attrs: Mapping[str, Any], rows: int = CHUNK_ROWS) -> dict[str, Any]:
    """The embedding file of a ``family: vectors`` backbone: its corpus and queries files copied,
    row chunk by row chunk, into ``out_path`` in the staged order (``doc_ids``; the judged
    ``query_ids``), with the record an encoder's embedding file has plus the source files and their
    sha256. A file that is not what the backbone says (another dimension, a pinned sha256 that
    differs, ids missing or unknown, duplicates, NaN/Inf, all-zero vectors) is refused naming it;
    nothing is written then."""
    import time

    from .embeddings import EmbeddingFile

    t0 = time.perf_counter()
    dim = int(spec["dim"])
    sources, files = {}, {}
    for role in ("corpus", "queries"):
        vf = files[role] = open_source(spec, role, dataset)
        first = next(iter(vf.id_chunks(1)), [None])[0] if vf.n else None
        wrong = wrong_dimension(where(vf), vf.dim, dim, first, f"backbones.{backbone_id}.dim is {dim}")
        if wrong is not None:
            raise VectorFileError(str(wrong))
        if vf.dtype not in FLOAT_TYPES:
            raise VectorFileError(f"{vf.path}: {vf.dtype} codes (a dive-compress int8 output?), not float vectors")
        sha = sha256_file(vf.path)
        pin = pinned_sha256(spec, role, dataset)
        if pin and sha != pin:
            raise VectorFileError(f"{vf.path}: sha256 {sha}, but backbones.{backbone_id}.sha256.{role} pins {pin}; "
                                  "the file changed (or the pin is of another file)")
        sources[role] = {"path": str(vf.path), "format": vf.format, "sha256": sha, "rows": vf.n,
                         "stored_dtype": vf.dtype}
        if vf.format == "npy":
            sources[role]["ids_sha256"] = sha256_file(vf.ids_file)
    context = f"as backbone {backbone_id!r} of dataset {dataset!r}"
    with EmbeddingFile(out_path, dim) as out:
        out.begin("corpus", doc_ids)
        ingest_role(out, "corpus", files["corpus"], doc_ids, context, rows=rows)
        out.begin("queries", query_ids)
        ingest_role(out, "queries", files["queries"], query_ids, context, also_known=known_queries, rows=rows)
        seconds = round(time.perf_counter() - t0, 3)
        sha = out.finish({"backbone": backbone_id, "family": "vectors", "dim": dim, "sources": sources,
                          "seconds_ingest": seconds, **attrs})
    return {"content_sha256": sha, "seconds": seconds, "sources": sources}


# ---- a workflow embedding file out as vector files ---------------------------------------------
def export_embeddings(embeddings_h5: str | os.PathLike, out_dir: str | os.PathLike, fmt: str = "parquet",
                      rows: int = CHUNK_ROWS) -> dict[str, Path]:
    """Write the corpus and queries of a workflow ``embeddings.h5`` as ``out_dir/corpus.<ext>`` and
    ``out_dir/queries.<ext>`` (the stored, unnormalised float32 vectors, in the file's row order)."""
    ext = {"parquet": ".parquet", "npy": ".npy", "h5": ".h5"}[fmt]
    out = {}
    for group in ("corpus", "queries"):
        src = VectorFile(embeddings_h5, group=group)
        dest = Path(out_dir) / f"{group}{ext}"
        with VectorWriter(dest, src.n, src.dim) as w:
            for ids, mat in src.chunks(rows):
                w.write(ids, mat)
        out[group] = dest
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dive_core.vectors", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("export", help="write an embeddings.h5 out as corpus and queries vector files")
    ex.add_argument("embeddings", help="a workflow embedding file (results/<dataset>/<backbone>/embeddings.h5)")
    ex.add_argument("out_dir", help="the folder to write corpus.<ext> and queries.<ext> into")
    ex.add_argument("--format", choices=("parquet", "npy", "h5"), default="parquet")
    args = ap.parse_args(argv)
    try:
        for group, path in export_embeddings(args.embeddings, args.out_dir, args.format).items():
            print(f"{group}: {path} (sha256 {sha256_file(path)})")
    except VectorFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
