"""Every file one job writes and another reads, defined once: its format, the fields or columns a
reader may rely on, the rule that makes it, and how it is written and read. Writers and readers go
through this module only.

=====================  =============================================================  ======================
kind                   file                                                           made by rule
=====================  =============================================================  ======================
source                 ``data/beir/{dataset}/source.json``                            stage_beir
splits                 ``results/{dataset}/splits.json``                              make_splits
arrival                ``results/{dataset}/arrival.json``                             make_arrival
embeddings             ``results/{dataset}/{backbone}/embeddings.h5``: attributes,    embed
                       datasets :data:`LAYOUTS`
embedding_shard        ``results/{dataset}/{backbone}/embed_parts/{part}.h5``:        embed_part
                       attributes, datasets :data:`LAYOUTS`
triplets               ``.../triplets/{stage}-{negatives}.json`` (beside the TSV)     triplets
triplets_tsv           ``.../triplets/{stage}-{negatives}.tsv`` (:data:`TABLES`)      triplets
checkpoint             ``.../{method}/k{k}/{stage}/seed{seed}/model.pt``              train
train_log              ``.../seed{seed}/train_log.tsv`` (:data:`TABLES`)              train
result                 ``.../seed{seed}/eval.json`` (and its headline copy)           evaluate
per_query              ``.../seed{seed}/per_query.tsv`` (:data:`TABLES`)              evaluate
selection              ``results/selection/{backbone}/{study}.json``                  select
efficiency             ``results/efficiency/{dataset}/{backbone}.json``               efficiency
efficiency_synthetic   ``results/efficiency/synthetic.json``                          efficiency_synthetic
frontier               ``results/frontier/{dataset}/{backbone}.json``                 frontier
                       ``results/frontier/{dataset}/{backbone}/seed{seed}.json``      frontier_seed
arrival_codes          ``results/arrival_codes/{experiment}/{dataset}/{backbone}``    arrival_codes
                       ``.json``
compressed             ``results/compressed/{name}.{ext}``: the metadata record of    compress
                       each vector set (:data:`COMPRESSED_META_KEY`)
compress_part          ``results/compressed/{name}.parts/{shard}/set{j}.h5.json``     compress_part
compressor             ``.../seed{seed}/export/compressor/config.json``               export
=====================  =============================================================  ======================

Four sorts of file:

* JSON records (and the attributes of the HDF5 files, and a checkpoint's dict) carry a versioned
  format tag (:data:`FORMATS`) and hold every field of :data:`FIELDS` (a list of rows, every field
  of :data:`ROW_FIELDS`). A file of another format (written by an older version of the workflow,
  or not a record at all) is refused with a :class:`RecordError` that names the file, both
  formats and what to rerun. Bump a kind's version whenever its fields change meaning or a reader
  starts to need a new field.
* TSV files (:data:`TABLES`: the columns in order, each one's type and how it is written) carry no
  tag: a TSV's kind is known from its header, and a file with another header, a row with another
  number of cells or a cell that is not of its column's type is refused naming ``file:line``.
  :func:`write_tsv` and :func:`read_tsv` are their only writer and reader.
* HDF5 files (:data:`LAYOUTS`: the datasets, their types and shapes) are checked by
  :func:`check_h5`, their datasets made by :func:`h5_dataset`; their attributes are the record of
  the same kind.
* Files made for use outside the workflow keep tags of their own, not ``dive-pipeline/<kind>/<v>``:
  the record in a compressed vector file's metadata (:data:`COMPRESSED_FORMAT`, written by
  ``dive-compress`` and rule compress alike) and an exported compressor's ``config.json``
  (:data:`COMPRESSOR_FORMAT`). A compress part's range file (:data:`COMPRESS_PART_FIELDS`), read
  only by the gather of its own entry, has no tag.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping, Sequence

from .atomic import atomic_open, read_json, write_json
from .metrics import METRICS

VERSIONS = {
    "source": 1, "splits": 1, "arrival": 1, "embeddings": 1, "embedding_shard": 1, "triplets": 1, "checkpoint": 2, "result": 2,
    "selection": 2, "efficiency": 3, "efficiency_synthetic": 2, "frontier": 3,
    "arrival_codes": 1,
}  # checkpoints written before this module were tagged dive-pipeline-checkpoint/1: refused like any other
# checkpoint/2, result/2: the training precision (fp32 | bf16) in the checkpoint meta and the result
# selection/2: the backbone whose runs it selects on (a pick never trains another backbone's runs)
# efficiency/2: the fields its study reads (backbone, n_queries, FAISS version and threads, device,
# CPU, each index row's figures); the synthetic scaling is its own kind (efficiency_synthetic), no
# longer an efficiency/1 record of another shape
# efficiency/3, efficiency_synthetic/2: each index's ``encoding`` (float32, sparse, or an index quantizer
# of dive_core.quantizers timed beside the flat index), its memory as FAISS serializes it
# (``memory_bytes``) and its batched throughput on one thread (``throughput_qps_one_thread``)
# frontier/2: each row's nDCG@10 per query (``per_query``, in the order of ``query_ids``), for the paired
# tests of the sparse codes against the dense rows of no more bytes
# frontier/3: the index quantizers' rows (PQ, OPQ + PQ, RaBitQ, SQ4: factory, fit seconds, training rows,
# codebook bytes, seed), each row's method type and whether it was trained with labels (``supervised``),
# and ``seen`` (per query of ``query_ids``: 1 if a relevant document is a training positive), for the
# verdict at each budget on seen and unseen queries
FORMATS = {kind: f"dive-pipeline/{kind}/{v}" for kind, v in VERSIONS.items()}

RULES = {
    "source": "stage_beir", "splits": "make_splits", "arrival": "make_arrival", "embeddings": "embed", "embedding_shard": "embed_part",
    "triplets": "triplets",
    "checkpoint": "train", "result": "evaluate", "selection": "select", "efficiency": "efficiency",
    "efficiency_synthetic": "efficiency_synthetic", "frontier": "frontier", "arrival_codes": "arrival_codes",
}

# What every efficiency measurement records about where it ran (dive_core.efficiency.faiss_info and
# memory_bandwidth), and the figures of each timed index (dive_core.efficiency.measure).
_MACHINE = ("faiss_version", "faiss_threads", "device", "cpu", "bandwidth_gb_s")
_INDEX = ("method", "dim", "encoding", "n_docs", "bytes_per_vector", "index_bytes", "memory_bytes",
          "latency_ms_median", "latency_ms_p99", "throughput_qps", "throughput_qps_one_thread", "n_single", "batch_queries", "repeats", "k", "lower_bound_ms", "latency_ratio_to_bound",
          "read_ms_same_size", "latency_ratio_to_read")

# The fields every reader may rely on (a record may hold more).
FIELDS = {
    "source": ("dataset", "fingerprint", "counts"),
    "splits": ("dataset", "seed", "fractions", "counts", "source_fingerprint", "stages", "document_overlap",
               "identical_ids", "ids", "qrels"),
    "arrival": ("dataset", "seed", "fraction", "new_query_share", "rule", "source_fingerprint", "splits_sha256",
                "counts", "taken", "strata", "arriving"),
    "embeddings": ("content_sha256",),  # + what rule embed adds: backbone, dim, dataset, source_fingerprint, ...
    "embedding_shard": ("part", "shard", "shards", "inputs_key", "n_docs", "n_queries", "dim", "seconds"),
    "triplets": ("dataset", "backbone", "stage", "negatives", "splits_sha256", "source_fingerprint", "tsv_sha256",
                 "stats"),
    "checkpoint": ("type", "d", "k", "seed", "hparams", "state", "state_sha256", "meta"),
    "result": ("dataset", "backbone", "method", "method_type", "stage", "seed", "k", "d", "role", "n_queries",
               "metrics", "subsets", "diagnostics", "top_k", "identical_ids", "config", "fingerprints", "timings",
               "training", "versions", "runtime"),
    "selection": ("study", "backbone", "metric", "datasets", "seed", "methods", "inputs"),
    "efficiency": ("dataset", "backbone", "n_queries", *_MACHINE, "indexes", "versions", "runtime"),
    "efficiency_synthetic": ("dataset", *_MACHINE, "indexes", "versions", "runtime"),
    "frontier": ("dataset", "backbone", "n_queries", "query_ids", "seen", "rows", "versions", "runtime"),
    # frontier rows (float32 and quantizer codes) of an arrival study's maps, every fit on the known documents
    "arrival_codes": ("experiment", "dataset", "backbone", "seed", "n_queries", "query_ids", "strata", "known_docs",
                      "arrival_sha256", "rows", "skipped", "quantizers", "versions", "runtime"),
}
# Records holding a list of rows: the list's field and the fields of every row (the list is not empty).
ROW_FIELDS = {
    # one index per timed (method, dim), the first at the full dimension, with the ratios to it
    "efficiency": ("indexes", _INDEX + ("memory_ratio_to_full", "latency_speedup_vs_full",
                                        "throughput_ratio_to_full")),
    # one index per (corpus size, dim) of random unit vectors: no full dimension to compare with
    "efficiency_synthetic": ("indexes", _INDEX),
}

# What the training job stores in a checkpoint's ``meta`` (and evaluate copies into the result).
CHECKPOINT_META = ("dataset", "backbone", "method", "method_type", "stage", "k", "seed", "device", "precision",
                   "negatives", "n_triplets", "n_train_queries", "selected", "train_seconds", "final_epoch",
                   "fingerprints", "versions", "runtime")


class RecordError(ValueError):
    """A file that is not the record this workflow reads; the message says what to rerun."""


def _remedy(kind: str, path: str | os.PathLike, rule: str | None = None) -> str:
    rule = rule or RULES[kind]
    return f"delete it and rerun `snakemake {path}` (rule {rule}), or `snakemake --forcerun {rule} all`"


def stamp(kind: str, body: Mapping[str, Any]) -> dict:
    """``body`` with the kind's format tag."""
    return {"format": FORMATS[kind], **{k: v for k, v in body.items() if k != "format"}}


def _missing(kind: str, obj: Mapping[str, Any]) -> str | None:
    """What of :data:`FIELDS` / :data:`ROW_FIELDS` ``obj`` lacks, in words; None: nothing."""
    missing = [f for f in FIELDS[kind] if f not in obj]
    if missing:
        return f"field(s) {missing}"
    if kind in ROW_FIELDS:
        key, fields = ROW_FIELDS[kind]
        rows = obj[key]
        if not isinstance(rows, list) or not rows:
            return f"rows: {key} is {rows!r}, not a list of one or more rows"
        for i, row in enumerate(rows):
            lacks = [f for f in fields if not isinstance(row, Mapping) or f not in row]
            if lacks:
                return f"row field(s) {lacks} in {key}[{i}]"
    return None


def check(kind: str, obj: Any, path: str | os.PathLike) -> dict:
    """``obj`` if it is a ``kind`` record of the current format with every field of :data:`FIELDS`
    (and of :data:`ROW_FIELDS` in each row); else a :class:`RecordError` naming ``path``, the
    formats, the missing fields and the remedy."""
    found = obj.get("format") if isinstance(obj, Mapping) else None
    if found != FORMATS[kind]:
        what = "no format tag" if found is None else f"format {found!r}"
        raise RecordError(f"{path}: {kind} record of {what}; this version of the workflow reads "
                          f"{FORMATS[kind]!r}. {_remedy(kind, path).capitalize()}.")
    missing = _missing(kind, obj)
    if missing:
        raise RecordError(f"{path}: {kind} record without {missing}; {_remedy(kind, path)}.")
    return dict(obj)


def write(kind: str, path: str | os.PathLike, body: Mapping[str, Any]) -> dict:
    """Write a JSON record atomically (temporary file, then rename); returns what was written."""
    obj = stamp(kind, body)
    missing = _missing(kind, obj)
    if missing:
        raise ValueError(f"{path}: a {kind} record needs {missing}")
    write_json(path, obj)
    return obj


def read(kind: str, path: str | os.PathLike) -> dict:
    """Read and check a JSON record."""
    return check(kind, _load(kind, path), path)


def read_one_of(kinds: Sequence[str], path: str | os.PathLike) -> dict:
    """Read a JSON record that may be of any of ``kinds`` (a study's inputs: the efficiency study
    reads ``efficiency`` and ``efficiency_synthetic`` records), checked as the kind its format tag
    names; a file of none of them is refused naming every kind's format and rule."""
    obj = _load(kinds[0], path)
    found = obj.get("format") if isinstance(obj, Mapping) else None
    kind = next((k for k in kinds if FORMATS[k] == found), None)
    if kind is None and len(kinds) > 1:
        what = "no format tag" if found is None else f"format {found!r}"
        raise RecordError(f"{path}: a record of {what}; this version of the workflow reads "
                          f"{' or '.join(repr(FORMATS[k]) for k in kinds)} here. Delete it and rerun "
                          f"`snakemake {path}` (rule {' or '.join(RULES[k] for k in kinds)}).")
    return check(kind or kinds[0], obj, path)


def _load(kind: str, path: str | os.PathLike) -> Any:
    try:
        return read_json(path)
    except FileNotFoundError:
        raise RecordError(f"{path}: no such {kind} record; run `snakemake {path}` (rule {RULES[kind]})") from None
    except ValueError as exc:
        raise RecordError(f"{path}: not a JSON {kind} record ({exc}); {_remedy(kind, path)}") from None


# --------------------------------------------------------------------------- TSV files
@dataclass(frozen=True)
class Column:
    """One TSV column. ``dtype``: what a reader gets (``str``, ``int`` or ``float``); ``fmt``: how a
    writer renders a number, a format spec (``"d"``: a whole number, anything else refused);
    ``nullable``: an empty cell means no value (written for a value that is absent or None, left
    out of a row read back); ``what``: what messages call the column's values."""

    name: str
    dtype: type
    fmt: str = ""
    nullable: bool = False
    what: str = ""


@dataclass(frozen=True)
class Table:
    """A TSV kind: ``columns`` first, exactly these in this order; then, where ``more`` is set,
    any further columns of that type (the writer's names, in its order), which must include
    ``required``. ``quoted``: a cell holding a tab, a quote or a line break is quoted as Python's
    ``csv`` module does (the triplets' document ids are BEIR's, any string); otherwise cells are
    written as they are and such a cell is refused. One header line, ``\\n`` after every line,
    UTF-8."""

    rule: str
    columns: tuple[Column, ...]
    more: Column | None = None
    required: tuple[str, ...] = ()
    quoted: bool = False


TABLES = {
    # dive_core.evaluation.write_per_query: one row per evaluated query, in the manifest's order
    "per_query": Table("evaluate", (Column("query_id", str), *(Column(m, float, ".6f") for m in METRICS),
                                    Column("seen", int, "d", nullable=True))),
    # dive_core.training.write_log_tsv: one row per epoch; the further columns are the method's
    # logged terms (DIVE: triplet, view, geo, rho), ``total`` (the loss) and ``seconds``, in the
    # order they first appear; a term a phase does not log is an empty cell
    "train_log": Table("train", (Column("epoch", int, "d"), Column("phase", str)),
                       more=Column("", float, ".6g", nullable=True), required=("total", "seconds")),
    # dive_core.triplets.write_triplets: relevance grades, stored as whole numbers, read as float32
    "triplets_tsv": Table("triplets", (Column("query_id", str), Column("pos_id", str), Column("neg_id", str),
                                       Column("pos_score", float, "d", what="scores"),
                                       Column("neg_score", float, "d", what="scores")), quoted=True),
}


def tsv_header(kind: str) -> str:
    """The header a ``kind`` file has, in words (for messages and documentation)."""
    t = TABLES[kind]
    head = [c.name for c in t.columns]
    if t.more is None:
        return str(head)
    return f"{head} then {t.more.dtype.__name__} columns among them {list(t.required)}"


def tsv_columns(kind: str, names: Sequence[str] | None = None) -> tuple[Column, ...] | None:
    """The columns of a ``kind`` file headed ``names`` (None: the kind's own columns, with the
    required further ones); None if a ``kind`` file cannot have that header."""
    t = TABLES[kind]
    head = tuple(c.name for c in t.columns)
    names = head + t.required if names is None else tuple(names)
    rest = names[len(head):]
    if names[:len(head)] != head:
        return None
    if t.more is None:
        return t.columns if not rest else None
    if len(set(names)) != len(names) or "" in rest or any(r not in rest for r in t.required):
        return None
    return t.columns + tuple(replace(t.more, name=n) for n in rest)


def _noun(c: Column, written: bool = False) -> str:
    """What a reader accepts in column ``c`` (``written``: what a writer writes there)."""
    if written and c.fmt == "d":
        return "whole numbers"
    return {int: "whole numbers", float: "numbers", str: "strings"}[c.dtype]


def _shown(v: Any) -> str:
    """``repr`` of a value, a numpy scalar as its Python value."""
    return repr(v.item() if type(v).__module__ == "numpy" and getattr(v, "ndim", None) == 0 else v)


def _what(c: Column) -> str:
    return c.what or f"{c.name} values"


class _Unwritable(ValueError):
    """A value a column cannot hold (the writer adds the file and line)."""


def _cell_writer(c: Column, quoted: bool):
    """A function ``value -> cell`` for column ``c``; a value it cannot write is an
    :class:`_Unwritable` naming the column."""
    def bad(v, why=None):
        raise _Unwritable(f"{_what(c)} must be {why or _noun(c, written=True)}, column {c.name} got {_shown(v)}")

    null = c.nullable
    if c.dtype is str:
        def cell(v):
            if v is None and null:
                return ""
            if type(v) is not str and not isinstance(v, str):
                bad(v, "strings")
            if not quoted and ("\t" in v or "\n" in v or "\r" in v):
                bad(v, "strings without tabs or line breaks")
            return v
    elif c.fmt == "d":
        def cell(v):
            if v is None and null:
                return ""
            try:
                whole = None if v is None or isinstance(v, (str, bytes)) else int(v)
            except (TypeError, ValueError, OverflowError):
                whole = None
            if whole is None or whole != v:
                bad(v)
            return str(whole)
    else:
        fmt = c.fmt

        def cell(v):
            if v is None and null:
                return ""
            if isinstance(v, (str, bytes)):
                bad(v)
            try:
                return format(v, fmt)
            except (TypeError, ValueError):
                bad(v)
    return cell


def write_tsv(kind: str, path: str | os.PathLike, rows: Iterable[Mapping[str, Any] | Sequence[Any]],
              columns: Sequence[str] | None = None) -> None:
    """Write a ``kind`` TSV atomically. ``rows``: mappings (by column name; an absent value is an
    empty cell where the column allows one) or sequences in column order; ``columns``: the header,
    for a kind with further columns (None: the kind's own columns). A value a reader could not
    read back is refused (a ValueError naming the line) and nothing is written."""
    t = TABLES[kind]
    cols = tsv_columns(kind, columns)
    if cols is None:
        raise ValueError(f"{path}: a {kind} file has the header {tsv_header(kind)}, not {list(columns or ())}")
    names = [c.name for c in cols]
    cells = [_cell_writer(c, t.quoted) for c in cols]
    n = len(cols)

    def lines():
        for line, row in enumerate(rows, start=2):
            if type(row) is not tuple and isinstance(row, (dict, Mapping)):  # (dict first: a quick check)
                vals = [row.get(name) for name in names]
            else:
                vals = row if type(row) is tuple else tuple(row)
                if len(vals) != n:
                    raise ValueError(f"{path}:{line}: {len(vals)} values for the {n} columns {names}")
            try:
                yield [cell(v) for cell, v in zip(cells, vals)]
            except _Unwritable as exc:
                raise ValueError(f"{path}:{line}: {exc}") from None

    with atomic_open(path, "w", encoding="utf-8", newline="") as fh:
        if t.quoted:
            w = csv.writer(fh, delimiter="\t", lineterminator="\n")
            w.writerow(names)
            w.writerows(lines())
        else:
            fh.write("\t".join(names) + "\n")
            for vals in lines():
                fh.write("\t".join(vals) + "\n")


def _parse(c: Column, values: list[str], path, kind: str) -> list:
    if c.dtype is str and not c.nullable:
        return values
    conv = c.dtype

    def one(v):
        return None if (v == "" and c.nullable) else conv(v)
    try:
        return list(map(conv, values)) if not c.nullable else [one(v) for v in values]
    except ValueError:
        for i, v in enumerate(values):
            try:
                one(v)
            except ValueError:
                raise RecordError(f"{path}:{i + 2}: {_what(c)} must be {_noun(c)}, column {c.name} holds {v!r}; "
                                  f"{_remedy(kind, path, TABLES[kind].rule)}") from None
        raise


def read_tsv(kind: str, path: str | os.PathLike) -> dict[str, list]:
    """The columns of a ``kind`` TSV, ``{name: values}`` in the file's order, each value of its
    column's type (None for an empty cell of a nullable column). A file with another header, a
    line with another number of cells or a value not of its column's type is a
    :class:`RecordError` naming ``path:line`` and what to rerun."""
    t = TABLES[kind]
    remedy = _remedy(kind, path, t.rule)
    try:
        fh = open(path, encoding="utf-8", newline="" if t.quoted else None)
    except FileNotFoundError:
        raise RecordError(f"{path}: no such {kind} file; run `snakemake {path}` (rule {t.rule})") from None
    try:
        with fh:
            if t.quoted:
                lines = csv.reader(fh, delimiter="\t")
            else:
                lines = (s[:-1].split("\t") if s.endswith("\n") else s.split("\t") for s in fh)
            header = next(lines, None)
            cols = None if header is None else tsv_columns(kind, header)
            if cols is None:
                found = "nothing (an empty file)" if header is None else header
                raise RecordError(f"{path}:1: expected header {tsv_header(kind)} of a {kind} file, found {found}; "
                                  f"{remedy}")
            n = len(cols)
            raw: list[list[str]] = [[] for _ in cols]  # by column, in chunks: a list per line kept (a
            chunk: list[list[str]] = []  # million) would set off costly garbage collections
            for line, vals in enumerate(lines, start=2):
                if len(vals) != n:
                    raise RecordError(f"{path}:{line}: expected {n} columns, got {len(vals)}; {remedy}")
                chunk.append(vals)
                if len(chunk) == 256:
                    for col, part in zip(raw, zip(*chunk)):
                        col.extend(part)
                    chunk = []
            for col, part in zip(raw, zip(*chunk)):
                col.extend(part)
    except UnicodeDecodeError as exc:
        raise RecordError(f"{path}: not a UTF-8 text {kind} file ({exc}); {remedy}") from None
    except csv.Error as exc:
        raise RecordError(f"{path}: not a {kind} file ({exc}); {remedy}") from None
    return {c.name: _parse(c, values, path, kind) for c, values in zip(cols, raw)}


def tsv_rows(table: Mapping[str, Sequence]) -> list[dict]:
    """:func:`read_tsv`'s columns as one dict per line, empty cells left out."""
    names = list(table)
    return [{k: v for k, v in zip(names, vals) if v is not None} for vals in zip(*table.values())]


# --------------------------------------------------------------------------- HDF5 files
@dataclass(frozen=True)
class Dataset:
    """One HDF5 dataset: its path in the file, its type (``"str"``: strings, written as
    variable-length UTF-8; else a numpy type) and its shape, one name per axis: axes of the same
    name have the same length in a file."""

    name: str
    dtype: str
    shape: tuple[str, ...]
    what: str  # what messages call its rows


LAYOUTS = {
    # rows of corpus/ids name the rows of corpus/emb (the same for queries); dim: the backbone's
    "embeddings": (Dataset("corpus/ids", "str", ("n_docs",), "doc ids"),
                   Dataset("corpus/emb", "float32", ("n_docs", "dim"), "doc vectors"),
                   Dataset("queries/ids", "str", ("n_queries",), "query ids"),
                   Dataset("queries/emb", "float32", ("n_queries", "dim"), "query vectors")),
    # a part's vectors, their ids and their positions among the part's inputs (rows)
    "embedding_shard": (Dataset("ids", "str", ("n_rows",), "ids"),
                        Dataset("rows", "int64", ("n_rows",), "row numbers"),
                        Dataset("emb", "float32", ("n_rows", "dim"), "vectors")),
}
LAYOUT_ATTRS = ("dim",)  # an axis length that is also an attribute of the file must equal it


def h5_dataset(kind: str, f, name: str, data: Any = None, shape: tuple[int, ...] | None = None):
    """Create dataset ``name`` of a ``kind`` file (an open, writable h5py file) with the type
    :data:`LAYOUTS` gives it, from ``data`` or empty of ``shape``; its group is made if missing."""
    import h5py
    import numpy as np

    spec = next((d for d in LAYOUTS[kind] if d.name == name), None)
    if spec is None:
        raise ValueError(f"a {kind} file has no dataset {name!r}; its datasets: {[d.name for d in LAYOUTS[kind]]}")
    group, _, leaf = name.rpartition("/")
    parent = f if not group else (f[group] if group in f else f.create_group(group))
    if spec.dtype == "str":
        dtype = h5py.string_dtype("utf-8")
        if data is not None:
            data = np.asarray(list(data), dtype=object)
    else:
        dtype = np.dtype(spec.dtype)
    return parent.create_dataset(leaf, data=data, shape=shape, dtype=dtype, track_times=False)


def check_h5(kind: str, f, path: str | os.PathLike) -> dict[str, int]:
    """The axis lengths (``{"n_docs": ..., "dim": ...}``) of an open ``kind`` HDF5 file if its
    datasets are those of :data:`LAYOUTS`: present, of their type, with as many axes, axes of one
    name of one length, and a length that is also a file attribute (:data:`LAYOUT_ATTRS`) equal to
    it; else a :class:`RecordError` naming ``path``. Reads no data."""
    import h5py
    import numpy as np

    remedy = _remedy(kind, path)
    sizes: dict[str, tuple[int, Dataset, tuple, int]] = {}
    for spec in LAYOUTS[kind]:
        ds = f.get(spec.name)
        if not isinstance(ds, h5py.Dataset):
            raise RecordError(f"{path}: not a valid {kind} file: no dataset {spec.name}; {remedy}")
        if spec.dtype == "str":
            ok = h5py.check_string_dtype(ds.dtype) is not None
        else:
            want = np.dtype(spec.dtype)
            ok = ds.dtype.kind == want.kind and ds.dtype.itemsize == want.itemsize
        if not ok:
            raise RecordError(f"{path}: not a valid {kind} file: {spec.name} holds {ds.dtype} values, "
                              f"{'strings' if spec.dtype == 'str' else spec.dtype} expected; {remedy}")
        if len(ds.shape) != len(spec.shape):
            raise RecordError(f"{path}: not a valid {kind} file: {spec.name} has shape {ds.shape}, a "
                              f"{len(spec.shape)}-D array ({' x '.join(spec.shape)}) expected; {remedy}")
        for axis, (name, n) in enumerate(zip(spec.shape, ds.shape)):
            if name not in sizes:
                sizes[name] = (n, spec, ds.shape, axis)
                continue
            m, other, other_shape, other_axis = sizes[name]
            if m != n:
                def size(k, d, ax):
                    return f"{k} {d.what}" if ax == 0 else f"{d.what} of {name} {k}"
                raise RecordError(f"{path}: not a valid {kind} file: {size(m, other, other_axis)} but "
                                  f"{size(n, spec, axis)} ({other.name}: {other_shape}, {spec.name}: {ds.shape}); "
                                  f"{remedy}")
    out = {name: v[0] for name, v in sizes.items()}
    for name in LAYOUT_ATTRS:
        if name in out and name in f.attrs:
            try:
                same = int(f.attrs[name]) == out[name]
            except (TypeError, ValueError):
                same = False
            if not same:
                raise RecordError(f"{path}: not a valid {kind} file: attribute {name} = {_shown(f.attrs[name])} but "
                                  f"the vectors have {name} {out[name]}; {remedy}")
    return out


# --------------------------------------------------------------------------- builders
def checkpoint_meta(**fields: Any) -> dict:
    """The provenance the training job stores in a checkpoint: exactly :data:`CHECKPOINT_META`."""
    missing = [f for f in CHECKPOINT_META if f not in fields]
    extra = [f for f in fields if f not in CHECKPOINT_META]
    if missing or extra:
        raise ValueError(f"checkpoint meta: missing {missing}, unknown {extra}")
    return {f: fields[f] for f in CHECKPOINT_META}


def result(*, run: Mapping[str, Any], method: Any, summary: Mapping[str, Any], config_snapshot: Mapping[str, Any],
           checkpoint_sha256: str, per_query_sha256: str, versions: Mapping, runtime: Mapping) -> dict:
    """A result record (``eval.json``) of one evaluated run.

    ``run``: dataset, backbone, method, stage, seed (the job's wildcards); ``method``: the loaded
    :class:`~dive_core.methods.base.Method` (its checkpoint meta supplies the training
    provenance); ``summary``: :func:`dive_core.evaluation.evaluate_method`'s summary."""
    meta = method.meta
    return stamp("result", {
        "dataset": run["dataset"], "backbone": run["backbone"], "method": run["method"],
        "method_type": method.type, "stage": run["stage"], "seed": int(run["seed"]), "k": method.k, "d": method.d,
        **{k: summary[k] for k in ("role", "n_queries", "metrics", "subsets", "diagnostics", "top_k",
                                   "identical_ids")},
        "config": {**config_snapshot, "hparams": method.hp, "negatives": meta["negatives"],
                   "n_triplets": meta["n_triplets"], "n_train_queries": meta["n_train_queries"],
                   "selected": meta["selected"]},
        "fingerprints": {**meta["fingerprints"], "checkpoint_sha256": checkpoint_sha256,
                         "weights_sha256": method.state_sha256(), "per_query_sha256": per_query_sha256},
        "timings": {"train_seconds": meta["train_seconds"], **summary["timings"]},
        "training": {"final_epoch": meta["final_epoch"], "device": meta["device"], "precision": meta["precision"],
                     "runtime": meta["runtime"], "versions": meta["versions"]},
        "versions": dict(versions),
        "runtime": dict(runtime),
    })


def run_key(record: Mapping[str, Any]) -> tuple:
    """(dataset, backbone, method, k, stage, seed) of a result record: the run it describes."""
    return tuple(record[f] for f in ("dataset", "backbone", "method", "k", "stage", "seed"))


# --------------------------------------------------------------------------- files for use outside the workflow
COMPRESSED_FORMAT = "dive-compressed/1"
COMPRESSED_META_KEY = "dive_compressed"  # the metadata key (Parquet schema, HDF5 emb attrs) holding the JSON record
COMPRESSED_FIELDS = ("format", "encoding", "compressor", "input", "normalisation")  # and sq8 (int8), faiss_index
# a compress part's range file, beside its float32 spool: its rows of the input and their per-coordinate range
COMPRESS_PART_FIELDS = ("part", "start", "stop", "n", "group", "weights_sha256", "allowed", "vmin", "vmax")
COMPRESSOR_FORMAT = "dive-compressor/2"  # /1 had no config_sha256
COMPRESSOR_DEFINING = ("format", "type", "d", "k", "seed", "hparams", "state_sha256")  # what config_sha256 covers
COMPRESSOR_FIELDS = (*COMPRESSOR_DEFINING, "provenance", "config_sha256")


def compressed(compressor: Mapping[str, Any], vectors: Any, encoding: str,
               sq8: tuple[Sequence[float], Sequence[float]] | None = None, allowed: Sequence[str] = (),
               faiss_index: Mapping[str, Any] | None = None) -> dict:
    """The ``dive_compressed`` metadata record of one output vector set (no time, no path: the CLI
    and a gathered workflow output carry the same record). ``compressor``: its provenance
    (:func:`dive_core.compress.provenance`); ``vectors``: the input set (a
    :class:`~dive_core.vectors.VectorFile`); ``sq8``: an int8 file's ``(vmin, vdiff)`` ranges, as floats;
    ``allowed``: the options that let all-zero rows or repeated ids through on purpose (``input.allowed``);
    ``faiss_index``: the FAISS factory index to be made of this set (:func:`dive_core.compress.index_record`)."""
    rec = {"format": COMPRESSED_FORMAT, "encoding": encoding, "compressor": dict(compressor),
           "input": {"file": vectors.path.name, "group": vectors.group, "n": int(vectors.n), "dim": int(vectors.dim),
                     "dtype": vectors.dtype, **({"allowed": sorted(allowed)} if allowed else {})},
           "normalisation": "input rows L2-normalised, compressed, output rows L2-normalised (Method.compress)"}
    if sq8 is not None:
        rec["sq8"] = {"vmin": list(sq8[0]), "vdiff": list(sq8[1]),
                      "faiss": "ScalarQuantizer QT_8bit, RS_minmax over every row of the input",
                      "decode": "vmin + (stored + 128 + 0.5) / 255 * vdiff"}
    if faiss_index is not None:
        rec["faiss_index"] = dict(faiss_index)
    return rec


def compressed_metadata(record: Mapping[str, Any]) -> dict[str, str]:
    """A :func:`compressed` record as file metadata: ``{COMPRESSED_META_KEY: its JSON}`` (a .npy
    gets it in ``<name>.meta.json`` beside it)."""
    return {COMPRESSED_META_KEY: json.dumps(record, sort_keys=True)}


def read_compressed_metadata(meta: Mapping[str, str]) -> dict:
    """The :func:`compressed` record in a file's metadata (KeyError, TypeError or ValueError: none)."""
    return json.loads(meta[COMPRESSED_META_KEY])


def write_compress_part(path: str | os.PathLike, **fields: Any) -> dict:
    """Write a compress part's range file: exactly :data:`COMPRESS_PART_FIELDS`, in that order."""
    missing = [f for f in COMPRESS_PART_FIELDS if f not in fields]
    extra = [f for f in fields if f not in COMPRESS_PART_FIELDS]
    if missing or extra:
        raise ValueError(f"{path}: compress part: missing {missing}, unknown {extra}")
    obj = {f: fields[f] for f in COMPRESS_PART_FIELDS}
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(obj, fh)
    return obj


def read_compress_part(path: str | os.PathLike) -> dict:
    """A compress part's range file (OSError, ValueError: not a complete one)."""
    with open(path, encoding="utf-8") as fh:
        obj = json.loads(fh.read())
    missing = [f for f in COMPRESS_PART_FIELDS if not isinstance(obj, Mapping) or f not in obj]
    if missing:
        raise RecordError(f"{path}: compress part without field(s) {missing}")
    return obj


def compressor_config_sha256(config: Mapping[str, Any]) -> str:
    """sha256 of what defines the compressor in ``config.json`` (not its provenance): a hand-edited
    k, d, type or hyperparameter is refused, also for a compressor without weights (truncate)."""
    defining = {k: config[k] for k in COMPRESSOR_DEFINING}
    return hashlib.sha256(json.dumps(defining, sort_keys=True).encode()).hexdigest()


def compressor_config(*, type: str, d: int, k: int, seed: int, hparams: Mapping[str, Any], state_sha256: str,
                      provenance: Mapping[str, Any] | None = None) -> dict:
    """An exported compressor's ``config.json``: every field of :data:`COMPRESSOR_FIELDS`."""
    config = {"format": COMPRESSOR_FORMAT, "type": type, "d": d, "k": k, "seed": seed, "hparams": dict(hparams),
              "state_sha256": state_sha256, "provenance": dict(provenance or {})}
    config["config_sha256"] = compressor_config_sha256(config)
    return config


def write_compressor_config(path: str | os.PathLike, config: Mapping[str, Any]) -> None:
    """Write a :func:`compressor_config` atomically."""
    with atomic_open(path, "w", encoding="utf-8") as fh:
        json.dump(config, fh, indent=2, sort_keys=True, default=str)


def check_compressor_config(config: Mapping[str, Any], path: str | os.PathLike) -> dict:
    """``config`` if its defining fields match its ``config_sha256``; else a ValueError naming ``path``."""
    if config.get("config_sha256") != compressor_config_sha256(config):
        raise ValueError(f"{path}: its type, dimensions or hyperparameters do not match the recorded "
                         "config_sha256 (edited by hand?); export the checkpoint again")
    return dict(config)
