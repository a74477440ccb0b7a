"""``scifact-tiny``: the slice of the official BEIR SciFact that the cluster and sharding tests run on
(tests/test_slurm.py), derived byte for byte from the official files.

``python -m dive_core.data.derive BEIR_DIR`` reads ``BEIR_DIR/scifact`` (the official SciFact in the
BEIR layout, ``corpus.jsonl`` or ``corpus.jsonl.gz``) and writes ``BEIR_DIR/_derived/scifact-tiny``,
where the registry (``config/datasets.yaml``) looks for it:

* ``qrels/test.tsv``: the official header and every row of the first 50 queries of the official
  test qrels (by first appearance), in their order, CRLF line endings as in the official file;
* ``queries.jsonl``: those 50 queries' lines of the official ``queries.jsonl``, in its order;
* ``corpus.jsonl``: the official lines of their relevant documents and of 449 others, 500 in all,
  in the official order. The others are ``random.Random(13).sample`` of the remaining documents in
  the official order.

Every line is copied, not re-encoded. The three files' sha256 are pinned in the registry's
``files`` (staging refuses other bytes) and in :data:`SHA256`; a Python whose ``random.sample``
draws otherwise would make other bytes, and the write is then refused, naming the file. Its
scores mean nothing: it exists to make the tests that need real text fast.
"""

from __future__ import annotations

import json
import random
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Sequence

from ..hashing import sha256_bytes, sha256_file
from .load import CORPUS, QUERIES, DataError, dataset_files, read_decompressed

NAME = "scifact-tiny"
SUBDIR = "_derived/scifact-tiny"  # inside a local BEIR directory, as in the registry
SOURCE = "scifact"
QUERIES_KEPT, DOCS_KEPT, SEED = 50, 500, 13
SHA256 = {
    "corpus.jsonl": "fabe02ec07c3d8cc8312901921dde9c43302a4e4790c71bf5a61ee6fbde921ef",
    "queries.jsonl": "f93d465f5e13d6054180643fa9aa96f3592992fa18bfd23d4a156fe3a7de9701",
    "qrels/test.tsv": "538b030e51a905605321b21d898eb63892d75e2cf43ed3bbe007efd6810c3727",
}


def _ids(lines: list[bytes]) -> list[str]:
    return [json.loads(line)["_id"] for line in lines]


def files(scifact: str | Path) -> dict[str, bytes]:
    """The three files of scifact-tiny, by their path inside the dataset directory, from the
    official SciFact directory ``scifact``."""
    found = dataset_files(scifact)
    if "qrels/test.tsv" not in found:
        raise DataError(f"{scifact}: no qrels/test.tsv (scifact-tiny is cut from SciFact's test queries)")
    qrels = read_decompressed(found["qrels/test.tsv"]).splitlines(keepends=True)
    header, rows = qrels[0], [r for r in qrels[1:] if r.strip()]
    kept: list[str] = []
    for row in rows:
        q = row.split(b"\t", 1)[0].decode("utf-8")
        if q not in kept:
            kept.append(q)
    kept = kept[:QUERIES_KEPT]
    rows = [r for r in rows if r.split(b"\t", 1)[0].decode("utf-8") in kept]
    relevant = {r.split(b"\t")[1].decode("utf-8") for r in rows}

    query_lines = read_decompressed(found[QUERIES]).splitlines(keepends=True)
    query_lines = [line for line, q in zip(query_lines, _ids(query_lines)) if q in kept]
    corpus_lines = read_decompressed(found[CORPUS]).splitlines(keepends=True)
    doc_ids = _ids(corpus_lines)
    missing = relevant.difference(doc_ids)
    if missing or len(query_lines) != len(kept):
        raise DataError(f"{scifact}: not the official SciFact (judged documents or queries missing)")
    others = [d for d in doc_ids if d not in relevant]
    chosen = relevant.union(random.Random(SEED).sample(others, DOCS_KEPT - len(relevant)))
    return {"corpus.jsonl": b"".join(line for line, d in zip(corpus_lines, doc_ids) if d in chosen),
            "queries.jsonl": b"".join(query_lines),
            "qrels/test.tsv": header + b"".join(rows)}


def write_beir_dir(beir_dir: str | Path) -> Path:
    """Write ``beir_dir/_derived/scifact-tiny`` from ``beir_dir/scifact``; each file's sha256 is
    checked against :data:`SHA256` before anything appears (written to a temporary folder, then
    renamed). An existing copy with the pinned bytes is kept; one with other bytes is refused."""
    beir_dir = Path(beir_dir)
    dest = beir_dir / SUBDIR
    made = files(beir_dir / SOURCE)
    for rel, data in made.items():
        got = sha256_bytes(data)
        if got != SHA256[rel]:
            raise DataError(f"{beir_dir / SOURCE}: scifact-tiny's {rel} would have sha256 {got}, not the "
                            f"pinned {SHA256[rel]} (not the official SciFact, or this Python's random.sample "
                            "draws otherwise)")
    if dest.exists():
        for rel, want in SHA256.items():
            f = dest / rel
            if not f.is_file() or sha256_file(f) != want:
                raise DataError(f"{f}: exists with other bytes than scifact-tiny's; move {dest} away first")
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".scifact-tiny.", dir=dest.parent))
    try:
        for rel, data in made.items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_bytes(data)
        tmp.chmod(0o755)  # mkdtemp's folder is the owner's alone
        tmp.rename(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dive_core.data.derive BEIR_DIR``: write scifact-tiny, print where; exit 1 with
    the reason when the official SciFact is missing or the bytes differ."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m dive_core.data.derive",
                                 description=f"Cut {NAME} out of BEIR_DIR/{SOURCE} (the official SciFact) into "
                                             f"BEIR_DIR/{SUBDIR}, byte for byte, checked against the pinned sha256.")
    ap.add_argument("beir_dir", metavar="BEIR_DIR", help=f"a local BEIR directory holding {SOURCE}/")
    try:
        print(write_beir_dir(ap.parse_args(argv).beir_dir))
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
