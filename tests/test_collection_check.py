"""``python -m dive_core.data check DIR``: the collection checker a user runs on their own data.

Every collection is built in ``tmp_path``: a good one, and broken copies with one problem each,
whose report must name the problem's kind and its file:line, and exit with status 1.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dive_core import data

REPO = Path(__file__).resolve().parents[1]

# d8-d12 and q8-q10 are in no qrels row: breaking their lines loses no judged id (one problem each)
DOCS = [{"_id": f"d{i}", "title": f"Title {i}", "text": f"text of document {i}"} for i in range(1, 13)]
QUERIES = [{"_id": f"q{i}", "text": f"query number {i}"} for i in range(1, 11)]
TEST = [("q1", "d1", 1), ("q2", "d2", 2), ("q3", "d3", 1), ("q4", "d4", 1), ("q4", "d5", 0), ("q5", "d5", 1)]
TRAIN = [("q6", "d6", 1), ("q7", "d7", 1), ("q7", "d6", 0)]


def jsonl(rows) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def tsv(rows, header: bool = True) -> str:
    return "".join(["query-id\tcorpus-id\tscore\n"] if header else []) + "".join(
        f"{q}\t{d}\t{s}\n" for q, d, s in rows)


def put(path: Path, content: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = content.encode("utf-8") if isinstance(content, str) else content
    if path.suffix == ".gz":
        with gzip.open(path, "wb") as fh:
            fh.write(raw)
    else:
        path.write_bytes(raw)


def make(root: Path, corpus=None, queries=None, test=None, train=None, gz: bool = False) -> Path:
    put(root / ("corpus.jsonl.gz" if gz else "corpus.jsonl"), jsonl(DOCS) if corpus is None else corpus)
    put(root / "queries.jsonl", jsonl(QUERIES) if queries is None else queries)
    put(root / "qrels" / "test.tsv", tsv(TEST) if test is None else test)
    put(root / "qrels" / "train.tsv", tsv(TRAIN) if train is None else train)
    return root


def run(root: Path, *args: str, capsys) -> tuple[int, str]:
    rc = data.main(["check", str(root), *args])
    return rc, capsys.readouterr().out


def with_line(rows: list[str], lineno: int, line: str, replace: bool = True) -> str:
    """``rows`` (lines without newline) with line ``lineno`` (1-based) replaced or inserted."""
    rows = list(rows)
    rows[lineno - 1:lineno if replace else lineno - 1] = [line]
    return "".join(r + "\n" for r in rows)


DOC_LINES = [json.dumps(r) for r in DOCS]
QUERY_LINES = [json.dumps(r) for r in QUERIES]
TEST_LINES = tsv(TEST).splitlines()
TRAIN_LINES = tsv(TRAIN).splitlines()


# --------------------------------------------------------------------------- a good collection


@pytest.mark.parametrize("gz", [False, True])
def test_good_collection_passes_with_counts(tmp_path, capsys, gz):
    root = make(tmp_path / "c", gz=gz)
    rc, out = run(root, capsys=capsys)
    assert rc == 0, out
    corpus = "corpus.jsonl.gz" if gz else "corpus.jsonl"
    assert out.splitlines() == [
        f"checking {root}",
        f"{corpus}: 12 documents",
        "queries.jsonl: 10 queries",
        "qrels/train.tsv: 3 judgments of 2 queries; scores {0: 1, 1: 2}",
        "qrels/test.tsv: 6 judgments of 5 queries; scores {0: 1, 1: 4, 2: 1}",
        "queries with a relevant document (score > 0) in any qrels file: 7; the workflow splits them "
        "(fractions [0.6, 0.2, 0.2]) into train 4, validation 1, test 2",
        "note: 3 of 10 queries have no judgment in any qrels file (normal in BEIR; they are not used)",
        "OK",
    ]
    report = data.check_collection(root)
    assert report.ok and report.n_errors == 0 and report.problems == {}


def test_loader_rules_crlf_bom_header_spaces_blank_lines(tmp_path, capsys):
    """What the strict loaders accept, the checker accepts: CRLF, a BOM, blank lines, the
    optional header, space-separated qrels, an only-title document, a number as _id."""
    docs = DOC_LINES[:-1] + ['{"_id": 12, "text": "", "title": "only a title"}']
    corpus = "\ufeff" + "\r\n".join(docs) + "\r\n\r\n"
    test = "\r\n".join(["q1 d1 1", "q2 d2 2", "q3 d3 1", "q4 d4 1", "q5 12 1"]) + "\r\n"
    root = make(tmp_path / "c", corpus=corpus, test=test, train=tsv(TRAIN, header=False))
    rc, out = run(root, capsys=capsys)
    assert rc == 0, out
    assert "corpus.jsonl: 12 documents" in out
    ds = data.load_beir(root)  # the loaders agree
    assert len(ds.corpus) == 12 and ds.corpus["12"]["title"] == "only a title"


def test_generated_collection_passes(generated_beir, capsys):
    rc, out = run(generated_beir / "_generated" / "generated-tiny", capsys=capsys)
    assert rc == 0, out
    assert "corpus.jsonl: 500 documents" in out and "queries.jsonl: 56 queries" in out
    assert "note: 6 of 56 queries have no judgment" in out


# --------------------------------------------------------------------------- one problem each
# (kind, where: file:line or file, what the message says, how to break the good collection)

CASES = {
    "invalid json corpus": ("invalid JSON", "corpus.jsonl:9", "invalid JSON: Expecting",
                            dict(corpus=with_line(DOC_LINES, 9, '{"_id": "d9", "text": "x"'))),
    "invalid json queries": ("invalid JSON", "queries.jsonl:8", "invalid JSON",
                             dict(queries=with_line(QUERY_LINES, 8, "q8 plain text"))),
    "not an object": ("invalid JSON", "corpus.jsonl:10", "expected a JSON object, got list",
                      dict(corpus=with_line(DOC_LINES, 10, '["d10", "text"]'))),
    "missing _id": ("missing _id", "corpus.jsonl:11", "missing key '_id'",
                    dict(corpus=with_line(DOC_LINES, 11, '{"title": "t", "text": "x"}'))),
    "empty _id": ("missing _id", "queries.jsonl:9", "_id \" \" is not a non-empty string",
                  dict(queries=with_line(QUERY_LINES, 9, '{"_id": " ", "text": "x"}'))),
    "missing text corpus": ("missing text", "corpus.jsonl:6", "missing key 'text'",
                            dict(corpus=with_line(DOC_LINES, 6, '{"_id": "d6", "title": "t"}'))),
    "missing text queries": ("missing text", "queries.jsonl:10", "missing key 'text'",
                             dict(queries=with_line(QUERY_LINES, 10, '{"_id": "q10", "query": "x"}'))),
    "not a string": ("not a string", "corpus.jsonl:1", "'text' is a list",
                     dict(corpus=with_line(DOC_LINES, 1, '{"_id": "d1", "title": "t", "text": ["x"]}'))),
    "empty document": ("empty document", "corpus.jsonl:8", "title and text are both empty",
                       dict(corpus=with_line(DOC_LINES, 8, '{"_id": "d8", "title": " ", "text": ""}'))),
    "empty query": ("empty query", "queries.jsonl:3", "text is empty",
                    dict(queries=with_line(QUERY_LINES, 3, '{"_id": "q3", "text": ""}'))),
    "duplicate doc": ("duplicate _id", "corpus.jsonl:13", "duplicate _id 'd2' (first on line 2)",
                      dict(corpus=with_line(DOC_LINES + [""], 13, json.dumps(DOCS[1])))),
    "duplicate query": ("duplicate _id", "queries.jsonl:11", "duplicate _id 'q1' (first on line 1)",
                        dict(queries=with_line(QUERY_LINES + [""], 11, json.dumps(QUERIES[0])))),
    "unknown query": ("unknown query-id", "qrels/test.tsv:3", "query-id 'q99' is not in queries.jsonl",
                      dict(test=with_line(TEST_LINES, 3, "q99\td2\t1"))),
    "unknown doc": ("unknown corpus-id", "qrels/train.tsv:2", "corpus-id 'd99' is not in corpus.jsonl",
                    dict(train=with_line(TRAIN_LINES, 2, "q6\td99\t1"))),
    "non-integer score": ("non-integer score", "qrels/test.tsv:4", "score '1.5' is not an integer",
                          dict(test=with_line(TEST_LINES, 4, "q3\td3\t1.5"))),
    "header not first": ("non-integer score", "qrels/test.tsv:2", "score 'score' is not an integer",
                         dict(test=with_line(TEST_LINES, 2, "query-id\tcorpus-id\tscore", replace=False))),
    "wrong columns": ("malformed qrels row", "qrels/test.tsv:5", "expected 3 columns",
                      dict(test=with_line(TEST_LINES, 5, "q4\td4\t1\textra"))),
    "conflicting judgment": ("conflicting judgment", "qrels/test.tsv:8", "(q1, d1) has score 0 but line 2 gave 1",
                             dict(test=with_line(TEST_LINES + [""], 8, "q1\td1\t0"))),
    "not utf-8 corpus": ("not UTF-8", "corpus.jsonl:12", "not valid UTF-8 (invalid continuation byte at byte 28 of the line)",
                         dict(corpus=with_line(DOC_LINES, 12, '{"_id": "d12", "text": "caf\udce9"}'
                                               ).encode("utf-8", "surrogateescape"))),
    "not utf-8 qrels": ("not UTF-8", "qrels/train.tsv:3", "not valid UTF-8",
                        dict(train=with_line(TRAIN_LINES, 3, "q7\td7\udcff\t1").encode("utf-8", "surrogateescape"))),
    "no judgments": ("no judgments", "qrels/train.tsv", "no judgment rows", dict(train="query-id\tcorpus-id\tscore\n")),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_problem_is_reported_with_file_and_line(tmp_path, capsys, case):
    kind, where, says, breaks = CASES[case]
    root = make(tmp_path / "c", **breaks)
    rc, out = run(root, capsys=capsys)
    assert rc == 1, out
    report = data.check_collection(root)
    errors = {k: g.count for k, g in report.problems.items()}
    assert errors == {kind: 1}, out  # exactly this problem, once
    assert f"ERROR: {kind} (1):" in out
    line = next(ln for ln in out.splitlines() if ln.startswith(f"  {root / where}"))
    assert line.startswith(f"  {root / where}:") and says in line, out
    assert out.splitlines()[-1].startswith("FAILED: 1 error(s) of 1 kind(s)")


def test_not_utf8_inside_gzip_names_line(tmp_path, capsys):
    prefix = '{"_id": "d11", "text": "'
    corpus = with_line(DOC_LINES, 11, prefix + '\udcc3("}').encode("utf-8", "surrogateescape")
    root = make(tmp_path / "c", corpus=corpus, gz=True)
    rc, out = run(root, capsys=capsys)
    assert rc == 1
    assert (f"ERROR: not UTF-8 (1):\n  {root / 'corpus.jsonl.gz'}:11: not valid UTF-8 (invalid continuation "
            f"byte at byte {len(prefix) + 1} of the line)") in out


def test_corrupt_gzip_is_reported_not_raised(tmp_path, capsys):
    root = make(tmp_path / "c", gz=True)
    gz = root / "corpus.jsonl.gz"
    gz.write_bytes(gz.read_bytes()[:-12])  # truncated stream
    rc, out = run(root, capsys=capsys)
    assert rc == 1
    assert "ERROR: unreadable file (1):" in out
    assert f"  {gz}:" in out and "cannot read past this point" in out


def test_qrels_file_of_another_collection(tmp_path, capsys):
    """No query of a qrels file is known: each row is reported, and the file as a whole."""
    root = make(tmp_path / "c", train=tsv([("x1", "d1", 1), ("x2", "d2", 1)]))
    rc, out = run(root, capsys=capsys)
    assert rc == 1
    assert "ERROR: unknown query-id (2):" in out
    assert f"  {root / 'qrels/train.tsv'}:2: query-id 'x1' is not in queries.jsonl" in out
    assert f"  {root / 'qrels/train.tsv'}:3: query-id 'x2' is not in queries.jsonl" in out
    assert f"ERROR: no known query (1):\n  {root / 'qrels/train.tsv'}: none of its query ids" in out


@pytest.mark.parametrize("layout, says", [
    ("no queries", "neither queries.jsonl nor queries.jsonl.gz found"),
    ("both corpora", "both corpus.jsonl and corpus.jsonl.gz exist; keep one"),
    ("no test", "no test.tsv"),
    ("no qrels", "no qrels/*.tsv files found"),
    ("both qrels", "both test.tsv and test.tsv.gz exist; keep one"),
])
def test_layout_problems(tmp_path, capsys, layout, says):
    root = make(tmp_path / "c")
    if layout == "no queries":
        (root / "queries.jsonl").unlink()
    elif layout == "both corpora":
        put(root / "corpus.jsonl.gz", jsonl(DOCS))
    elif layout == "both qrels":
        put(root / "qrels" / "test.tsv.gz", tsv(TEST))
    elif layout == "no test":
        (root / "qrels" / "train.tsv").rename(root / "qrels" / "dev.tsv")
        (root / "qrels" / "test.tsv").unlink()
    else:
        assert layout == "no qrels"
        for f in (root / "qrels").iterdir():
            f.unlink()
    rc, out = run(root, capsys=capsys)
    assert rc == 1
    assert "ERROR: layout (1):" in out and says in out, out


def test_missing_directory(tmp_path, capsys):
    rc, out = run(tmp_path / "nowhere", capsys=capsys)
    assert rc == 1 and f"{tmp_path / 'nowhere'}: not a directory" in out


def test_too_few_queries_for_the_split(tmp_path, capsys):
    root = make(tmp_path / "c", test=tsv(TEST[:2]), train=tsv([("q3", "d3", 0)]))
    rc, out = run(root, capsys=capsys)
    assert rc == 1
    assert ("ERROR: too few queries (1):\n  " f"{root}: 2 queries with a relevant document leave the split "
            "role(s) validation empty with fractions [0.6, 0.2, 0.2] (config split.fractions)") in out
    # the config's fractions decide which role stays empty
    rc, out = run(root, "--split-fractions", "0.5", "0.5", "0", capsys=capsys)
    assert rc == 1 and "leave the split role(s) test empty with fractions [0.5, 0.5, 0.0]" in out


def test_queries_in_corpus_note(tmp_path, capsys):
    queries = jsonl(QUERIES + [{"_id": "d1", "text": "a document as a query"}])
    rc, out = run(make(tmp_path / "c", queries=queries), capsys=capsys)
    assert rc == 0
    assert "note: 1 query ids are also corpus ids" in out and "queries_in_corpus" in out


# --------------------------------------------------------------------------- many problems


def test_all_problems_are_collected_and_capped_per_kind(tmp_path, capsys):
    bad = [f'{{"_id": "x{i}", "text": ' for i in range(30)]  # 30 invalid JSON lines
    corpus = jsonl(DOCS) + "".join(b + "\n" for b in bad)
    test = tsv(TEST) + "".join(f"q1\td{i}\t1\n" for i in range(100, 125))  # 25 unknown docs
    root = make(tmp_path / "c", corpus=corpus, test=test)
    rc, out = run(root, capsys=capsys)
    assert rc == 1
    lines = out.splitlines()
    i = lines.index("ERROR: invalid JSON (30):")
    assert lines[i + 1] == f"  {root / 'corpus.jsonl'}:13: invalid JSON: Expecting value (column 23)"
    assert lines[i + 20].startswith(f"  {root / 'corpus.jsonl'}:32:")
    assert lines[i + 21] == "  ... and 10 more"
    assert "ERROR: unknown corpus-id (25):" in lines
    assert "FAILED: 55 error(s) of 2 kind(s)" == lines[-1]
    rc, out = run(root, "--limit", "3", capsys=capsys)
    lines = out.splitlines()
    i = lines.index("ERROR: invalid JSON (30):")
    assert lines[i + 4] == "  ... and 27 more"


def test_streams_the_files(tmp_path, capsys, monkeypatch):
    """The checker never reads a whole file (the loaders' read_decompressed / read_bytes)."""
    root = make(tmp_path / "c", gz=True)

    def refuse(*a, **k):
        raise AssertionError("read a whole file")

    from dive_core.data import check, load

    for module in (data, load, check):  # wherever the checker could reach it from
        monkeypatch.setattr(module, "read_decompressed", refuse, raising=False)
    monkeypatch.setattr(Path, "read_bytes", refuse)
    monkeypatch.setattr(Path, "read_text", refuse)
    rc, out = run(root, capsys=capsys)
    assert rc == 0, out


# --------------------------------------------------------------------------- the command line


def test_command_line(tmp_path):
    good = make(tmp_path / "good")
    bad = make(tmp_path / "bad", test=with_line(TEST_LINES, 3, "q2\td2\ttwo"))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "dive_core.data", "check"]
    ok = subprocess.run(cmd + [str(good)], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.splitlines()[-1] == "OK" and ok.stderr == ""
    fail = subprocess.run(cmd + [str(bad)], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert fail.returncode == 1
    assert f"{bad / 'qrels' / 'test.tsv'}:3: score 'two' is not an integer" in fail.stdout
    usage = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert usage.returncode == 2 and "usage: python -m dive_core.data" in usage.stderr
