r"""The collection checker: ``python -m dive_core.data check DIR`` checks a collection in the BEIR
layout before any job reads it (:func:`check_collection`, :func:`main`).

Unlike the loaders (:mod:`.load`), which stop at the first problem, it reads every line,
collects every problem (each with file:line) and prints them grouped by kind, at most
``limit`` per kind. Files are streamed line by line (gunzipped on the fly); only the id sets
(and the qrels pairs, to find conflicting duplicates) are kept in memory. The line rules are
the loaders': lines end at ``\n`` only (a trailing ``\r`` is dropped), a UTF-8 BOM at the start
is ignored, blank lines are skipped, JSON records and qrels rows are parsed by the same helpers
(``_json_record``, ``_qrels_row``: header line optional).
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping, Sequence

from ..splits import split_ids
from .load import CORPUS, QUERIES, DataError, _json_record, _LineError, one_of, _qrels_row

CHECK_LIMIT = 20
BEIR_SPLITS = ("train", "dev", "test")
DEFAULT_SPLIT_FRACTIONS = (0.6, 0.2, 0.2)  # config/config.yaml `split.fractions`


def _iter_text_lines(path: Path) -> Iterator[tuple[int, str | None, str | None]]:
    """``(lineno, text, problem)`` for every line of ``path`` (gunzipped if ``.gz``), streamed.

    ``text`` is the decoded line without its end of line (``None`` when the line is not valid
    UTF-8; ``problem`` then says why). An unreadable file (a corrupt gzip stream, an I/O error)
    raises ``DataError`` naming the line where reading stopped.
    """
    lineno = 0
    try:
        with (gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")) as fh:
            for lineno, raw in enumerate(fh, start=1):  # binary mode: splits on b"\n" only
                try:
                    text = raw.decode("utf-8-sig" if lineno == 1 else "utf-8", errors="strict")
                except UnicodeDecodeError as exc:
                    yield lineno, None, f"not valid UTF-8 ({exc.reason} at byte {exc.start + 1} of the line)"
                    continue
                if text.endswith("\n"):
                    text = text[:-1]
                if text.endswith("\r"):
                    text = text[:-1]
                yield lineno, text, None
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{path}:{lineno + 1}: cannot read past this point: {exc}") from None


@dataclass
class _Problems:
    """The problems of one kind: how many, and the first few messages."""

    shown: list[str] = field(default_factory=list)
    count: int = 0


@dataclass
class CollectionReport:
    """What :func:`check_collection` found: errors by kind (at most ``limit`` messages kept per
    kind), the counts, and notes (facts worth knowing that are no error)."""

    root: Path
    limit: int = CHECK_LIMIT
    problems: dict[str, _Problems] = field(default_factory=dict)
    counts: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, kind: str, message: str) -> None:
        group = self.problems.setdefault(kind, _Problems())
        group.count += 1
        if len(group.shown) < self.limit:
            group.shown.append(message)

    @property
    def n_errors(self) -> int:
        return sum(g.count for g in self.problems.values())

    @property
    def ok(self) -> bool:
        return self.n_errors == 0

    def lines(self) -> list[str]:
        """The printed report: errors by kind (in the order first met), counts, notes, verdict."""
        out = [f"checking {self.root}"]
        for kind, group in self.problems.items():
            out.append(f"ERROR: {kind} ({group.count}):")
            out += [f"  {m}" for m in group.shown]
            if group.count > len(group.shown):
                out.append(f"  ... and {group.count - len(group.shown)} more")
        out += self.counts
        out += [f"note: {n}" for n in self.notes]
        if self.ok:
            out.append("OK")
        else:
            out.append(f"FAILED: {self.n_errors} error(s) of {len(self.problems)} kind(s)")
        return out


def _scan_jsonl(path: Path, report: CollectionReport, what: str) -> dict[str, int]:
    """Check a corpus (``what="corpus"``) or queries file; ``{id: first line}`` of its records."""
    first_line: dict[str, int] = {}
    try:
        for lineno, line, problem in _iter_text_lines(path):
            where = f"{path}:{lineno}"
            if line is None:
                report.add("not UTF-8", f"{where}: {problem}")
                continue
            if not line.strip():
                continue
            try:
                obj = _json_record(line)
            except _LineError as exc:
                report.add("invalid JSON", f"{where}: {exc}")
                continue
            rid = obj.get("_id")
            if "_id" not in obj:
                report.add("missing _id", f"{where}: missing key '_id'")
            elif rid is None or isinstance(rid, bool) or not isinstance(rid, (str, int)) or not str(rid).strip():
                report.add("missing _id", f"{where}: _id {json.dumps(rid)} is not a non-empty string")
                rid = None
            if "text" not in obj:
                report.add("missing text", f"{where}: missing key 'text'")
            for key in ("title", "text") if what == "corpus" else ("text",):
                if obj.get(key) is not None and not isinstance(obj[key], str):
                    report.add("not a string", f"{where}: {key!r} is a {type(obj[key]).__name__}, "
                                               "expected a string")
            title = obj.get("title") if isinstance(obj.get("title"), str) else ""
            text = obj.get("text") if isinstance(obj.get("text"), str) else ""
            if "text" in obj:
                if what == "corpus" and not (title.strip() or text.strip()):
                    report.add("empty document", f"{where}: title and text are both empty")
                elif what == "queries" and not text.strip():
                    report.add("empty query", f"{where}: text is empty")
            if rid is None or "_id" not in obj:
                continue
            rid = str(rid)
            if rid in first_line:
                report.add("duplicate _id", f"{where}: duplicate _id {rid!r} (first on line "
                                            f"{first_line[rid]})")
            else:
                first_line[rid] = lineno
    except DataError as exc:
        report.add("unreadable file", str(exc))
    return first_line


def _scan_qrels(path: Path, report: CollectionReport, queries: dict | None, corpus: dict | None,
                names: Mapping[str, str]) -> dict:
    """Check one qrels file against the query and corpus ids (None: that file is unusable)."""
    rows, qids, relevant, scores = 0, set(), set(), {}
    seen: dict[tuple[str, str], tuple[int, int]] = {}
    first = True
    try:
        for lineno, line, problem in _iter_text_lines(path):
            where = f"{path}:{lineno}"
            if line is None:
                report.add("not UTF-8", f"{where}: {problem}")
                first = False
                continue
            line = line.strip()
            if not line:
                continue
            is_first, first = first, False
            try:
                row = _qrels_row(line, is_first)
            except _LineError as exc:
                kind = "non-integer score" if str(exc).startswith("score") else "malformed qrels row"
                report.add(kind, f"{where}: {exc}")
                continue
            if row is None:
                continue  # header line
            qid, did, score = row
            rows += 1
            known = True
            if queries is not None and qid not in queries:
                report.add("unknown query-id", f"{where}: query-id {qid!r} is not in {names['queries']}")
                known = False
            if corpus is not None and did not in corpus:
                report.add("unknown corpus-id", f"{where}: corpus-id {did!r} is not in {names['corpus']}")
                known = False
            prev = seen.get((qid, did))
            if prev is not None and prev[0] != score:
                report.add("conflicting judgment", f"{where}: ({qid}, {did}) has score {score} but line "
                                                   f"{prev[1]} gave {prev[0]}")
            elif prev is None:
                seen[(qid, did)] = (score, lineno)
            scores[score] = scores.get(score, 0) + 1
            if known or queries is None:
                qids.add(qid)
                if score > 0:
                    relevant.add(qid)
    except DataError as exc:
        report.add("unreadable file", str(exc))
    if rows == 0:
        report.add("no judgments", f"{path}: no judgment rows")
    elif queries is not None and not qids:
        report.add("no known query", f"{path}: none of its query ids is in {names['queries']} "
                                     "(a qrels file of another collection?)")
    return {"rows": rows, "qids": qids, "relevant": relevant, "scores": scores}


def _layout(root: Path, report: CollectionReport) -> tuple[Path | None, Path | None, dict[str, Path]]:
    """The collection's corpus, queries and qrels files (by split name); problems reported."""
    found: list[Path | None] = []
    for name in (CORPUS, QUERIES):
        try:
            found.append(one_of(root, name))
        except DataError as exc:
            report.add("layout", str(exc))
            found.append(None)
    qdir, qrels = root / "qrels", {}
    files = sorted(qdir.glob("*.tsv")) + sorted(qdir.glob("*.tsv.gz")) if qdir.is_dir() else []
    for q in files:
        split = q.name.removesuffix(".gz").removesuffix(".tsv")
        if split in qrels:
            report.add("layout", f"{qdir}: both {split}.tsv and {split}.tsv.gz exist; keep one")
            continue
        qrels[split] = q
    if not qrels:
        report.add("layout", f"{root}: no qrels/*.tsv files found (BEIR layout: qrels/test.tsv)")
    elif "test" not in qrels:
        report.add("layout", f"{qdir}: no test.tsv (BEIR layout: qrels/test.tsv, optionally "
                             "train.tsv and dev.tsv)")
    for split in qrels:
        if split not in BEIR_SPLITS:
            report.notes.append(f"{qrels[split]}: not a BEIR split name (train, dev, test); the workflow "
                                "pools every qrels/*.tsv file anyway")
    return found[0], found[1], {s: qrels[s] for s in sorted(qrels, key=_split_order)}


def _split_order(split: str) -> tuple[int, str]:
    return (BEIR_SPLITS.index(split) if split in BEIR_SPLITS else len(BEIR_SPLITS), split)


def check_collection(root: str | os.PathLike, limit: int = CHECK_LIMIT,
                     fractions: Sequence[float] = DEFAULT_SPLIT_FRACTIONS) -> CollectionReport:
    """Check a collection directory in the BEIR layout; every problem is collected, none raised.

    Errors: the layout (``corpus.jsonl[.gz]``, ``queries.jsonl[.gz]``, ``qrels/test.tsv``),
    unreadable files, bytes that are not UTF-8, invalid JSON, records without ``_id`` or
    ``text``, documents whose title and text are both empty, empty queries, duplicate ids,
    malformed qrels rows, non-integer scores, conflicting duplicate judgments, qrels rows whose
    query or document is unknown, a qrels file with no rows or no known query, and too few
    queries with a relevant document for the workflow's split (``fractions``, the config's
    ``split.fractions``) to give every role a query. Queries that no qrels file judges are
    normal in BEIR (a note with their count, not an error).
    """
    root = Path(root)
    report = CollectionReport(root, limit)
    if not root.is_dir():
        report.add("layout", f"{root}: not a directory")
        return report
    corpus_path, queries_path, qrels_paths = _layout(root, report)
    corpus = _scan_jsonl(corpus_path, report, "corpus") if corpus_path else None
    queries = _scan_jsonl(queries_path, report, "queries") if queries_path else None
    names = {"corpus": corpus_path.name if corpus_path else CORPUS,
             "queries": queries_path.name if queries_path else QUERIES}
    if corpus is not None:
        report.counts.append(f"{corpus_path.name}: {len(corpus)} documents")
        if not corpus:
            report.add("no documents", f"{corpus_path}: the corpus has no documents")
    if queries is not None:
        report.counts.append(f"{queries_path.name}: {len(queries)} queries")
    judged: set[str] = set()
    relevant: set[str] = set()
    for split, path in qrels_paths.items():
        stats = _scan_qrels(path, report, queries, corpus, names)
        judged |= stats["qids"]
        relevant |= stats["relevant"]
        values = ", ".join(f"{s}: {n}" for s, n in sorted(stats["scores"].items()))
        report.counts.append(f"qrels/{path.name}: {stats['rows']} judgments of {len(stats['qids'])} "
                             f"queries; scores {{{values}}}")
    if queries is None or not qrels_paths:
        return report
    unjudged = len(set(queries) - judged)
    if unjudged:
        report.notes.append(f"{unjudged} of {len(queries)} queries have no judgment in any qrels file "
                            "(normal in BEIR; they are not used)")
    zero_only = len(judged - relevant)
    if zero_only:
        report.notes.append(f"{zero_only} judged queries have no relevant document (score > 0); "
                            "they are not used")
    roles = split_ids(relevant, 0, fractions)
    sizes = ", ".join(f"{r} {len(ids)}" for r, ids in roles.items())
    report.counts.append(f"queries with a relevant document (score > 0) in any qrels file: "
                         f"{len(relevant)}; the workflow splits them (fractions "
                         f"{list(fractions)}) into {sizes}")
    empty = [r for r, ids in roles.items() if not ids]
    if empty:
        report.add("too few queries", f"{root}: {len(relevant)} queries with a relevant document "
                   f"leave the split role(s) {', '.join(empty)} empty with fractions {list(fractions)} "
                   "(config split.fractions)")
    if corpus is not None:
        shared = sum(1 for q in queries if q in corpus)
        if shared:
            report.notes.append(f"{shared} query ids are also corpus ids: say in the registry entry "
                                "whether they are the same item (queries_in_corpus: true) or not "
                                "(queries_in_corpus: false)")
    return report


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dive_core.data check DIR``: check a BEIR-layout collection before any job."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m dive_core.data",
                                     description="BEIR data tools of the DIVE pipeline.")
    sub = parser.add_subparsers(dest="command", required=True)
    chk = sub.add_parser(
        "check", help="check a collection in the BEIR layout (exit status 1 on errors)",
        description="Check a collection folder in the BEIR layout (corpus.jsonl[.gz], "
                    "queries.jsonl[.gz], qrels/test.tsv, optionally qrels/train.tsv and "
                    "qrels/dev.tsv): every problem is printed with file:line; exit status 1 on "
                    "errors, counts on success.")
    chk.add_argument("dir", help="the collection folder")
    chk.add_argument("--limit", type=int, default=CHECK_LIMIT, metavar="N",
                     help=f"print at most N problems of each kind (default {CHECK_LIMIT})")
    chk.add_argument("--split-fractions", type=float, nargs=3, default=list(DEFAULT_SPLIT_FRACTIONS),
                     metavar=("TRAIN", "VALIDATION", "TEST"),
                     help="the config's split.fractions (default %(default)s)")
    args = parser.parse_args(argv)
    if args.limit < 1:
        parser.error("--limit must be at least 1")
    fr = args.split_fractions
    if any(f < 0 for f in fr) or abs(sum(fr) - 1) > 1e-9:
        parser.error(f"--split-fractions must be three non-negative numbers summing to 1, got {fr}")
    report = check_collection(args.dir, args.limit, fr)
    print("\n".join(report.lines()), flush=True)
    return 0 if report.ok else 1
