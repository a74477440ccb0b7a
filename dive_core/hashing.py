"""sha256 hex digests of bytes and of files: the fingerprints that records keep.

At the bottom of the import graph (it imports nothing of dive_core): the data package
fingerprints BEIR files with it, splits checks an arrival manifest against its split manifest,
vectors and backbones hash their input files.
"""

from __future__ import annotations

import hashlib
import os


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()
