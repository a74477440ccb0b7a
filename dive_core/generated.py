"""A generated retrieval collection in the official BEIR layout: `make smoke`'s data and the end-to-end tests'.

``write_collection(root)`` writes, from a fixed seed and byte for byte the same on every machine
and Python version, the dataset ``generated-tiny`` (registered in ``config/datasets.yaml``):

* ``corpus.jsonl``: 500 documents (``_id``, ``title``, ``text``, ``metadata``), in no id order,
  a few with an empty title, a few words with non-ASCII letters (written as UTF-8);
* ``queries.jsonl``: 56 queries (``_id``, ``text``, ``metadata``) in numeric id order: 50 judged
  ones and 6 that no qrels row names (BEIR's loader drops those);
* ``qrels/test.tsv``: the header ``query-id<TAB>corpus-id<TAB>score`` and CRLF line endings, as in
  the official zips; scores 1 and 2 (graded), and a few judged-non-relevant rows with score 0.

The words are made up (syllables from a seeded generator), so nothing here is anyone's text.
They are still retrievable: every document belongs to one of 25 topics (a cluster of topic
words); every judged query has three "claim" words of its own that its relevant documents (one to
three, in the query's topic) repeat, and that no other document holds; a few documents are
relevant to both queries of their topic (which makes some test queries "seen"). A real
sentence-transformers model (all-MiniLM-L6-v2) ranks the relevant documents far above chance.
Its scores mean nothing beyond that.

Reproducibility: only ``random.Random(seed).random()`` is used (the one generator output Python
guarantees across versions; ``choice``/``sample``/``shuffle`` are built on it here), nothing
iterates a set or depends on hashing, JSON is written with fixed separators and key order, lines
end in ``\\n`` (``\\r\\n`` in the qrels). ``tests/test_generated.py`` pins the sha256 of every
file (``SHA256`` below, also the registry's ``files``, which staging checks).

Run ``python -m dive_core.generated DIR`` to write it to ``DIR/_generated/generated-tiny`` (then
``BEIR_DATA_DIR=DIR`` for the workflow).
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Sequence

from .hashing import sha256_bytes

NAME = "generated-tiny"
SUBDIR = "_generated/generated-tiny"  # inside a local BEIR directory, as in the registry
SEED = 2027

N_DOCS = 500
N_TOPICS = 25
N_JUDGED = 50  # two per topic
N_UNJUDGED = 6
CLAIM_WORDS = 3  # per query

# sha256 of the files write_collection writes (tests/test_generated.py checks them)
SHA256 = {
    "corpus.jsonl": "9182b2c1ea4cd0c734e88ad2e4ec59961389ddb23a7ee1abc3ed05caca5c06ba",
    "queries.jsonl": "bde4d889e164b5a1d775552dd5d3ccf3390edef8d9aa08301860e17a271d350e",
    "qrels/test.tsv": "4864ee72653e7cc8c03a9eaf7456d1d0dc8549b6bf5e7d418750baf8a4f4a82e",
}

_ONSETS = ("b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z",
           "br", "cr", "dr", "pl", "st", "tr", "th", "ch", "sh")
_NUCLEI = ("a", "e", "i", "o", "u", "a", "e", "i", "o", "ai", "ou")
_CODAS = ("", "", "", "", "n", "r", "s", "l", "m", "x")
_ENDINGS = ("",) * 12 + ("ase", "ine", "ol", "ide", "osis", "ium", "ic", "ate")
_ACCENTED = {"a": "á", "e": "é", "i": "ï", "o": "ö", "u": "ü"}
_FUNCTION = ("the", "of", "and", "in", "to", "a", "is", "with", "for", "by", "on", "that", "are",
             "from", "as", "was", "at", "not", "than", "into")


# --------------------------------------------------------------------------- seeded helpers
# Built on Random.random() alone: its sequence for an integer seed is the one thing Python
# promises to keep across versions (randrange/choice/sample/shuffle have changed before).
def _below(rng: random.Random, n: int) -> int:
    return min(int(rng.random() * n), n - 1)


def _choice(rng: random.Random, seq):
    return seq[_below(rng, len(seq))]


def _shuffled(rng: random.Random, seq) -> list:
    out = list(seq)
    for i in range(len(out) - 1, 0, -1):  # Fisher-Yates
        j = _below(rng, i + 1)
        out[i], out[j] = out[j], out[i]
    return out


def _sample(rng: random.Random, seq, k: int) -> list:
    return _shuffled(rng, seq)[:k]


def _unique_ints(rng: random.Random, n: int, low: int, high: int) -> list[int]:
    out, seen = [], set()
    while len(out) < n:
        v = low + _below(rng, high - low)
        if v not in seen:
            seen.add(v)
            out.append(v)
    return out


# --------------------------------------------------------------------------- text
def _vocabulary(rng: random.Random, n: int) -> list[str]:
    """``n`` distinct made-up words, 2 or 3 syllables, some with a technical-looking ending."""
    words, seen = [], set()
    while len(words) < n:
        w = "".join(_choice(rng, _ONSETS) + _choice(rng, _NUCLEI) + _choice(rng, _CODAS)
                    for _ in range(2 + (rng.random() < 0.25)))
        w += _choice(rng, _ENDINGS)
        if w not in seen and w not in _FUNCTION:
            seen.add(w)
            words.append(w)
    return words


def _with_accents(rng: random.Random, words: list[str], every: int) -> list[str]:
    """Every ``every``-th word gets one accented vowel (non-ASCII UTF-8 in the files)."""
    out = []
    for i, w in enumerate(words):
        vowels = [j for j, c in enumerate(w) if c in _ACCENTED]
        if i % every == every - 1 and vowels:
            j = _choice(rng, vowels)
            w = w[:j] + _ACCENTED[w[j]] + w[j + 1:]
        out.append(w)
    return out


def _sentence(rng: random.Random, content: list[str]) -> str:
    """Content words in the given order, function words between some of them."""
    tokens = []
    for i, w in enumerate(content):
        if i and rng.random() < 0.45:
            tokens.append(_choice(rng, _FUNCTION))
        tokens.append(w)
    text = " ".join(tokens)
    return text[0].upper() + text[1:] + "."


def _draw(rng: random.Random, pools: list[tuple[float, list[str]]], n: int) -> list[str]:
    """``n`` words, each from the first pool whose cumulative weight exceeds a uniform draw."""
    out = []
    for _ in range(n):
        u, acc = rng.random(), 0.0
        for weight, pool in pools:
            acc += weight
            if u < acc:
                break
        out.append(_choice(rng, pool))
    return out


# --------------------------------------------------------------------------- the collection
def build(seed: int = SEED) -> tuple[list[dict], list[dict], list[tuple[str, str, int]]]:
    """Corpus records, query records and qrels rows (query id, doc id, score), in file order."""
    rng = random.Random(seed)
    vocab = _with_accents(rng, _vocabulary(rng, 1900), every=37)
    topic_words = [vocab[i * 24:(i + 1) * 24] for i in range(N_TOPICS)]  # 600 words
    background = vocab[600:1000]
    signature_pool = vocab[1000:1600]
    claim_pool = vocab[1600:1600 + (N_JUDGED + N_UNJUDGED) * CLAIM_WORDS]

    doc_ids = [str(v) for v in _unique_ints(rng, N_DOCS, 10_000, 40_000_000)]
    query_ids = [str(v) for v in _unique_ints(rng, N_JUDGED + N_UNJUDGED, 1, 1_500)]
    topic_of_doc = {d: i % N_TOPICS for i, d in enumerate(doc_ids)}
    docs_of_topic = [[d for d in doc_ids if topic_of_doc[d] == t] for t in range(N_TOPICS)]

    # queries: two judged ones per topic, then the unjudged ones on random topics
    claims = {q: claim_pool[i * CLAIM_WORDS:(i + 1) * CLAIM_WORDS] for i, q in enumerate(query_ids)}
    topic_of_query = {q: (i % N_TOPICS if i < N_JUDGED else _below(rng, N_TOPICS)) for i, q in enumerate(query_ids)}
    relevant: dict[str, list[tuple[str, int]]] = {}
    nonrelevant: dict[str, str] = {}
    claims_in_doc: dict[str, list[str]] = {d: [] for d in doc_ids}
    for t in range(N_TOPICS):
        first, second = query_ids[t], query_ids[N_TOPICS + t]
        pool = _shuffled(rng, docs_of_topic[t])
        for q in (first, second):
            u = rng.random()
            n_rel = 1 if u < 0.9 else 2 if u < 0.98 else 3
            relevant[q] = [(pool.pop(), 2 if rng.random() < 0.3 else 1) for _ in range(n_rel)]
        if t % 5 == 0:  # a document relevant to both queries of the topic
            relevant[second].append((relevant[first][0][0], 1))
        if t % 8 == 1:  # a judged non-relevant document of the same topic
            nonrelevant[first] = pool.pop()
        for q in (first, second):
            for d, _ in relevant[q]:
                claims_in_doc[d] += claims[q]
    for q in query_ids[N_JUDGED:]:  # unjudged queries: their claim words are in one document, unjudged
        d = _choice(rng, docs_of_topic[topic_of_query[q]])
        claims_in_doc[d] += claims[q]

    corpus = []
    for d in _shuffled(rng, doc_ids):
        t = topic_of_doc[d]
        signature = _sample(rng, signature_pool, 2)
        own = claims_in_doc[d] or signature
        pools = [(0.30, topic_words[t]), (0.45, own), (0.10, signature), (0.15, background)]
        title = "" if rng.random() < 0.05 else _sentence(rng, _draw(rng, pools, 5 + _below(rng, 5)))[:-1]
        sentences = [_sentence(rng, _draw(rng, pools, 6 + _below(rng, 7))) for _ in range(4 + _below(rng, 4))]
        corpus.append({"_id": d, "title": title, "text": " ".join(sentences), "metadata": {}})

    queries = []
    for q in sorted(query_ids, key=int):
        t = topic_of_query[q]
        words = claims[q] + _sample(rng, topic_words[t], 2) + _sample(rng, background, 1)
        queries.append({"_id": q, "text": _sentence(rng, _shuffled(rng, words)), "metadata": {}})

    rows = [(q, d, s) for q, docs in relevant.items() for d, s in docs]
    rows += [(q, d, 0) for q, d in nonrelevant.items()]
    rows.sort(key=lambda r: (int(r[0]), int(r[1])))
    return corpus, queries, rows


def _jsonl(records: list[dict]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False, separators=(", ", ": ")) + "\n"
                   for r in records).encode("utf-8")


def files(seed: int = SEED) -> dict[str, bytes]:
    """The collection's files, by their path inside the dataset directory."""
    corpus, queries, rows = build(seed)
    qrels = "".join(f"{q}\t{d}\t{s}\r\n" for q, d, s in [("query-id", "corpus-id", "score"), *rows])
    return {"corpus.jsonl": _jsonl(corpus), "queries.jsonl": _jsonl(queries),
            "qrels/test.tsv": qrels.encode("ascii")}


def write_collection(root: str | Path, seed: int = SEED) -> dict[str, str]:
    """Write the dataset directory ``root`` (its files only); returns their sha256 by path."""
    root = Path(root)
    out = {}
    for rel, data in files(seed).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        out[rel] = sha256_bytes(data)
    return out


def write_beir_dir(beir_dir: str | Path, seed: int = SEED) -> Path:
    """Write the collection where the registry looks for it in a local BEIR directory."""
    root = Path(beir_dir) / SUBDIR
    write_collection(root, seed)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dive_core.generated BEIR_DIR``: write the collection, print where."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m dive_core.generated",
                                 description=f"Write the generated collection into BEIR_DIR/{SUBDIR}.")
    ap.add_argument("beir_dir", metavar="BEIR_DIR", help="a local BEIR directory (make smoke: data/generated)")
    print(write_beir_dir(ap.parse_args(argv).beir_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
