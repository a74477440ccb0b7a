"""The TSV files (:data:`TABLES`): the columns in order, each one's type and how it is written;
:func:`write_tsv` and :func:`read_tsv` are their only writer and reader."""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping, Sequence

from ..atomic import atomic_open
from ..metrics import METRICS
from .base import RecordError, _remedy, _shown


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
    fix = _remedy(kind, path, t.rule)
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
                                  f"{fix}")
            n = len(cols)
            raw: list[list[str]] = [[] for _ in cols]  # by column, in chunks: a list per line kept (a
            chunk: list[list[str]] = []  # million) would set off costly garbage collections
            for line, vals in enumerate(lines, start=2):
                if len(vals) != n:
                    raise RecordError(f"{path}:{line}: expected {n} columns, got {len(vals)}; {fix}")
                chunk.append(vals)
                if len(chunk) == 256:
                    for col, part in zip(raw, zip(*chunk)):
                        col.extend(part)
                    chunk = []
            for col, part in zip(raw, zip(*chunk)):
                col.extend(part)
    except UnicodeDecodeError as exc:
        raise RecordError(f"{path}: not a UTF-8 text {kind} file ({exc}); {fix}") from None
    except csv.Error as exc:
        raise RecordError(f"{path}: not a {kind} file ({exc}); {fix}") from None
    return {c.name: _parse(c, values, path, kind) for c, values in zip(cols, raw)}


def tsv_rows(table: Mapping[str, Sequence]) -> list[dict]:
    """:func:`read_tsv`'s columns as one dict per line, empty cells left out."""
    names = list(table)
    return [{k: v for k, v in zip(names, vals) if v is not None} for vals in zip(*table.values())]


def read_train_log(path: str | os.PathLike) -> list[dict]:
    """A training's per-epoch log (``train_log``, written by :func:`dive_core.training.write_log_tsv`):
    one dict per epoch (``epoch`` an int, ``phase`` a string, the other columns floats; a term the
    epoch did not log left out). Here, not in ``training``, so that a table job imports no torch."""
    return tsv_rows(read_tsv("train_log", path))
