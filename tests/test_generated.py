"""The generated BEIR-layout collection (tests/generated.py) the end-to-end tests run on:
byte-for-byte reproducible (pinned sha256, the same in a fresh interpreter with another hash
seed), in the official layout, registered, and retrievable."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

from dive_core import generated
from dive_core import config as dcfg
from dive_core.data import load_beir

REPO = Path(__file__).resolve().parent.parent

PINNED = {  # also in config/datasets.yaml (generated-tiny: files), which staging checks
    "corpus.jsonl": "9182b2c1ea4cd0c734e88ad2e4ec59961389ddb23a7ee1abc3ed05caca5c06ba",
    "queries.jsonl": "bde4d889e164b5a1d775552dd5d3ccf3390edef8d9aa08301860e17a271d350e",
    "qrels/test.tsv": "4864ee72653e7cc8c03a9eaf7456d1d0dc8549b6bf5e7d418750baf8a4f4a82e",
}


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_generated_twice_gives_the_pinned_bytes(tmp_path):
    a = generated.write_collection(tmp_path / "a")
    b = generated.write_collection(tmp_path / "b")
    assert a == b == PINNED == generated.SHA256
    assert tree(tmp_path / "a") == tree(tmp_path / "b")
    assert {k: hashlib.sha256(v).hexdigest() for k, v in tree(tmp_path / "a").items()} == PINNED
    assert generated.write_collection(tmp_path / "c", seed=generated.SEED + 1) != PINNED  # the seed matters


def test_a_fresh_interpreter_with_other_hash_seeds_writes_the_same_bytes(tmp_path):
    """Nothing depends on str hashing (set or dict-of-hash order): PYTHONHASHSEED changes nothing."""
    for seed in ("0", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = tmp_path / seed
        subprocess.run([sys.executable, "-m", "dive_core.generated", str(out)], check=True, env=env,
                       capture_output=True, timeout=120)
        got = {k: hashlib.sha256(v).hexdigest() for k, v in tree(out / generated.SUBDIR).items()}
        assert got == PINNED, seed


def test_registry_entry_stages_it_from_a_local_beir_directory():
    reg = dcfg.load_registry(REPO / "config" / "datasets.yaml")
    entry = reg[generated.NAME]
    assert entry["local_only"] is True and entry["subdir"] == generated.SUBDIR
    assert entry["files"] == PINNED  # staging refuses any other bytes
    assert "url" not in entry and "zip" not in entry


def test_official_beir_layout(generated_beir):
    root = generated_beir / generated.SUBDIR
    assert sorted(tree(root)) == ["corpus.jsonl", "qrels/test.tsv", "queries.jsonl"]
    qrels = (root / "qrels" / "test.tsv").read_bytes()
    assert qrels.startswith(b"query-id\tcorpus-id\tscore\r\n")
    assert qrels.count(b"\r\n") == qrels.count(b"\n")  # CRLF throughout, as in the official zips
    for name, keys in (("corpus.jsonl", ["_id", "title", "text", "metadata"]), ("queries.jsonl", ["_id", "text", "metadata"])):
        raw = (root / name).read_bytes()
        assert b"\r" not in raw and raw.endswith(b"\n")
        assert all(list(json.loads(line)) == keys for line in raw.decode("utf-8").splitlines()), name
    ds = load_beir(root)
    assert (len(ds.corpus), len(ds.queries)) == (500, 56)
    rows = [(q, d, s) for q, docs in ds.qrels["test"].items() for d, s in docs.items()]
    assert len(rows) == 69 and Counter(s for _, _, s in rows) == {1: 51, 2: 15, 0: 3}  # graded, judged-non-relevant
    assert len(ds.relevant()) == 50  # judged queries: 30 / 10 / 10 under the split rule
    assert not set(ds.corpus) & set(ds.queries)  # no query id is a document id (BEIR drops those hits)
    assert list(ds.corpus) != sorted(ds.corpus) and list(ds.queries) == sorted(ds.queries, key=int)
    assert sum(1 for d in ds.corpus.values() if not d["title"]) > 0  # some documents have no title
    assert any(not c.isascii() for d in ds.corpus.values() for c in d["text"])  # UTF-8 beyond ASCII
    docs_per_query = Counter(len([d for d, s in ds.qrels["test"][q].items() if s > 0]) for q in ds.relevant())
    assert docs_per_query[1] > 30 and docs_per_query[2] + docs_per_query[3] > 5
    positives = Counter(d for q in ds.relevant() for d in ds.relevant()[q])
    assert sum(1 for n in positives.values() if n > 1) == 5  # documents relevant to two queries


def test_a_bag_of_words_ranking_finds_the_relevant_documents(generated_beir):
    """The text is retrievable on its own words (tf-idf cosine, no model): nDCG@10 far above a
    random ranking's. The end-to-end test checks MiniLM on it (frozen, truncate, DIVE > 0.3)."""
    from dive_core.metrics import evaluate, mean_metrics

    ds = load_beir(generated_beir / generated.SUBDIR)
    tokens = {d: re.findall(r"\w+", ds.doc_text(d).lower()) for d in ds.corpus}
    df = Counter(w for words in tokens.values() for w in set(words))
    idf = {w: math.log(len(tokens) / n) for w, n in df.items()}

    def vec(words):
        tf = Counter(w for w in words if w in idf)
        v = {w: c * idf[w] for w, c in tf.items()}
        norm = math.sqrt(sum(x * x for x in v.values())) or 1.0
        return {w: x / norm for w, x in v.items()}

    docs = {d: vec(t) for d, t in tokens.items()}
    qids = sorted(ds.relevant())
    run = {}
    for q in qids:
        qv = vec(re.findall(r"\w+", ds.queries[q].lower()))
        scores = {d: sum(x * dv.get(w, 0.0) for w, x in qv.items()) for d, dv in docs.items()}
        run[q] = dict(sorted(scores.items(), key=lambda kv: -kv[1])[:100])
    assert mean_metrics(evaluate(ds.qrels["test"], run), qids)["ndcg@10"] > 0.8
