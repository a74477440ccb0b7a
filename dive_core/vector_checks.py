"""What a vector file must hold before its rows are used: one rule for every reader of raw vectors
(``dive-compress``, the ``compress:`` jobs, the ``vectors`` backbone's ingest).

* every id once (:func:`duplicate_ids`: a pass over the ids alone, before any row is used);
* no row with NaN or Inf, no all-zero row (:func:`bad_rows`, chunk by chunk as the rows are read):
  an all-zero row has no direction, so normalising it gives no vector that means anything;
* the dimension its user expects (:func:`wrong_dimension`).

Each problem is a :class:`BadRow` naming the file (and HDF5 group), the row and its id; the caller
raises its own error with it (``str(bad)``), or lists several (the ingest). A user who must pass
all-zero rows or repeated ids on purpose says so (:data:`ALLOW`: ``--allow-zero-rows``,
``--allow-duplicate-ids``); NaN, Inf and another dimension are never allowed.

Memory: the id pass keeps 16 bytes a row (a 64-bit hash of each id and its sort order), not the
ids; the ids of rows whose hashes collide are read again to tell a repeated id from a collision.
No torch, and nothing of dive_core.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import numpy as np

# what a user may let through on purpose: the problem kind -> the option's name (a keyword argument
# and a compress: config key; the command line spells it --allow-zero-rows / --allow-duplicate-ids)
ALLOW = {"zero": "allow_zero_rows", "duplicate": "allow_duplicate_ids"}


def option(kind: str) -> str:
    """``--allow-zero-rows`` for ``zero``: the command-line spelling of :data:`ALLOW`'s option."""
    return "--" + ALLOW[kind].replace("_", "-")


@dataclass(frozen=True)
class BadRow:
    """One row a file may not hold: ``kind`` (``nonfinite``, ``zero``, ``duplicate``,
    ``dimension``), the file (``where``), the row, its id, and ``detail`` (the row that first held a
    repeated id; the expected dimension and why)."""

    kind: str
    where: str
    row: int
    id: str
    detail: str = ""

    def at(self) -> str:
        """Where it is: ``row 10 (id 'd3')``, and for a repeated id ``... repeating row 3``."""
        return f"row {self.row} (id {self.id!r})" + (f" repeating row {self.detail}" if self.kind == "duplicate" else "")

    def describe(self, options: bool = True) -> str:
        """The problem without the file: ``row 4 (id 'd4') is all zeros ...``; ``options``: name the
        option that lets such rows through, where there is one."""
        what = {"nonfinite": "holds NaN or Inf", "dimension": self.detail,
                "zero": "is all zeros: it has no direction to normalise",
                "duplicate": f"repeats the id of row {self.detail}"}[self.kind]
        if options and self.kind in ALLOW:
            what += f" ({option(self.kind)}, a compress: entry's {ALLOW[self.kind]}: true, lets such rows through)"
        return f"row {self.row} (id {self.id!r}) {what}"

    def __str__(self) -> str:
        return f"{self.where}: {self.describe()}"


def where(vf: Any) -> str:
    """The file of a vector set (a :class:`~dive_core.vectors.VectorFile`), with its HDF5 group."""
    return f"{vf.path}" + (f" (group {vf.group})" if getattr(vf, "group", None) else "")


def bad_rows(place: str, ids: Sequence[str], mat: np.ndarray, start: int, *, allow_zero_rows: bool = False,
             checked: np.ndarray | None = None) -> list[BadRow]:
    """The rows of a chunk (``ids``, ``mat``: file rows ``start``...) that hold NaN or Inf, or (unless
    ``allow_zero_rows``) only zeros, in row order; ``checked``: a boolean mask of the rows to check
    (all by default)."""
    finite = np.isfinite(mat).all(axis=1)
    bad = ~finite
    zero = np.zeros(len(ids), dtype=bool) if allow_zero_rows else finite & ~(mat != 0).any(axis=1)
    bad |= zero
    if checked is not None:
        bad &= checked
    return [BadRow("zero" if zero[i] else "nonfinite", place, start + int(i), ids[i]) for i in np.flatnonzero(bad)]


def duplicate_ids(place: str, read_ids: Callable[[], Iterable[Sequence[str]]]) -> list[BadRow]:
    """Every row whose id an earlier row holds, in row order (``detail``: that earlier row).
    ``read_ids()`` iterates over the file's ids chunk by chunk from its first row; it is called
    a second time only when two ids hash alike."""
    chunks = [np.fromiter(map(hash, ids), dtype=np.int64, count=len(ids)) for ids in read_ids()]
    hashes = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64)
    del chunks
    order = np.argsort(hashes, kind="stable")
    same = np.flatnonzero(hashes[order[1:]] == hashes[order[:-1]])
    if not len(same):
        return []
    rows = np.unique(np.concatenate([order[same], order[same + 1]]))  # those of equal hashes, ascending
    wanted, found, pos = set(rows.tolist()), {}, 0
    for ids in read_ids():
        for i, ident in enumerate(ids, pos):
            if i in wanted:
                found[i] = ident
        pos += len(ids)
    first: dict[str, int] = {}
    out = []
    for row in rows.tolist():
        ident = found[row]
        if ident in first:
            out.append(BadRow("duplicate", place, row, ident, str(first[ident])))
        else:
            first[ident] = row
    return out


def wrong_dimension(place: str, dim: int, want: int, first_id: str | None, why: str) -> BadRow | None:
    """A file of ``dim``-dimensional vectors where ``want`` dimensions are expected (``why``: who
    expects them), as a problem of its first row; None when they agree."""
    if dim == want:
        return None
    return BadRow("dimension", place, 0, "" if first_id is None else first_id,
                  f"has {dim} dimensions, as every row of the file, but {why}")
