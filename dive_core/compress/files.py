"""Vector files in and out: the sets of an input, the checks before any work, an output written
under a temporary name (:func:`write_output`), and a compressed file read back
(:func:`read_metadata`, :func:`decode`)."""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from .. import records
from ..atomic import atomic_path
from ..vector_checks import duplicate_ids, where, wrong_dimension
from ..vectors import (CHUNK_ROWS, ENCODINGS, ID_COLUMN, VECTOR_COLUMN, VectorFile, VectorFileError, VectorWriter,
                       h5_sets, open_vectors, vector_format)
from .codec import _ranges_of, sq8_decode, sq8_encode
from .errors import CompressError


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


def check_input(method, sets: Sequence[VectorFile], model: Any = None, allow_duplicate_ids: bool = False,
                ids: bool = True) -> None:
    """Before any row is compressed: each input set has the compressor's input dimension and
    (``ids``, unless ``allow_duplicate_ids``) every id once (:mod:`dive_core.vector_checks`, a pass
    over the ids alone). The rows themselves (NaN, Inf, all zeros) are checked as they are read
    (:func:`~dive_core.compress.rows.compressed_chunks`). A CompressError names file, row and id."""
    model = model if isinstance(model, (str, Path)) else getattr(method, "source", None)
    name = f" {model}" if model else ""
    for vf in sets:
        first = next(iter(vf.id_chunks(1)), [None])[0] if vf.n else None
        bad = wrong_dimension(where(vf), vf.dim, method.d, first, f"the compressor{name} maps {method.d} -> "
                              f"{method.k} dimensions: these are not the vectors it was trained on")
        if bad is None and ids and not allow_duplicate_ids:
            repeated = duplicate_ids(where(vf), vf.id_chunks)
            bad = repeated[0] if repeated else None
            if len(repeated) > 1:
                raise CompressError(f"{bad} ({len(repeated)} rows repeat an earlier row's id)")
        if bad is not None:
            raise CompressError(str(bad))


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
        raise CompressError(f"{where(vf)}: no {key} metadata: not written by dive-compress") from None


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
