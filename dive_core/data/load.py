"""The strict loaders of a BEIR dataset directory: its layout, its errors, :func:`load_beir`.

A BEIR dataset directory holds ``corpus.jsonl`` (or ``corpus.jsonl.gz``), ``queries.jsonl``
(or ``.gz``) and ``qrels/*.tsv`` (``query-id<TAB>corpus-id<TAB>score``, optional header line,
LF or CRLF line endings).

Every file is fingerprinted by the sha256 of its *decompressed* bytes, under its canonical
name (``corpus.jsonl``, ``queries.jsonl``, ``qrels/test.tsv``), so a gzipped and a plain copy
of the same file have the same fingerprint, and a local copy of an official file has the
official per-file sha256.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

from ..hashing import sha256_bytes

log = logging.getLogger(__name__)

CORPUS = "corpus.jsonl"
QUERIES = "queries.jsonl"
# Third-column names that mark the first line of a qrels file as a header. Any other
# non-integer score, on any line, is an error (a bad first data row is not silently skipped).
QRELS_HEADER_SCORE_NAMES = frozenset({"score", "relevance", "rel", "label", "grade"})
ON_MISSING = ("error", "drop")  # config `on_missing_qrels_ids`: qrels rows naming an unknown query or document


class DataError(ValueError):
    """Bad or inconsistent input data; the message names the file (and line, or key)."""


class ChecksumError(DataError):
    """A file's sha256 differs from the known value: refused."""


# --------------------------------------------------------------------------- reading


def read_decompressed(path: Path) -> bytes:
    """The file's bytes, gunzipped if its name ends in ``.gz``."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as fh:
                return fh.read()
        return path.read_bytes()
    except (OSError, EOFError) as exc:
        raise DataError(f"{path}: cannot read: {exc}") from exc


# --------------------------------------------------------------------------- layout


def one_of(root: Path, name: str) -> Path:
    """``root/name`` or ``root/name.gz``; error if neither or both exist."""
    plain, gz = root / name, root / f"{name}.gz"
    found = [p for p in (plain, gz) if p.exists()]
    if not found:
        raise DataError(f"{root}: neither {name} nor {name}.gz found")
    if len(found) == 2:
        raise DataError(f"{root}: both {name} and {name}.gz exist; keep one")
    return found[0]


def dataset_files(root: str | os.PathLike) -> dict[str, Path]:
    """Map canonical file names to the actual files of a BEIR directory."""
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"{root}: BEIR dataset directory not found")
    files = {CORPUS: one_of(root, CORPUS), QUERIES: one_of(root, QUERIES)}
    qdir = root / "qrels"
    qrels = sorted(qdir.glob("*.tsv")) + sorted(qdir.glob("*.tsv.gz")) if qdir.is_dir() else []
    if not qrels:
        raise DataError(f"{root}: no qrels/*.tsv files found")
    for q in qrels:
        canonical = f"qrels/{q.name.removesuffix('.gz')}"
        if canonical in files:
            raise DataError(f"{qdir}: both {canonical} and its .gz exist; keep one")
        files[canonical] = q
    return files


# --------------------------------------------------------------------------- loaders


def _lines(path: Path, data: bytes) -> list[str]:
    """The file's text lines: split on ``\n`` only (a trailing ``\r`` is dropped).

    ``str.splitlines`` is not used: it also splits on U+2028, U+0085, form feeds and other
    characters that JSON allows unescaped inside strings, which would break a valid record in
    two and shift every following line number.
    """
    try:
        text = data.decode("utf-8-sig", errors="strict") if data else ""
    except UnicodeDecodeError as exc:
        lineno = data.count(b"\n", 0, exc.start) + 1
        raise DataError(f"{path}:{lineno}: not valid UTF-8 ({exc.reason})") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


class _LineError(ValueError):
    """A problem with one line's content; the caller prefixes ``file:line``."""


def _json_record(line: str) -> dict:
    """One JSONL line (already decoded, end of line removed) as a JSON object."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise _LineError(f"invalid JSON: {exc.msg} (column {exc.colno})") from exc
    if not isinstance(obj, dict):
        raise _LineError(f"expected a JSON object, got {type(obj).__name__}")
    return obj


def _qrels_row(line: str, is_first: bool) -> tuple[str, str, int] | None:
    """One non-blank qrels line as ``(query_id, doc_id, score)``; None for a header line.

    Columns are tab-separated (any whitespace where the line has no tab). Only the first
    non-blank line (``is_first``) may be a header, recognised by its third column's name
    (:data:`QRELS_HEADER_SCORE_NAMES`).
    """
    parts = line.split("\t") if "\t" in line else line.split()
    if len(parts) != 3:
        raise _LineError(f"expected 3 columns (query-id, corpus-id, score), got {len(parts)}")
    qid, did, score_s = (p.strip() for p in parts)
    try:
        return qid, did, int(score_s)
    except ValueError:
        if is_first and score_s.lower() in QRELS_HEADER_SCORE_NAMES:
            return None
        raise _LineError(f"score {score_s!r} is not an integer") from None


def _parse_jsonl(path: Path, data: bytes, required: Iterable[str]) -> Iterable[tuple[int, dict]]:
    for lineno, line in enumerate(_lines(path, data), start=1):
        if not line.strip():
            continue
        try:
            obj = _json_record(line)
        except _LineError as exc:
            raise DataError(f"{path}:{lineno}: {exc}") from exc
        for key in required:
            if key not in obj:
                raise DataError(f"{path}:{lineno}: missing key {key!r}")
        if "_id" in required and (obj["_id"] is None or str(obj["_id"]).strip() == ""):
            raise DataError(f"{path}:{lineno}: empty _id")
        yield lineno, obj


def load_corpus(path: Path, data: bytes | None = None) -> dict[str, dict[str, str]]:
    """``{doc_id: {"title": ..., "text": ...}}`` in file order."""
    data = read_decompressed(path) if data is None else data
    corpus: dict[str, dict[str, str]] = {}
    first_line: dict[str, int] = {}
    for lineno, obj in _parse_jsonl(path, data, ("_id",)):
        did = str(obj["_id"])
        if did in corpus:
            raise DataError(f"{path}:{lineno}: duplicate _id {did!r} (first on line {first_line[did]})")
        first_line[did] = lineno
        corpus[did] = {"title": str(obj.get("title") or ""), "text": str(obj.get("text") or "")}
    if not corpus:
        raise DataError(f"{path}: corpus is empty")
    return corpus


def load_queries(path: Path, data: bytes | None = None) -> dict[str, str]:
    """``{query_id: text}`` in file order."""
    data = read_decompressed(path) if data is None else data
    queries: dict[str, str] = {}
    for lineno, obj in _parse_jsonl(path, data, ("_id", "text")):
        qid = str(obj["_id"])
        if qid in queries:
            raise DataError(f"{path}:{lineno}: duplicate query _id {qid!r}")
        queries[qid] = str(obj["text"])
    return queries


def load_qrels(path: Path, data: bytes | None = None) -> dict[str, dict[str, int]]:
    """``{query_id: {doc_id: score}}`` from a BEIR qrels TSV (header optional, LF or CRLF)."""
    data = read_decompressed(path) if data is None else data
    qrels: dict[str, dict[str, int]] = {}
    seen_at: dict[tuple[str, str], int] = {}
    first = True
    for lineno, raw in enumerate(_lines(path, data), start=1):
        line = raw.strip()
        if not line:
            continue
        is_first, first = first, False
        try:
            row = _qrels_row(line, is_first)
        except _LineError as exc:
            raise DataError(f"{path}:{lineno}: {exc}") from None
        if row is None:
            continue  # header line, e.g. "query-id  corpus-id  score"
        qid, did, score = row
        key = (qid, did)
        if key in seen_at and qrels[qid][did] != score:
            raise DataError(
                f"{path}:{lineno}: ({qid}, {did}) has score {score} but line {seen_at[key]} gave "
                f"{qrels[qid][did]}"
            )
        seen_at[key] = lineno
        qrels.setdefault(qid, {})[did] = score
    return qrels


@dataclass
class BeirDataset:
    """A loaded BEIR dataset with its source fingerprint."""

    root: Path
    corpus: dict[str, dict[str, str]]
    queries: dict[str, str]
    qrels: dict[str, dict[str, dict[str, int]]]  # qrels file name -> {qid: {did: score}}
    fingerprint: dict[str, str]
    dropped: dict[str, int] = field(default_factory=dict)

    @property
    def doc_ids(self) -> list[str]:
        return list(self.corpus)

    def all_qrels(self) -> dict[str, dict[str, int]]:
        """Rows of every qrels file merged (max score when a pair appears in several files)."""
        merged: dict[str, dict[str, int]] = {}
        for table in self.qrels.values():
            for qid, docs in table.items():
                row = merged.setdefault(qid, {})
                for did, s in docs.items():
                    row[did] = max(s, row.get(did, s))
        return merged

    def relevant(self) -> dict[str, set[str]]:
        """Docs with score > 0 per query, over all qrels files."""
        out: dict[str, set[str]] = {}
        for qid, docs in self.all_qrels().items():
            pos = {d for d, s in docs.items() if s > 0}
            if pos:
                out[qid] = pos
        return out

    def doc_text(self, did: str) -> str:
        """Documents are encoded as ``title + " " + text`` (stripped): :func:`document_text`."""
        return document_text(self.corpus[did])


def document_text(doc: Mapping[str, str]) -> str:
    """What a corpus entry (``{"title", "text"}``) is encoded as: ``title + " " + text``, stripped."""
    return f"{doc['title']} {doc['text']}".strip()


def load_beir(
    root: str | os.PathLike,
    expected_fingerprint: Mapping[str, str] | None = None,
    on_missing: str = "error",
) -> BeirDataset:
    """Load and cross-check a BEIR directory.

    ``expected_fingerprint`` (from the staging manifest) is verified while reading: a file that
    changed since staging is an error. ``on_missing`` decides what happens to qrels rows whose
    query or document id is absent from queries/corpus: ``"error"`` (default) or ``"drop"``
    (dropped rows are counted in ``BeirDataset.dropped``).
    """
    if on_missing not in ON_MISSING:
        raise ValueError(f"on_missing must be one of {ON_MISSING}, not {on_missing!r}")
    root = Path(root)
    files = dataset_files(root)
    raw = {name: read_decompressed(p) for name, p in files.items()}
    fp = {name: sha256_bytes(b) for name, b in raw.items()}
    if expected_fingerprint is not None:
        for name, want in expected_fingerprint.items():
            if fp.get(name) != want:
                raise DataError(
                    f"{files.get(name, root / name)}: content changed since it was staged "
                    f"(sha256 {fp.get(name)} != recorded {want}); re-run the data stage"
                )
        extra = set(fp) - set(expected_fingerprint)
        if extra:
            raise DataError(f"{root}: files not in the staging manifest: {sorted(extra)}")
    corpus = load_corpus(files[CORPUS], raw.pop(CORPUS))
    queries = load_queries(files[QUERIES], raw.pop(QUERIES))
    qrels: dict[str, dict[str, dict[str, int]]] = {}
    dropped: dict[str, int] = {}
    for name in sorted(raw):
        table = load_qrels(files[name], raw[name])
        n_drop = 0
        for qid in list(table):
            if qid not in queries:
                if on_missing == "error":
                    raise DataError(f"{files[name]}: query-id {qid!r} is not in {files[QUERIES].name}")
                n_drop += len(table.pop(qid))
                continue
            for did in list(table[qid]):
                if did not in corpus:
                    if on_missing == "error":
                        raise DataError(
                            f"{files[name]}: corpus-id {did!r} (query {qid!r}) is not in "
                            f"{files[CORPUS].name}"
                        )
                    del table[qid][did]
                    n_drop += 1
            if not table[qid]:
                del table[qid]
        qrels[name.removeprefix("qrels/").removesuffix(".tsv")] = table
        if n_drop:
            dropped[name] = n_drop
            log.warning("%s: dropped %d qrels rows with unknown ids", files[name], n_drop)
    return BeirDataset(root, corpus, queries, qrels, fp, dropped)
