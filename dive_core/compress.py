"""A trained compressor applied to a vector file: vectors in, vectors out, in bounded memory.

    dive-compress MODEL INPUT OUTPUT [--encoding float32|float16|int8] [--faiss PATH]

MODEL is a trained compressor: a workflow checkpoint (``results/.../model.pt``) or an exported
folder (:mod:`dive_core.export`). INPUT holds raw backbone vectors (Parquet, ``.npy`` with its
``.ids.txt``, or HDF5: :mod:`dive_core.vectors`); each row is L2-normalised as the workflow
normalises embeddings, then compressed by ``Method.compress`` (which L2-normalises the output).
OUTPUT gets the compressed vectors in the format its extension names, rows and ids in the input's
order (Parquet: the input's id column and an ``embedding`` column). An HDF5 input in the workflow's
``embeddings.h5`` layout has groups (``corpus``, ``queries``): each is compressed into the same
group of an HDF5 output.

Encodings (``--encoding``): ``float32``; ``float16``; ``int8``: FAISS's SQ8 (``ScalarQuantizer``
``QT_8bit`` with its default per-coordinate min/max range, what the frontier study calls ``sq8``),
its ranges taken from the whole compressed input: a first streaming pass compresses every row to a
float32 spool beside the output and records each coordinate's min/max, the second encodes the
spool. The ranges are stored in the file's metadata (:func:`read_metadata`); :func:`decode` /
:func:`sq8_decode` turn the codes back into vectors, as FAISS reconstructs them. Codes are stored
as ``code - 128`` (int8).

Memory does not grow with the file: rows are read, normalised, compressed and written in chunks
(:func:`chunk_rows`); a compute batch never has fewer than :data:`MIN_BATCH` rows (a short last
chunk is padded), so every row's output is the same however the file is split into chunks or
shards. The output (and ``--faiss``'s index) is written under a temporary name and appears only
when complete.

The workflow (``rules/compress.smk``) applies a compressor to the files of the ``compress:``
config section, one job or ``shards`` row-range jobs (:func:`compress_part`) gathered by
:func:`gather` into the same bytes that ``dive-compress`` writes. This module imports torch only
where a compressor is loaded: the Snakefile reads its config helpers.
"""

from __future__ import annotations

import argparse
import json
import shutil
import struct
import sys
import tempfile
import time
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

from . import records
from .atomic import atomic_path
from .resources import compress_resources as job_resources  # noqa: F401  (the model lives in dive_core.resources)
from .vectors import (CHUNK_ROWS, ENCODINGS, ID_COLUMN, VECTOR_COLUMN, VectorFile, VectorFileError, VectorWriter,
                      h5_sets, ids_path, meta_path, open_vectors, vector_format)

MIN_BATCH = 64  # rows of the smallest compute batch: below ~12, BLAS takes other kernels (other last bits)
COMPUTE_BYTES = 128 << 20  # float32 intermediates of one compute chunk (input, hidden layers, output)
WRITE_BYTES = 16 << 20  # one written block of output rows (a Parquet row group)
SPOOL_SET = "set{}.h5"  # the float32 spool of the i-th vector set, in a part folder


class CompressError(ValueError):
    """An input, model or output that cannot be used as asked; the message names the file."""


# --------------------------------------------------------------------------- the compressor
def load_model(path: str | Path, device: str = "cpu"):
    """The compressor in ``path``: a workflow checkpoint file, or an exported folder."""
    p = Path(path)
    if p.is_dir():
        from .export import load_compressor

        try:
            return load_compressor(p, device)
        except (FileNotFoundError, ValueError) as exc:
            raise CompressError(f"{p}: not a usable compressor folder: {exc}") from None
    if p.is_file():
        from .methods import Method

        try:
            return Method.load(p, device)
        except ValueError as exc:  # records.RecordError names the file
            raise CompressError(str(exc)) from None
    raise CompressError(f"{p}: no such compressor (expected a workflow checkpoint model.pt or an exported folder)")


def _method(model, device: str = "cpu"):
    return model if hasattr(model, "compress") and hasattr(model, "k") else load_model(model, device)


RUN_KEYS = ("dataset", "backbone", "method", "stage")


def provenance(method) -> dict:
    """What the compressor is: type, d -> k, seed, weights sha256, hyperparameters, and where a
    workflow trained it (dataset, backbone, method, stage) when its checkpoint or export says."""
    meta = dict(method.meta or {})
    source = "export" if "export" in meta else "checkpoint"
    run = (meta.get("export") or {}) if source == "export" else meta
    prov = {"type": method.type, "d": int(method.d), "k": int(method.k), "seed": int(method.seed),
            "weights_sha256": method.state_sha256(), "hparams": dict(method.hp), "source": source}
    prov.update({key: run[key] for key in RUN_KEYS if run.get(key) is not None})
    return prov


def describe(prov: Mapping[str, Any]) -> str:
    """One human-readable paragraph of :func:`provenance`."""
    lines = [f"compressor: {prov['type']} {prov['d']} -> {prov['k']} dimensions, seed {prov['seed']}, "
             f"weights sha256 {prov['weights_sha256']} ({prov['source']})"]
    run = [f"{key} {prov[key]}" for key in RUN_KEYS if key in prov]
    lines.append("  trained by the workflow: " + ", ".join(run) if run else
                 "  no workflow run recorded (dataset/backbone/method/stage unknown)")
    return "\n".join(lines)


# --------------------------------------------------------------------------- compressing rows
def chunk_rows(method) -> int:
    """Rows compressed at once: as many as keep one chunk's float32 intermediates (input, the
    adapter's hidden layer and its activation, output) within :data:`COMPUTE_BYTES`, a multiple of
    :data:`MIN_BATCH` (large matrix products, bounded memory)."""
    width = int(method.d) + int(method.k) + 2 * int(method.hp.get("hidden", method.d))
    rows = COMPUTE_BYTES // (4 * width)
    return int(min(CHUNK_ROWS, max(MIN_BATCH, rows - rows % MIN_BATCH)))


def write_rows(k: int) -> int:
    """Rows of one written block (a Parquet row group, one HDF5 write): fixed by ``k`` alone, so the
    CLI and a gathered workflow output write the same blocks (the same bytes)."""
    rows = WRITE_BYTES // (4 * max(1, int(k)))
    return int(min(CHUNK_ROWS, max(1024, rows)))


def compress_rows(method, x: np.ndarray) -> np.ndarray:
    """L2-normalise the rows of ``x`` (as the workflow normalises embeddings,
    :func:`dive_core.embeddings.normalize_rows_`) and compress them with ``method.compress`` in
    one batch of at least :data:`MIN_BATCH` rows (zero rows pad a shorter one, then are dropped)."""
    from .embeddings import normalize_rows_

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
    method.compress(x, batch_size=x.shape[0], out=out)
    return out[:m]


def _finite(vf: VectorFile, ids: Sequence[str], x: np.ndarray, start: int) -> None:
    ok = np.isfinite(x).all(axis=1)
    if not ok.all():
        bad = int(np.flatnonzero(~ok)[0])
        where = f"{vf.path}" + (f" ({vf.group})" if vf.group else "")
        raise CompressError(f"{where}: row {start + bad} (id {ids[bad]!r}) holds NaN or Inf")


def compressed_chunks(method, vf: VectorFile, start: int = 0, stop: int | None = None, rows: int | None = None,
                      bar=None) -> Iterator[tuple[list[str], np.ndarray]]:
    """``(ids, compressed float32 rows)`` of rows ``[start, stop)`` of ``vf``, chunk by chunk."""
    stop = vf.n if stop is None else stop
    pos = start
    for ids, x in vf.chunks(rows or chunk_rows(method), start=start, stop=stop):
        _finite(vf, ids, x, pos)
        y = compress_rows(method, x)
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


# --------------------------------------------------------------------------- SQ8 (FAISS QT_8bit)
def sq8_ranges(vmin: np.ndarray, vmax: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(vmin, vdiff)`` as FAISS's ``ScalarQuantizer`` trains QT_8bit (RS_minmax, rangestat_arg 0)
    from the per-coordinate minimum and maximum of the vectors."""
    vmin = np.asarray(vmin, dtype=np.float32)
    return vmin, (np.asarray(vmax, dtype=np.float32) - vmin).astype(np.float32)


def sq8_encode(y: np.ndarray, vmin: np.ndarray, vdiff: np.ndarray) -> np.ndarray:
    """FAISS's QT_8bit codes of float32 rows, ``int(255 * clip((y - vmin) / vdiff, 0, 1))`` (0 where
    vdiff = 0), stored as ``code - 128`` (int8)."""
    y = np.asarray(y, dtype=np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (y - vmin) / vdiff
    t = np.where(vdiff != 0, t, np.float32(0))
    np.clip(t, np.float32(0), np.float32(1), out=t)
    return ((np.float32(255) * t).astype(np.int16) - 128).astype(np.int8)


def sq8_decode(codes: np.ndarray, vmin: np.ndarray, vdiff: np.ndarray) -> np.ndarray:
    """Float32 rows from stored int8 codes, as FAISS reconstructs QT_8bit:
    ``vmin + (code + 0.5) / 255 * vdiff``."""
    c = np.asarray(codes).astype(np.float32) + np.float32(128.5)
    return (np.asarray(vmin, np.float32) + (c / np.float32(255)) * np.asarray(vdiff, np.float32)).astype(np.float32)


def _ranges_of(record: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    sq8 = record.get("sq8") or {}
    if "vmin" not in sq8 or "vdiff" not in sq8:
        raise CompressError("no SQ8 ranges in the file's dive_compressed metadata")
    return np.asarray(sq8["vmin"], dtype=np.float32), np.asarray(sq8["vdiff"], dtype=np.float32)


def _floats(a: np.ndarray) -> list[float]:
    return [float(v) for v in np.asarray(a, dtype=np.float32)]  # a float32 round-trips through its float


# --------------------------------------------------------------------------- inputs and outputs
def open_sets(path: str | Path, group: str | None = None, id_column: str = ID_COLUMN,
              vector_column: str = VECTOR_COLUMN) -> list[VectorFile]:
    """The vector sets of an input file: one, or each group of an ``embeddings.h5``-like HDF5 file
    (``group`` picks one). Unknown file types and unreadable files are refused, naming the file."""
    path = Path(path)
    try:
        fmt = vector_format(path)
        if not path.is_file():
            raise VectorFileError(f"{path}: no such vector file")
        groups = (h5_sets(path) or [None]) if fmt == "h5" and group is None else [group]
        return [open_vectors(path, id_column=id_column, vector_column=vector_column, group=g) for g in groups]
    except VectorFileError as exc:
        raise CompressError(str(exc)) from None


def _where(vf: VectorFile) -> str:
    return f"{vf.path}" + (f" (group {vf.group})" if vf.group else "")


def check_dims(method, sets: Sequence[VectorFile], model: Any = None) -> None:
    for vf in sets:
        if vf.dim != method.d:
            name = f" {model}" if isinstance(model, (str, Path)) else ""
            raise CompressError(f"{_where(vf)}: vectors of dimension {vf.dim}, but the compressor{name} maps "
                                f"{method.d} -> {method.k} dimensions: these are not the vectors it was trained on")


def _check_output(output: Path, sets: Sequence[VectorFile]) -> str:
    try:
        fmt = vector_format(output)
    except VectorFileError as exc:
        raise CompressError(str(exc)) from None
    if output.resolve() == sets[0].path.resolve():
        raise CompressError(f"{output}: the output would overwrite the input")
    if len(sets) > 1 and fmt != "h5":
        raise CompressError(f"{sets[0].path} holds {len(sets)} vector sets ({', '.join(str(v.group) for v in sets)}): "
                            f"write them to an HDF5 output (.h5), or choose one with --group; {output} is {fmt}")
    return fmt


@dataclass
class OutSet:
    """One vector set to write: its group (HDF5), rows, dimension, blocks of float32 rows, record
    (:func:`dive_core.records.compressed`), and SQ8 ranges (int8 only)."""

    group: str | None
    n: int
    k: int
    blocks: Iterable[tuple[Sequence[str], np.ndarray]]
    record: dict
    ranges: tuple[np.ndarray, np.ndarray] | None = None


def _write_one(path: Path, s: OutSet, encoding: str, id_column: str, group: str | None) -> None:
    meta = records.compressed_metadata(s.record)
    with VectorWriter(path, s.n, s.k, encoding=encoding, id_column=id_column, group=group, metadata=meta) as w:
        for ids, y in s.blocks:
            w.write(ids, sq8_encode(y, *s.ranges) if encoding == "int8" else y)


def _merge_h5(files: Sequence[Path], groups: Sequence[str], dest: Path) -> None:
    """Each ``files[i]``'s group ``groups[i]`` into one HDF5 file (the datasets copied by HDF5 in
    bounded memory; groups without modification times, so equal content gives equal bytes)."""
    import h5py

    gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
    gcpl.set_obj_track_times(False)
    with h5py.File(dest, "w", track_order=True) as out:
        for f, g in zip(files, groups):
            with h5py.File(f, "r") as src:
                if "/" in g.strip("/"):
                    grp = out.require_group(g)
                else:
                    grp = h5py.Group(h5py.h5g.create(out.id, g.strip("/").encode(), gcpl=gcpl))
                for name in ("ids", "emb"):
                    src.copy(src[f"{g}/{name}"], grp, name=name)


def write_output(output: str | Path, sets: Sequence[OutSet], encoding: str, id_column: str = ID_COLUMN) -> Path:
    """Write ``sets`` to ``output`` (its extension names the format) under a temporary name,
    renamed into place when every row is written. HDF5 sets with group names go into those groups."""
    output = Path(output)
    if encoding not in ENCODINGS:
        raise CompressError(f"encoding {encoding!r}: expected one of {ENCODINGS}")
    fmt = vector_format(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "h5" and any(s.group for s in sets):
        with tempfile.TemporaryDirectory(dir=output.parent, prefix=f".{output.name}.groups.") as tmp:
            files = []
            for i, s in enumerate(sets):
                files.append(Path(tmp) / f"{i}.h5")
                _write_one(files[-1], s, encoding, id_column, s.group or f"set{i}")
            with atomic_path(output, suffix=".tmp.h5") as dest:
                _merge_h5(files, [s.group or f"set{i}" for i, s in enumerate(sets)], dest)
    else:
        if len(sets) != 1:
            raise CompressError(f"{output}: {len(sets)} vector sets for a {fmt} file, which holds one")
        _write_one(output, sets[0], encoding, id_column, None)
    return output


def _bar(total: int, desc: str, progress: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="vec", unit_scale=True, file=sys.stderr, disable=not progress,
                mininterval=1.0 if sys.stderr.isatty() else 30.0)


# --------------------------------------------------------------------------- parts and gathering
def part_range(n: int, part: str | None) -> tuple[int, int]:
    """Rows ``[(i-1) n / N, i n / N)`` of part ``i`` of ``N`` (``"<i>of<N>"``); all rows for None."""
    if part is None:
        return 0, n
    try:
        i, shards = (int(v) for v in part.split("of"))
    except ValueError:
        raise CompressError(f"part {part!r}: expected '<i>of<n>'") from None
    if not 1 <= i <= shards:
        raise CompressError(f"part {part!r}: i must be in 1..{shards}")
    return (i - 1) * n // shards, i * n // shards


def compress_part(model, input: str | Path, part_dir: str | Path, part: str | None = None, *,
                  group: str | None = None, id_column: str = ID_COLUMN, vector_column: str = VECTOR_COLUMN,
                  rows: int | None = None, device: str = "cpu", progress: bool = True) -> Path:
    """Compress one row range (``part``, ``"<i>of<N>"``; None: every row) of each vector set of
    ``input`` into float32 spool files ``part_dir/set<j>.h5``, each recording its rows and the
    per-coordinate min and max of its compressed rows (what SQ8 ranges are made of). The folder
    appears when complete."""
    method = _method(model, device)
    sets = open_sets(input, group, id_column, vector_column)
    check_dims(method, sets, model)
    weights = method.state_sha256()
    part_dir = Path(part_dir)
    tmp = part_dir.with_name(part_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        spans = [part_range(vf.n, part) for vf in sets]
        with _bar(sum(b - a for a, b in spans), f"compress {part or ''}".strip(), progress) as bar:
            for j, (vf, (a, b)) in enumerate(zip(sets, spans)):
                lo = np.full(method.k, np.inf, dtype=np.float32)
                hi = np.full(method.k, -np.inf, dtype=np.float32)
                with VectorWriter(tmp / SPOOL_SET.format(j), b - a, method.k) as w:
                    for ids, y in compressed_chunks(method, vf, a, b, rows, bar):
                        w.write(ids, y)
                        if len(y):
                            np.minimum(lo, y.min(axis=0), out=lo)
                            np.maximum(hi, y.max(axis=0), out=hi)
                records.write_compress_part(tmp / (SPOOL_SET.format(j) + ".json"), part=part, start=a, stop=b, n=vf.n,
                                            group=vf.group, weights_sha256=weights,
                                            vmin=_floats(lo) if b > a else None, vmax=_floats(hi) if b > a else None)
        shutil.rmtree(part_dir, ignore_errors=True)
        tmp.replace(part_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return part_dir


def _part_meta(part_dir: Path, j: int) -> dict:
    try:
        return records.read_compress_part(part_dir / (SPOOL_SET.format(j) + ".json"))
    except (OSError, ValueError) as exc:  # records.RecordError and json's errors are ValueErrors
        raise CompressError(f"{part_dir}: not a complete compress part ({exc})") from None


def gather(model, input: str | Path, parts: Sequence[str | Path], output: str | Path, encoding: str = "float32",
           *, group: str | None = None, id_column: str = ID_COLUMN, vector_column: str = VECTOR_COLUMN,
           device: str = "cpu", progress: bool = True) -> Path:
    """Write the parts of ``input`` (:func:`compress_part`, in row order) to ``output`` as
    ``dive-compress`` writes it: int8 ranges from the whole input (every part's min and max)."""
    method = _method(model, device)
    sets = open_sets(input, group, id_column, vector_column)
    check_dims(method, sets, model)
    output = Path(output)
    _check_output(output, sets)
    prov = provenance(method)
    parts = [Path(p) for p in parts]
    out_sets = []
    total = 0
    for j, vf in enumerate(sets):
        metas = [_part_meta(p, j) for p in parts]
        pos = 0
        for p, m in zip(parts, metas):
            if m["weights_sha256"] != prov["weights_sha256"] or m["n"] != vf.n or m["start"] != pos:
                raise CompressError(f"{p}: a part of another compressor or input, or out of order (rows "
                                    f"{m['start']}..{m['stop']} of {m['n']}, expected from row {pos} of {vf.n})")
            pos = m["stop"]
        if pos != vf.n:
            raise CompressError(f"{parts[-1] if parts else input}: the parts end at row {pos} of {vf.n}")
        ranges = sq8 = None
        if encoding == "int8":
            mins = [m["vmin"] for m in metas if m["vmin"] is not None]
            maxs = [m["vmax"] for m in metas if m["vmax"] is not None]
            vmin = np.min(np.asarray(mins, np.float32), axis=0) if mins else np.zeros(method.k, np.float32)
            vmax = np.max(np.asarray(maxs, np.float32), axis=0) if maxs else np.zeros(method.k, np.float32)
            ranges = sq8_ranges(vmin, vmax)
            sq8 = (_floats(ranges[0]), _floats(ranges[1]))
        rec = records.compressed(prov, vf, encoding, sq8)
        files = [open_vectors(p / SPOOL_SET.format(j)) for p in parts]
        blocks = chain.from_iterable(f.chunks(write_rows(method.k)) for f in files)
        out_sets.append(OutSet(vf.group, vf.n, method.k, blocks, rec, ranges))
        total += vf.n
    with _bar(total, f"write {encoding}", progress) as bar:
        for s in out_sets:
            s.blocks = _counted(rechunk(s.blocks, write_rows(method.k)), bar)
        return write_output(output, out_sets, encoding, id_column)


def _counted(blocks, bar):
    for ids, y in blocks:
        bar.update(len(ids))
        yield ids, y


def compress_file(model, input: str | Path, output: str | Path, encoding: str = "float32", *,
                  group: str | None = None, id_column: str = ID_COLUMN, vector_column: str = VECTOR_COLUMN,
                  rows: int | None = None, device: str = "cpu", progress: bool = True) -> Path:
    """Compress every row of ``input`` into ``output`` (what ``dive-compress`` does)."""
    method = _method(model, device)
    sets = open_sets(input, group, id_column, vector_column)
    check_dims(method, sets, model)
    output = Path(output)
    _check_output(output, sets)
    if encoding not in ENCODINGS:
        raise CompressError(f"encoding {encoding!r}: expected one of {ENCODINGS}")
    if encoding == "int8":  # pass 1: compressed float32 rows and their ranges, spooled beside the output
        output.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=output.parent, prefix=f".{output.name}.spool.") as spool:
            part = compress_part(method, input, Path(spool) / "all", None, group=group, id_column=id_column,
                                 vector_column=vector_column, rows=rows, progress=progress)
            return gather(method, input, [part], output, encoding, group=group, id_column=id_column,
                          vector_column=vector_column, progress=progress)
    prov = provenance(method)
    with _bar(sum(vf.n for vf in sets), "compress", progress) as bar:
        out_sets = [OutSet(vf.group, vf.n, method.k,
                           rechunk(compressed_chunks(method, vf, 0, vf.n, rows, bar), write_rows(method.k)),
                           records.compressed(prov, vf, encoding))
                    for vf in sets]
        return write_output(output, out_sets, encoding, id_column)


# --------------------------------------------------------------------------- reading outputs back
def _one_set(path: str | Path, group: str | None = None, id_column: str = ID_COLUMN) -> VectorFile:
    sets = open_sets(path, group, id_column=id_column)
    if len(sets) > 1:
        raise CompressError(f"{path} holds {len(sets)} vector sets ({', '.join(str(v.group) for v in sets)}): "
                            "choose one (group)")
    return sets[0]


def read_metadata(path: str | Path, group: str | None = None) -> dict:
    """The ``dive_compressed`` record of a file written by ``dive-compress`` (of one group of an
    HDF5 file with several)."""
    path = Path(path)
    vf = _one_set(path, group)
    try:
        return records.read_compressed_metadata(vf.meta)
    except (OSError, KeyError, json.JSONDecodeError, TypeError):
        key = records.COMPRESSED_META_KEY
        raise CompressError(f"{_where(vf)}: no {key} metadata: not written by dive-compress") from None


def decode_chunks(path: str | Path, group: str | None = None, rows: int = CHUNK_ROWS,
                  id_column: str = ID_COLUMN) -> Iterator[tuple[list[str], np.ndarray]]:
    """``(ids, float32 rows)`` of a compressed file, chunk by chunk: int8 codes decoded with the
    file's SQ8 ranges (:func:`sq8_decode`), float16 widened."""
    vf = _one_set(path, group, id_column)
    if vf.dtype != "int8":
        yield from vf.chunks(rows)
        return
    vmin, vdiff = _ranges_of(read_metadata(path, vf.group))
    for ids, codes in vf.chunks(rows, raw=True):
        yield ids, sq8_decode(codes, vmin, vdiff)


def decode(path: str | Path, group: str | None = None, id_column: str = ID_COLUMN) -> tuple[list[str], np.ndarray]:
    """Every row of a compressed file as float32 (:func:`decode_chunks`), in memory."""
    ids: list[str] = []
    mats = []
    for i, m in decode_chunks(path, group, id_column=id_column):
        ids.extend(i)
        mats.append(m)
    vf = _one_set(path, group, id_column)
    return ids, (np.concatenate(mats) if mats else np.zeros((0, vf.dim), np.float32))


# --------------------------------------------------------------------------- FAISS index
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
        raise CompressError(f"{_where(vf)}: {vf.dtype} vectors; expected a dive-compress output")
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


# --------------------------------------------------------------------------- the workflow's config
ENTRY_DEFAULTS = {"shards": 1, "encoding": "float32", "faiss": False, "group": None, "id_column": ID_COLUMN,
                  "vector_column": VECTOR_COLUMN}


def entries(config: Mapping[str, Any]) -> dict[str, dict]:
    """The ``compress:`` entries of a config, with their defaults (:data:`ENTRY_DEFAULTS`)."""
    return {name: {**ENTRY_DEFAULTS, **dict(e)} for name, e in dict(config.get("compress") or {}).items()}


def entry(config: Mapping[str, Any], name: str) -> dict:
    from .config import ConfigError

    all_ = entries(config)
    if name not in all_:
        raise ConfigError(f"config: no compress.{name} (compress: names {sorted(all_)})")
    return all_[name]


def check_config(config: Mapping[str, Any]) -> None:
    """Refuse ``compress:`` entries the jobs could not run, naming the key."""
    from . import paths
    from .config import ConfigError

    for name, e in entries(config).items():
        try:
            vector_format(e["input"])
        except VectorFileError as exc:
            raise ConfigError(f"config: compress.{name}.input: {exc}") from None
        if e["encoding"] not in ENCODINGS:
            raise ConfigError(f"config: compress.{name}.encoding = {e['encoding']!r}: expected one of {ENCODINGS}")
        if str(e["model"]).startswith(paths.COMPRESSED.split("{")[0]):
            raise ConfigError(f"config: compress.{name}.model: {e['model']} is a compressed output, not a compressor")


def output_files(name: str, e: Mapping[str, Any]) -> list[str]:
    """What the gather of entry ``name`` writes: the vector file (and for a .npy its ids and metadata)."""
    from . import paths

    main = paths.compressed_path(name, e["input"])
    if vector_format(main) == "npy":
        return [main, str(ids_path(main)), str(meta_path(main))]
    return [main]


def targets(config: Mapping[str, Any]) -> list[str]:
    """Every configured output, and the FAISS index of each entry with ``faiss: true``."""
    from . import paths

    out = []
    for name, e in entries(config).items():
        out += output_files(name, e)
        if e["faiss"]:
            out.append(paths.COMPRESSED_INDEX.format(name=name))
    return out


def job_inputs(config: Mapping[str, Any], name: str, ext: str | None = None) -> dict:
    """A compress job's inputs: ``model`` and ``vectors`` (the input, and a .npy's id list);
    ``ext``: the extension asked for, refused when it is not the input's."""
    from . import paths
    from .config import ConfigError

    e = entry(config, name)
    asked = None if ext is None else paths.COMPRESSED.format(name=name, ext=ext)
    if asked is not None and paths.compressed_path(name, e["input"]) != asked:
        raise ConfigError(f"{asked}: compress.{name} reads {e['input']}; its output is "
                          f"{paths.compressed_path(name, e['input'])}")
    vectors = [e["input"]] + ([str(ids_path(e["input"]))] if vector_format(e["input"]) == "npy" else [])
    return {"model": e["model"], "vectors": vectors}


def part_dirs(config: Mapping[str, Any], name: str) -> list[str]:
    """The row-range parts a sharded entry is gathered from (none when ``shards`` is 1)."""
    from . import paths

    shards = int(entry(config, name)["shards"])
    return [] if shards <= 1 else [paths.COMPRESS_PART.format(name=name, shard=p)
                                   for p in paths.compress_part_names(shards)]


# --------------------------------------------------------------------------- the command
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="dive-compress",
        description="Compress a vector file with a trained compressor: INPUT's rows (raw backbone vectors, "
                    "L2-normalised here as the workflow does) -> OUTPUT, in chunks, in bounded memory. Formats by "
                    "extension: .parquet/.pq (id column + vector column), .npy (+ NAME.ids.txt), .h5/.hdf5 "
                    "(ids + emb datasets, at the root or in groups such as corpus/queries).")
    ap.add_argument("model", help="a trained compressor: a workflow checkpoint (results/.../model.pt) or an "
                                  "exported folder (python -m dive_core.export)")
    ap.add_argument("input", help="the vector file to compress")
    ap.add_argument("output", help="the file to write (format by its extension); written only when complete")
    ap.add_argument("--encoding", choices=ENCODINGS, default="float32",
                    help="how the compressed vectors are stored: float32 (default), float16, or int8 = FAISS "
                         "SQ8 codes with per-coordinate ranges over the whole input (in the file's metadata)")
    ap.add_argument("--faiss", metavar="PATH", help="also write a FAISS index of OUTPUT (row i = row i): "
                                                    "IndexFlatIP for float32, the scalar quantizer for float16/int8")
    ap.add_argument("--group", help="HDF5 input: compress only this group (default: the root, else every group)")
    ap.add_argument("--id-column", default=ID_COLUMN, help=f"Parquet input: the id column (kept in OUTPUT; default {ID_COLUMN})")
    ap.add_argument("--vector-column", default=VECTOR_COLUMN,
                    help=f"Parquet input: the vector column (default {VECTOR_COLUMN})")
    ap.add_argument("--rows", type=int, help="rows compressed at once (default: from the compressor's size)")
    ap.add_argument("--threads", type=int, help="torch threads (default: torch's own)")
    ap.add_argument("--device", default="cpu", help="torch device (default cpu)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    try:
        if args.rows is not None and args.rows < 1:
            raise CompressError(f"--rows {args.rows}: must be at least 1")
        try:
            vector_format(args.output)  # before any work
        except VectorFileError as exc:
            raise CompressError(str(exc)) from None
        sets = open_sets(args.input, args.group, args.id_column, args.vector_column)
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        method = load_model(args.model, args.device)
        print(describe(provenance(method)), file=sys.stderr)
        check_dims(method, sets, args.model)
        _check_output(Path(args.output), sets)
        t0 = time.perf_counter()
        out = compress_file(method, args.input, args.output, args.encoding, group=args.group,
                            id_column=args.id_column, vector_column=args.vector_column, rows=args.rows,
                            device=args.device, progress=not args.quiet)
        seconds = time.perf_counter() - t0
        n = sum(vf.n for vf in sets)
        print(f"{out}: {n} vectors {method.d} -> {method.k} dimensions, {args.encoding}, in {seconds:.1f} s "
              f"({n / max(seconds, 1e-9):.0f} vectors/s)")
        if args.faiss:
            print(f"{write_faiss_index(out, args.faiss, progress=not args.quiet)}: FAISS index of {out}")
    except CompressError as exc:
        print(f"dive-compress: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
