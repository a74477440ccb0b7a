"""BEIR data stage: strict loaders, fingerprints, checksum-verified download, staging.

Every dataset here is synthetic and built in ``tmp_path``; the shared SciFact copy is only
read (never copied into the repository), and only by the fingerprint test at the end.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import http.server
import json
import os
import socket
import threading
import zipfile
from pathlib import Path

import pytest
import yaml

from dive_core import data
from dive_core.data import ChecksumError, DataError

REPO = Path(__file__).resolve().parents[1]

CORPUS_ROWS = [
    {"_id": "d1", "title": "Alpha", "text": "first doc"},
    {"_id": "d2", "title": "", "text": "second doc"},
    {"_id": "d3", "title": "Gamma", "text": "third doc"},
    {"_id": "d4", "title": "Delta", "text": "fourth doc"},
    {"_id": "d5", "title": "Eps", "text": "fifth doc"},
]
QUERY_ROWS = [
    {"_id": "q1", "text": "what is alpha"},
    {"_id": "q2", "text": "what is gamma"},
    {"_id": "q3", "text": "nothing relevant"},
]
TEST_QRELS = [("q1", "d1", 1), ("q1", "d2", 0), ("q2", "d3", 2), ("q3", "d4", 0)]
TRAIN_QRELS = [("q3", "d5", 1)]
EXPECTED_TEST = {"q1": {"d1": 1, "d2": 0}, "q2": {"d3": 2}, "q3": {"d4": 0}}


def jsonl(rows) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode("utf-8")


def tsv(rows, header=True, crlf=False) -> bytes:
    nl = "\r\n" if crlf else "\n"
    lines = (["query-id\tcorpus-id\tscore"] if header else []) + [f"{q}\t{d}\t{s}" for q, d, s in rows]
    return (nl.join(lines) + nl).encode("utf-8")


def write(path: Path, content: bytes, gz: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if gz:
        path = path.with_name(path.name + ".gz")
        with gzip.open(path, "wb") as fh:
            fh.write(content)
    else:
        path.write_bytes(content)
    return path


def make_beir(root: Path, *, gz: bool = False, crlf: bool = False, header: bool = True,
              corpus: bytes | None = None, queries: bytes | None = None,
              test_qrels: bytes | None = None, train_qrels: bytes | None = None) -> Path:
    write(root / "corpus.jsonl", jsonl(CORPUS_ROWS) if corpus is None else corpus, gz)
    write(root / "queries.jsonl", jsonl(QUERY_ROWS) if queries is None else queries, gz)
    write(root / "qrels" / "test.tsv",
          tsv(TEST_QRELS, header, crlf) if test_qrels is None else test_qrels)
    write(root / "qrels" / "train.tsv",
          tsv(TRAIN_QRELS, header, crlf) if train_qrels is None else train_qrels)
    return root


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


# --------------------------------------------------------------------------- loaders


def test_plain_and_gz_load_identically_with_same_fingerprint(tmp_path):
    plain = make_beir(tmp_path / "plain")
    gz = make_beir(tmp_path / "gz", gz=True)
    assert (gz / "corpus.jsonl.gz").exists() and not (gz / "corpus.jsonl").exists()
    fp_plain, fp_gz = data.fingerprint(plain), data.fingerprint(gz)
    assert fp_plain == fp_gz
    assert fp_plain == {
        "corpus.jsonl": sha(jsonl(CORPUS_ROWS)),
        "queries.jsonl": sha(jsonl(QUERY_ROWS)),
        "qrels/test.tsv": sha(tsv(TEST_QRELS)),
        "qrels/train.tsv": sha(tsv(TRAIN_QRELS)),
    }
    a, b = data.load_beir(plain), data.load_beir(gz)
    for ds in (a, b):
        assert ds.doc_ids == ["d1", "d2", "d3", "d4", "d5"]
        assert ds.corpus["d2"] == {"title": "", "text": "second doc"}
        assert ds.doc_text("d1") == "Alpha first doc"
        assert ds.doc_text("d2") == "second doc"
        assert ds.queries == {"q1": "what is alpha", "q2": "what is gamma", "q3": "nothing relevant"}
        assert ds.qrels == {"test": EXPECTED_TEST, "train": {"q3": {"d5": 1}}}
        assert ds.relevant() == {"q1": {"d1"}, "q2": {"d3"}, "q3": {"d5"}}
        assert ds.dropped == {}
    assert a.fingerprint == b.fingerprint == fp_plain


@pytest.mark.parametrize("crlf", [False, True], ids=["LF", "CRLF"])
@pytest.mark.parametrize("header", [True, False], ids=["header", "noheader"])
def test_qrels_line_endings_and_header(tmp_path, crlf, header):
    content = tsv(TEST_QRELS, header=header, crlf=crlf)
    assert (b"\r\n" in content) == crlf
    p = write(tmp_path / "test.tsv", content)
    assert data.load_qrels(p) == EXPECTED_TEST
    root = make_beir(tmp_path / "ds", crlf=crlf, header=header)
    assert data.load_beir(root).qrels["test"] == EXPECTED_TEST


def test_qrels_gz_and_space_separated(tmp_path):
    p = write(tmp_path / "test.tsv", tsv(TEST_QRELS, crlf=True), gz=True)
    assert p.name == "test.tsv.gz"
    assert data.load_qrels(p) == EXPECTED_TEST
    p2 = write(tmp_path / "sp.tsv", b"q1 d1 1\nq1 d2 0\n\nq2 d3 2\nq3 d4 0\n")
    assert data.load_qrels(p2) == EXPECTED_TEST


def test_jsonl_crlf_and_bom(tmp_path):
    content = b"\xef\xbb\xbf" + jsonl(QUERY_ROWS).replace(b"\n", b"\r\n")
    p = write(tmp_path / "queries.jsonl", content)
    assert data.load_queries(p) == {"q1": "what is alpha", "q2": "what is gamma",
                                    "q3": "nothing relevant"}


def test_unicode_line_separators_inside_json_strings(tmp_path):
    # JSON allows U+2028, U+0085 and form feeds unescaped inside strings; they are not line breaks
    rows = [{"_id": "d1", "title": "a\u2028b", "text": "x\x85y\x0cz"}, {"_id": "d2", "text": "t"}]
    content = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")
    p = write(tmp_path / "corpus.jsonl", content)
    corpus = data.load_corpus(p)
    assert corpus == {"d1": {"title": "a\u2028b", "text": "x\x85y\x0cz"},
                      "d2": {"title": "", "text": "t"}}
    # line numbers stay physical lines
    bad = content + "{\"_id\": \"d3\", \u2028 oops\n".encode("utf-8")
    with pytest.raises(DataError, match=r"corpus\.jsonl:3: invalid JSON"):
        data.load_corpus(write(tmp_path / "c2" / "corpus.jsonl", bad))


def test_corrupt_jsonl_line_names_file_and_line(tmp_path):
    content = jsonl(CORPUS_ROWS[:2]) + b'{"_id": "d3", "text": "trunc\n' + jsonl(CORPUS_ROWS[3:])
    root = make_beir(tmp_path / "ds", corpus=content)
    with pytest.raises(DataError) as ei:
        data.load_beir(root)
    assert "corpus.jsonl:3:" in str(ei.value)
    assert "invalid JSON" in str(ei.value)


def test_corrupt_line_in_gz_names_file_and_line(tmp_path):
    content = jsonl(QUERY_ROWS[:1]) + b"\n" + b"not json\n"
    root = make_beir(tmp_path / "ds", queries=content, gz=True)
    with pytest.raises(DataError, match=r"queries\.jsonl\.gz:3: invalid JSON"):
        data.load_beir(root)


def test_invalid_utf8_names_file_and_line(tmp_path):
    content = jsonl(CORPUS_ROWS[:3]) + b'{"_id": "d9", "text": "\xff\xfe"}\n'
    p = write(tmp_path / "corpus.jsonl", content)
    with pytest.raises(DataError, match=r"corpus\.jsonl:4: not valid UTF-8"):
        data.load_corpus(p)


def test_non_object_json_line(tmp_path):
    p = write(tmp_path / "corpus.jsonl", jsonl(CORPUS_ROWS[:1]) + b"[1, 2]\n")
    with pytest.raises(DataError, match=r"corpus\.jsonl:2: expected a JSON object, got list"):
        data.load_corpus(p)


def test_missing_id_names_line(tmp_path):
    content = jsonl(CORPUS_ROWS[:3] + [{"title": "no id", "text": "x"}])
    p = write(tmp_path / "corpus.jsonl", content)
    with pytest.raises(DataError, match=r"corpus\.jsonl:4: missing key '_id'"):
        data.load_corpus(p)
    q = write(tmp_path / "queries.jsonl", jsonl([{"_id": "q1", "text": "a"}, {"_id": "q2"}]))
    with pytest.raises(DataError, match=r"queries\.jsonl:2: missing key 'text'"):
        data.load_queries(q)
    e = write(tmp_path / "e" / "corpus.jsonl", jsonl([{"_id": "d1", "text": "a"}, {"_id": "", "text": "b"}]))
    with pytest.raises(DataError, match=r"corpus\.jsonl:2: empty _id"):
        data.load_corpus(e)


def test_duplicate_ids_name_lines(tmp_path):
    content = jsonl(CORPUS_ROWS[:2] + [{"_id": "d4", "text": "x"}, {"_id": "d1", "text": "dup"}])
    with pytest.raises(DataError, match=r"corpus\.jsonl:4: duplicate _id 'd1' \(first on line 1\)"):
        data.load_corpus(write(tmp_path / "corpus.jsonl", content))
    qcontent = jsonl(QUERY_ROWS + [{"_id": "q2", "text": "again"}])
    with pytest.raises(DataError, match=r"queries\.jsonl:4: duplicate query _id 'q2'"):
        data.load_queries(write(tmp_path / "queries.jsonl", qcontent))


def test_conflicting_duplicate_qrels_row(tmp_path):
    p = write(tmp_path / "test.tsv", tsv([("q1", "d1", 1), ("q1", "d2", 0), ("q1", "d1", 2)]))
    with pytest.raises(DataError, match=r"test\.tsv:4: \(q1, d1\) has score 2 but line 2 gave 1"):
        data.load_qrels(p)


def test_empty_corpus_is_an_error(tmp_path):
    with pytest.raises(DataError, match="corpus is empty"):
        data.load_corpus(write(tmp_path / "corpus.jsonl", b"\n\n"))


def test_non_integer_score_names_file_and_line(tmp_path):
    bad = tsv([("q1", "d1", 1), ("q1", "d2", "1.5"), ("q2", "d3", 2)])
    with pytest.raises(DataError, match=r"test\.tsv:3: score '1\.5' is not an integer"):
        data.load_qrels(write(tmp_path / "test.tsv", bad))
    # the first line is only a header when it looks like one: a bad first data row is an error
    bad_first = tsv([("q1", "d1", "x1"), ("q2", "d3", 2)], header=False, crlf=True)
    with pytest.raises(DataError, match=r"test\.tsv:1: score 'x1' is not an integer"):
        data.load_qrels(write(tmp_path / "first" / "test.tsv", bad_first))
    # a second header-like line is not silently skipped either
    twice = tsv(TEST_QRELS) + b"query-id\tcorpus-id\tscore\n"
    with pytest.raises(DataError, match=r"test\.tsv:6: score 'score' is not an integer"):
        data.load_qrels(write(tmp_path / "twice" / "test.tsv", twice))


def test_wrong_column_count_names_line(tmp_path):
    p = write(tmp_path / "test.tsv", tsv(TEST_QRELS) + b"q1\t0\td9\t1\n")
    with pytest.raises(DataError, match=r"test\.tsv:6: expected 3 columns .* got 4"):
        data.load_qrels(p)


def test_unknown_query_id_in_qrels(tmp_path):
    root = make_beir(tmp_path / "ds", test_qrels=tsv(TEST_QRELS + [("q9", "d1", 1), ("q9", "d2", 1)]))
    with pytest.raises(DataError) as ei:
        data.load_beir(root)
    msg = str(ei.value)
    assert "test.tsv" in msg and "'q9'" in msg and "queries.jsonl" in msg
    ds = data.load_beir(root, on_missing="drop")
    assert ds.dropped == {"qrels/test.tsv": 2}
    assert ds.qrels["test"] == EXPECTED_TEST


def test_unknown_corpus_id_in_qrels(tmp_path):
    root = make_beir(tmp_path / "ds", train_qrels=tsv(TRAIN_QRELS + [("q1", "d77", 1)]))
    with pytest.raises(DataError) as ei:
        data.load_beir(root)
    msg = str(ei.value)
    assert "train.tsv" in msg and "'d77'" in msg and "corpus.jsonl" in msg
    ds = data.load_beir(root, on_missing="drop")
    assert ds.dropped == {"qrels/train.tsv": 1}
    assert ds.qrels["train"] == {"q3": {"d5": 1}}
    with pytest.raises(ValueError, match="on_missing"):
        data.load_beir(root, on_missing="ignore")


def test_layout_errors(tmp_path):
    root = make_beir(tmp_path / "ds")
    write(root / "corpus.jsonl", jsonl(CORPUS_ROWS), gz=True)
    with pytest.raises(DataError, match="both corpus.jsonl and corpus.jsonl.gz"):
        data.dataset_files(root)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match="neither corpus.jsonl nor corpus.jsonl.gz"):
        data.dataset_files(empty)
    noq = make_beir(tmp_path / "noq")
    for f in (noq / "qrels").iterdir():
        f.unlink()
    with pytest.raises(DataError, match=r"no qrels/\*\.tsv"):
        data.dataset_files(noq)
    with pytest.raises(DataError, match="not found"):
        data.dataset_files(tmp_path / "absent")


# --------------------------------------------------------------------------- download


class _Handler(http.server.SimpleHTTPRequestHandler):
    requests: list[str] = []

    def log_message(self, *args):  # keep pytest output quiet
        pass

    def do_GET(self):
        type(self).requests.append(self.path)
        super().do_GET()


@pytest.fixture
def server(tmp_path):
    root = tmp_path / "srv"
    root.mkdir()
    handler = type("H", (_Handler,), {"requests": []})
    httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(handler, directory=str(root)))
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    try:
        yield root, f"http://127.0.0.1:{httpd.server_address[1]}", handler.requests
    finally:
        httpd.shutdown()
        httpd.server_close()
        t.join(5)


PAYLOAD = os.urandom(3000) + b"BEIR"


def test_download_right_sha_keeps_file(server, tmp_path):
    root, url, requests = server
    (root / "toy.zip").write_bytes(PAYLOAD)
    out = tmp_path / "zips"
    got = data.download_zip(f"{url}/toy.zip", out / "toy.zip", sha(PAYLOAD).upper(), progress=False)
    assert got == sha(PAYLOAD)
    assert (out / "toy.zip").read_bytes() == PAYLOAD
    assert sorted(p.name for p in out.iterdir()) == ["toy.zip"]
    assert requests == ["/toy.zip"]


def test_download_wrong_sha_keeps_nothing(server, tmp_path):
    root, url, _ = server
    (root / "toy.zip").write_bytes(PAYLOAD)
    out = tmp_path / "zips"
    with pytest.raises(ChecksumError) as ei:
        data.download_zip(f"{url}/toy.zip", out / "toy.zip", "0" * 64, progress=False)
    assert sha(PAYLOAD) in str(ei.value)
    assert not (out / "toy.zip").exists()
    assert list(out.iterdir()) == []  # no leftover .part temp file


def test_download_wrong_sha_leaves_previous_file_intact(server, tmp_path):
    root, url, _ = server
    (root / "toy.zip").write_bytes(PAYLOAD)
    dest = tmp_path / "zips" / "toy.zip"
    dest.parent.mkdir()
    dest.write_bytes(b"previous good")
    with pytest.raises(ChecksumError):
        data.download_zip(f"{url}/toy.zip", dest, "f" * 64, progress=False)
    assert dest.read_bytes() == b"previous good"
    assert [p.name for p in dest.parent.iterdir()] == ["toy.zip"]


@pytest.mark.parametrize("known", [None, ""])
def test_download_without_sha_refused_before_request(server, tmp_path, known):
    root, url, requests = server
    (root / "toy.zip").write_bytes(PAYLOAD)
    dest = tmp_path / "zips" / "toy.zip"
    with pytest.raises(ChecksumError, match="no known sha256"):
        data.download_zip(f"{url}/toy.zip", dest, known, progress=False)
    assert requests == []
    assert not dest.exists()
    assert not dest.parent.exists() or list(dest.parent.iterdir()) == []


def test_download_unreachable_mentions_beir_data_dir(tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens on this port now
    dest = tmp_path / "zips" / "toy.zip"
    with pytest.raises(DataError) as ei:
        data.download_zip(f"http://127.0.0.1:{port}/toy.zip", dest, "a" * 64, timeout=5, progress=False)
    assert not isinstance(ei.value, ChecksumError)
    assert "BEIR_DATA_DIR" in str(ei.value)
    assert not dest.exists() and list(dest.parent.iterdir()) == []


def test_download_http_404_is_data_error(server, tmp_path):
    _, url, requests = server
    dest = tmp_path / "zips" / "missing.zip"
    with pytest.raises(DataError, match="BEIR_DATA_DIR") as ei:
        data.download_zip(f"{url}/missing.zip", dest, "a" * 64, progress=False)
    assert "404" in str(ei.value)
    assert requests == ["/missing.zip"]
    assert list(dest.parent.iterdir()) == []


# --------------------------------------------------------------------------- staging


def make_zip(path: Path, src: Path, name: str) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{name}/", "")
        for f in sorted(src.rglob("*")):
            if f.is_file():
                zf.write(f, f"{name}/{f.relative_to(src).as_posix()}")
        zf.writestr("other/corpus.jsonl", "not this one")
    return path


def official_fp():
    return {
        "corpus.jsonl": sha(jsonl(CORPUS_ROWS)),
        "queries.jsonl": sha(jsonl(QUERY_ROWS)),
        "qrels/test.tsv": sha(tsv(TEST_QRELS, crlf=True)),
        "qrels/train.tsv": sha(tsv(TRAIN_QRELS, crlf=True)),
    }


def test_stage_from_zip(tmp_path):
    src = make_beir(tmp_path / "src", crlf=True)
    z = make_zip(tmp_path / "toy.zip", src, "toy")
    entry = {"subdir": "toy", "url": "http://example/toy.zip", "zip_sha256": data.sha256_file(z),
             "files": official_fp()}
    dest = tmp_path / "data" / "beir" / "toy"
    m = data.stage_dataset("toy", entry, dest, zip_path=z)
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()) == [
        "corpus.jsonl", "qrels/test.tsv", "qrels/train.tsv", "queries.jsonl", "source.json"]
    on_disk = json.loads((dest / "source.json").read_text())
    assert on_disk == m
    assert m["fingerprint"] == official_fp()
    assert m["source"] == {"kind": "download", "url": "http://example/toy.zip",
                           "zip_sha256": data.sha256_file(z)}
    assert m["counts"] == {"corpus": 5, "queries": 3, "qrels": {"test": 4, "train": 1}}
    ds = data.load_staged(dest)
    assert ds.qrels["test"] == EXPECTED_TEST


@pytest.mark.parametrize("mode", ["link", "copy"])
def test_stage_from_local_dir(tmp_path, mode):
    beir = tmp_path / "beir"
    src = make_beir(beir / "toy", gz=True, crlf=True)
    dest = tmp_path / "data" / "toy"
    entry = {"subdir": "toy", "files": official_fp()}
    m = data.stage_dataset("toy", entry, dest, local_dir=beir, mode=mode)
    assert m["fingerprint"] == official_fp()
    assert m["source"] == {"kind": "local", "path": str(src.resolve()), "mode": mode}
    staged = dest / "corpus.jsonl.gz"
    assert staged.is_symlink() == (mode == "link")
    if mode == "link":
        assert staged.resolve() == (src / "corpus.jsonl.gz").resolve()
    assert staged.read_bytes() == (src / "corpus.jsonl.gz").read_bytes()
    assert json.loads((dest / "source.json").read_text())["fingerprint"] == official_fp()
    assert data.load_staged(dest).doc_ids == ["d1", "d2", "d3", "d4", "d5"]


def test_stage_restage_switches_plain_to_gz(tmp_path):
    beir = tmp_path / "beir"
    make_beir(beir / "plain")
    make_beir(beir / "gz", gz=True)
    dest = tmp_path / "data" / "toy"
    data.stage_dataset("toy", {"subdir": "plain"}, dest, local_dir=beir, mode="copy")
    assert (dest / "corpus.jsonl").exists()
    # re-staged from a gzipped copy: no stale plain file may survive (it would be ambiguous)
    m = data.stage_dataset("toy", {"subdir": "gz"}, dest, local_dir=beir, mode="copy")
    assert sorted(p.name for p in dest.iterdir()) == ["corpus.jsonl.gz", "qrels", "queries.jsonl.gz",
                                                      "source.json"]
    assert m["fingerprint"]["corpus.jsonl"] == sha(jsonl(CORPUS_ROWS))


def test_stage_registry_hash_mismatch(tmp_path):
    beir = tmp_path / "beir"
    make_beir(beir / "toy")
    dest = tmp_path / "data" / "toy"
    good = {"corpus.jsonl": sha(jsonl(CORPUS_ROWS))}
    data.stage_dataset("toy", {"subdir": "toy", "files": good}, dest, local_dir=beir)
    assert (dest / "source.json").exists()
    bad = {"corpus.jsonl": sha(b"something else")}
    with pytest.raises(ChecksumError) as ei:
        data.stage_dataset("toy", {"subdir": "toy", "files": bad}, dest, local_dir=beir)
    assert "corpus.jsonl" in str(ei.value) and sha(b"something else") in str(ei.value)
    # the failed re-staging must not leave the old manifest vouching for the files
    assert not (dest / "source.json").exists()
    with pytest.raises(DataError, match="not staged"):
        data.load_staged(dest)
    missing = {"qrels/dev.tsv": sha(b"x")}
    with pytest.raises(DataError, match="expected file qrels/dev.tsv is missing"):
        data.stage_dataset("toy", {"subdir": "toy", "files": missing}, dest, local_dir=beir)


def test_stage_missing_local_dataset(tmp_path):
    (tmp_path / "beir").mkdir()
    with pytest.raises(DataError, match="'toy' not found in the local BEIR directory"):
        data.stage_dataset("toy", {"subdir": "toy"}, tmp_path / "dest", local_dir=tmp_path / "beir")
    with pytest.raises(ValueError, match="exactly one"):
        data.stage_dataset("toy", {"subdir": "toy"}, tmp_path / "dest")


def test_stage_bad_data_fails_at_staging(tmp_path):
    beir = tmp_path / "beir"
    make_beir(beir / "toy", test_qrels=tsv(TEST_QRELS + [("q1", "nope", 1)]))
    with pytest.raises(DataError, match="'nope'"):
        data.stage_dataset("toy", {"subdir": "toy"}, tmp_path / "dest", local_dir=beir)
    assert not (tmp_path / "dest" / "source.json").exists()
    m = data.stage_dataset("toy", {"subdir": "toy"}, tmp_path / "dest", local_dir=beir,
                           on_missing="drop")
    assert m["dropped_qrels_rows"] == {"qrels/test.tsv": 1}
    assert data.load_staged(tmp_path / "dest").dropped == {"qrels/test.tsv": 1}


def test_load_staged_detects_change_after_staging(tmp_path):
    beir = tmp_path / "beir"
    src = make_beir(beir / "toy")
    copy, link = tmp_path / "copy", tmp_path / "link"
    data.stage_dataset("toy", {"subdir": "toy"}, copy, local_dir=beir, mode="copy")
    data.stage_dataset("toy", {"subdir": "toy"}, link, local_dir=beir, mode="link")
    assert data.load_staged(copy).qrels["test"] == EXPECTED_TEST
    # a copied file edited in place
    (copy / "qrels" / "test.tsv").write_bytes(tsv(TEST_QRELS[:-1]))
    with pytest.raises(DataError, match=r"test\.tsv: content changed since it was staged"):
        data.load_staged(copy)
    # the source behind a link edited
    (src / "queries.jsonl").write_bytes(jsonl(QUERY_ROWS + [{"_id": "q4", "text": "new"}]))
    with pytest.raises(DataError, match=r"queries\.jsonl: content changed since it was staged"):
        data.load_staged(link)
    # an extra qrels file appearing after staging
    data.stage_dataset("toy", {"subdir": "toy"}, link, local_dir=beir, mode="link")
    write(link / "qrels" / "dev.tsv", tsv([("q1", "d1", 1)]))
    with pytest.raises(DataError, match=r"not in the staging manifest: \['qrels/dev.tsv'\]"):
        data.load_staged(link)


# --------------------------------------------------------------------------- shared SciFact


def test_shared_scifact_fingerprint_matches_official(shared_scifact):
    root = shared_scifact
    registry = yaml.safe_load((REPO / "config" / "datasets.yaml").read_text())
    known = registry["scifact"]["files"]
    assert set(known) == {"corpus.jsonl", "queries.jsonl", "qrels/train.tsv", "qrels/test.tsv"}
    fp = data.fingerprint(root)
    assert fp == known
    assert fp["corpus.jsonl"] == "dec31c8182f3d744c7d2c09423756fd1d17cbef75808db13ba01cc0aab4d1ac6"
    data.check_known_hashes(fp, known, str(root))  # does not raise


def test_scifact_tiny_is_derived_byte_for_byte_from_the_official_scifact(shared_scifact, tmp_path):
    """`python -m dive_core.data.derive BEIR_DIR` writes scifact-tiny, which the SLURM tests run on,
    from the official SciFact alone: the bytes pinned in the registry (which staging checks) and in
    derive.SHA256, equal to the copy shipped beside SciFact where there is one. A second call keeps
    it; a copy with other bytes, or a SciFact missing a judged document, is refused by name."""
    from dive_core.data import derive

    registry = yaml.safe_load((REPO / "config" / "datasets.yaml").read_text())
    assert registry["scifact-tiny"]["files"] == derive.SHA256
    assert registry["scifact-tiny"]["subdir"] == derive.SUBDIR
    beir = tmp_path / "beir"
    beir.mkdir()
    (beir / "scifact").symlink_to(shared_scifact)
    dest = derive.write_beir_dir(beir)
    assert dest == beir / derive.SUBDIR and data.fingerprint(dest) == derive.SHA256
    qrels = (dest / "qrels" / "test.tsv").read_bytes()
    assert qrels.startswith(b"query-id\tcorpus-id\tscore\r\n") and qrels.count(b"\r\n") == 61
    assert len(data.load_beir(dest).corpus) == 500 and len(data.load_beir(dest).queries) == 50
    shipped = shared_scifact.parent / derive.SUBDIR
    if shipped.is_dir():
        assert data.fingerprint(shipped) == derive.SHA256
    assert derive.write_beir_dir(beir) == dest  # kept
    data.stage_dataset("scifact-tiny", registry["scifact-tiny"], tmp_path / "staged", local_dir=beir, mode="link")

    (dest / "queries.jsonl").write_bytes(b"")
    with pytest.raises(DataError, match=r"queries.jsonl: exists with other bytes"):
        derive.write_beir_dir(beir)
    broken = tmp_path / "broken"
    (broken / "scifact" / "qrels").mkdir(parents=True)
    lines = gzip.decompress((shared_scifact / "corpus.jsonl.gz").read_bytes()).splitlines(keepends=True)
    judged = b'{"_id": "31715818", '  # relevant to test query 1 (qrels/test.tsv's first row)
    assert sum(line.startswith(judged) for line in lines) == 1
    (broken / "scifact" / "corpus.jsonl").write_bytes(b"".join(x for x in lines if not x.startswith(judged)))
    for name in ("queries.jsonl", "qrels/test.tsv"):
        (broken / "scifact" / name).symlink_to(shared_scifact / name)
    with pytest.raises(DataError, match=r"broken/scifact: not the official SciFact \(judged documents"):
        derive.write_beir_dir(broken)
    assert not (broken / derive.SUBDIR).exists()
