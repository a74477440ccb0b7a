"""BEIR data: checksum-verified download, staging from a local copy, strict loaders.

Modules, one job each (a module imports only those above it):

load    the BEIR layout (``corpus.jsonl``, ``queries.jsonl``, ``qrels/*.tsv``, each optionally
        gzipped), the errors, the strict loaders: :func:`load_beir` -> :class:`BeirDataset`
fetch   the download of an official BEIR zip, refused unless its sha256 is the registry's
stage   staging a local BEIR copy (link or copy) or a verified zip, with its source manifest
        ``source.json``; fingerprints and the checks against them; :func:`load_staged`
check   the collection checker: ``python -m dive_core.data check DIR`` checks a collection of
        one's own in this layout before any job reads it: every problem, with file:line
        (:func:`check_collection`)
derive  ``scifact-tiny``, the SLURM tests' slice of the official SciFact, written byte for byte
        from it: ``python -m dive_core.data.derive BEIR_DIR`` (not re-exported: a command)

Every public name is re-exported here, and the rest of the code imports it from here
(``from dive_core.data import load_beir``, ``data.stage_dataset``). The sha256 helpers are
:mod:`dive_core.hashing`'s (re-exported here too).
"""

from ..hashing import sha256_bytes, sha256_file
from .check import BEIR_SPLITS, CHECK_LIMIT, DEFAULT_SPLIT_FRACTIONS, CollectionReport, check_collection, main
from .fetch import download_zip
from .load import (
    CORPUS, ON_MISSING, QRELS_HEADER_SCORE_NAMES, QUERIES, BeirDataset, ChecksumError, DataError,
    dataset_files, load_beir, load_corpus, load_qrels, load_queries, read_decompressed,
)
from .stage import (
    LOCAL_MODES, check_known_hashes, check_same_source, fingerprint, load_staged, resolve_local_root,
    stage_dataset, stage_local, unpack_zip,
)

__all__ = [
    # load
    "CORPUS", "QUERIES", "QRELS_HEADER_SCORE_NAMES", "ON_MISSING", "DataError", "ChecksumError",
    "read_decompressed", "dataset_files", "load_corpus", "load_queries", "load_qrels", "BeirDataset",
    "load_beir",
    # fetch
    "download_zip",
    # stage
    "LOCAL_MODES", "fingerprint", "check_known_hashes", "check_same_source", "unpack_zip", "stage_local",
    "resolve_local_root", "stage_dataset", "load_staged",
    # check
    "CHECK_LIMIT", "BEIR_SPLITS", "DEFAULT_SPLIT_FRACTIONS", "CollectionReport", "check_collection", "main",
    # dive_core.hashing
    "sha256_bytes", "sha256_file",
]
