"""The jobs: one row range of an input compressed to a float32 spool (:func:`compress_part`), the
parts gathered into the output (:func:`gather`), and a whole file at once (:func:`compress_file`,
what ``dive-compress`` does)."""

from __future__ import annotations

import shutil
import tempfile
from itertools import chain
from pathlib import Path
from typing import Sequence

import numpy as np

from .. import records
from ..vector_checks import ALLOW
from ..sparse import SPARSE_ENCODING
from ..vectors import ENCODINGS, ID_COLUMN, VECTOR_COLUMN, VectorWriter, open_vectors, vector_format
from .codec import _floats, sq8_ranges
from .errors import CompressError
from .files import OutSet, _bar, _check_output, check_input, open_sets, write_output
from .index import index_record, indexed_set
from .model import _method, provenance
from .rows import compressed_chunks, rechunk, write_rows

SPOOL_SET = "set{}.h5"  # the float32 spool of the i-th vector set, in a part folder


def allowed(allow_zero_rows: bool = False, allow_duplicate_ids: bool = False) -> list[str]:
    """The options (:data:`dive_core.vector_checks.ALLOW`) that let rows through on purpose, as an
    output's record and a part's range file name them."""
    return sorted(name for name, on in ((ALLOW["zero"], allow_zero_rows), (ALLOW["duplicate"], allow_duplicate_ids))
                  if on)


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
                  rows: int | None = None, device: str = "cpu", progress: bool = True, side: str = "document",
                  drift: list | None = None, allow_zero_rows: bool = False, allow_duplicate_ids: bool = False) -> Path:
    """Compress one row range (``part``, ``"<i>of<N>"``; None: every row) of each vector set of
    ``input`` into float32 spool files ``part_dir/set<j>.h5``, each recording its rows, the options
    that let rows through (:func:`allowed`) and the per-coordinate min and max of its compressed
    rows (what SQ8 ranges are made of). The whole input is checked first (:func:`check_input`: the
    ids of every row, not only this range's), the range's rows as they are read. The folder
    appears when complete."""
    method = _method(model, device)
    sets = open_sets(input, group, id_column, vector_column)
    check_input(method, sets, model, allow_duplicate_ids)
    weights = provenance(method, side)["weights_sha256"]
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
                    monitor = _monitor(method, side, drift, vf)
                    for ids, y in compressed_chunks(method, vf, a, b, rows, bar, side, monitor, allow_zero_rows):
                        w.write(ids, y)
                        if len(y):
                            np.minimum(lo, y.min(axis=0), out=lo)
                            np.maximum(hi, y.max(axis=0), out=hi)
                records.write_compress_part(tmp / (SPOOL_SET.format(j) + ".json"), part=part, start=a, stop=b, n=vf.n,
                                            group=vf.group, weights_sha256=weights,
                                            allowed=allowed(allow_zero_rows, allow_duplicate_ids),
                                            vmin=_floats(lo) if b > a else None, vmax=_floats(hi) if b > a else None)
        shutil.rmtree(part_dir, ignore_errors=True)
        tmp.replace(part_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return part_dir


def _monitor(method, side: str, drift: list | None, vf):
    """A drift monitor of ``vf``, appended to ``drift`` as ``(vf, monitor)``, when asked for and the
    compressor recorded its fit's statistics (the document side only: queries are not documents)."""
    stats = (method.meta or {}).get("fit_statistics")
    if drift is None or stats is None or side != "document":
        return None
    from .drift import DriftMonitor

    m = DriftMonitor(method, stats, side)
    drift.append((vf, m))
    return m


def _part_meta(part_dir: Path, j: int) -> dict:
    try:
        return records.read_compress_part(part_dir / (SPOOL_SET.format(j) + ".json"))
    except (OSError, ValueError) as exc:  # records.RecordError and json's errors are ValueErrors
        raise CompressError(f"{part_dir}: not a complete compress part ({exc})") from None


def gather(model, input: str | Path, parts: Sequence[str | Path], output: str | Path, encoding: str = "float32",
           *, group: str | None = None, id_column: str = ID_COLUMN, vector_column: str = VECTOR_COLUMN,
           device: str = "cpu", progress: bool = True, side: str = "document", allow_zero_rows: bool = False,
           allow_duplicate_ids: bool = False, faiss_index: dict | None = None) -> Path:
    """Write the parts of ``input`` (:func:`compress_part`, in row order) to ``output`` as
    ``dive-compress`` writes it: int8 ranges from the whole input (every part's min and max). The
    parts checked the input's rows and ids; each must have let through what this gather allows
    (``allow_*``, recorded in the output), no more and no less. ``faiss_index``: the factory
    index's options (:func:`~dive_core.compress.index_options`), recorded in the indexed set's record."""
    method = _method(model, device)
    sets = open_sets(input, group, id_column, vector_column)
    check_input(method, sets, model, ids=False)  # the parts checked every id and row
    allow = allowed(allow_zero_rows, allow_duplicate_ids)
    output = Path(output)
    _check_output(output, sets)
    prov = provenance(method, side)
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
            if m["allowed"] != allow:
                raise CompressError(f"{p}: a part that let through {m['allowed'] or 'nothing'} on purpose, but this "
                                    f"gather allows {allow or 'nothing'}: compress the parts again with its options")
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
        rec = records.compressed(prov, vf, encoding, sq8, allow, _index_of(faiss_index, sets, vf))
        files = [open_vectors(p / SPOOL_SET.format(j)) for p in parts]
        blocks = chain.from_iterable(f.chunks(write_rows(method.k)) for f in files)
        out_sets.append(OutSet(vf.group, vf.n, method.k, blocks, rec, ranges))
        total += vf.n
    with _bar(total, f"write {encoding}", progress) as bar:
        for s in out_sets:
            s.blocks = _counted(rechunk(s.blocks, write_rows(method.k)), bar)
        return write_output(output, out_sets, encoding, id_column)


def _index_of(options: dict | None, sets, vf) -> dict | None:
    """The ``faiss_index`` record of set ``vf`` (:func:`index_record`): only the indexed set's."""
    return index_record(options, vf.n) if options and vf is indexed_set(sets, vf.path) else None


def _counted(blocks, bar):
    for ids, y in blocks:
        bar.update(len(ids))
        yield ids, y


def compress_file(model, input: str | Path, output: str | Path, encoding: str = "float32", *,
                  group: str | None = None, id_column: str = ID_COLUMN, vector_column: str = VECTOR_COLUMN,
                  rows: int | None = None, device: str = "cpu", progress: bool = True, side: str = "document",
                  drift: list | None = None, allow_zero_rows: bool = False, allow_duplicate_ids: bool = False,
                  faiss_index: dict | None = None) -> Path:
    """Compress every row of ``input`` into ``output`` (what ``dive-compress`` does), by the map of
    ``side``: ``document`` (a corpus: the default) or ``query`` (an asymmetric compressor's query map).
    ``drift``: a list that receives ``(input set, drift report)`` per set, for a compressor whose
    record holds fit statistics (:mod:`dive_core.compress.drift`), on the document side. The input
    is checked as :func:`compress_part` checks it (ids first, rows as they are read), and nothing is
    written when it fails; ``allow_zero_rows`` / ``allow_duplicate_ids`` let such rows through on
    purpose, and the output's record says so; ``faiss_index``: the factory index's options, recorded
    as :func:`gather` records them."""
    method = _method(model, device)
    sets = open_sets(input, group, id_column, vector_column)
    output = Path(output)
    _check_output(output, sets)
    if encoding not in (*ENCODINGS, SPARSE_ENCODING):
        raise CompressError(f"encoding {encoding!r}: expected one of {(*ENCODINGS, SPARSE_ENCODING)}")
    allow = dict(allow_zero_rows=allow_zero_rows, allow_duplicate_ids=allow_duplicate_ids)
    if encoding == SPARSE_ENCODING:
        if faiss_index:
            raise CompressError("--index: FAISS holds dense vectors, not sparse codes")
        return _compress_codes(method, sets, output, model, id_column, rows, progress, side, drift, allow)
    if encoding == "int8":  # pass 1: compressed float32 rows and their ranges, spooled beside the output
        output.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=output.parent, prefix=f".{output.name}.spool.") as spool:
            part = compress_part(method, input, Path(spool) / "all", None, group=group, id_column=id_column,
                                 vector_column=vector_column, rows=rows, progress=progress, side=side, drift=drift,
                                 **allow)
            return gather(method, input, [part], output, encoding, group=group, id_column=id_column,
                          vector_column=vector_column, progress=progress, side=side, faiss_index=faiss_index,
                          **allow)
    check_input(method, sets, model, allow_duplicate_ids)
    prov = provenance(method, side)
    with _bar(sum(vf.n for vf in sets), "compress", progress) as bar:
        out_sets = [OutSet(vf.group, vf.n, method.k,
                           rechunk(compressed_chunks(method, vf, 0, vf.n, rows, bar, side,
                                                     _monitor(method, side, drift, vf), allow_zero_rows),
                                   write_rows(method.k)),
                           records.compressed(prov, vf, encoding, allowed=allowed(**allow),
                                              faiss_index=_index_of(faiss_index, sets, vf)))
                    for vf in sets]
        return write_output(output, out_sets, encoding, id_column)


def _compress_codes(method, sets, output: Path, model, id_column: str, rows, progress: bool, side: str,
                    drift, allow: dict) -> Path:
    """:func:`compress_file` for k-sparse codes (csr, encoding ``sparse``): one Parquet file of
    (index, fp16 value) pairs per row (:func:`dive_core.sparse.write_codes`)."""
    from ..sparse import write_codes

    if not method.sparse_codes:
        raise CompressError(f"encoding {SPARSE_ENCODING!r}: the compressor {model} ({method.type}) writes dense "
                            "vectors; sparse is for k-sparse codes (csr)")
    if vector_format(output) != "parquet" or len(sets) != 1:
        raise CompressError(f"{output}: sparse codes are written to one Parquet file (.parquet), from one input "
                            f"set ({len(sets)} here); --encoding float32 writes them as dense rows of "
                            f"{method.k} values instead")
    check_input(method, sets, model, allow["allow_duplicate_ids"])
    (vf,) = sets
    record = records.compressed(provenance(method, side), vf, SPARSE_ENCODING, allowed=allowed(**allow))
    with _bar(vf.n, "compress", progress) as bar:
        blocks = compressed_chunks(method, vf, 0, vf.n, rows, bar, side, _monitor(method, side, drift, vf),
                                   allow["allow_zero_rows"])
        output.parent.mkdir(parents=True, exist_ok=True)
        return Path(write_codes(output, rechunk(blocks, write_rows(method.k)), vf.n, method.k, method.active,
                                records.compressed_metadata(record), id_column))

