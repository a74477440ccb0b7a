"""Files made for use outside the workflow, with tags of their own: the record in a compressed
vector file's metadata (:data:`COMPRESSED_FORMAT`), an exported compressor's ``config.json``
(:data:`COMPRESSOR_FORMAT`), and a compress part's range file (:data:`COMPRESS_PART_FIELDS`, read
only by the gather of its own entry; no tag)."""

from __future__ import annotations

import json
import os
from typing import Any, Mapping, Sequence

from ..atomic import atomic_open
from ..hashing import sha256_bytes
from .base import RecordError

COMPRESSED_FORMAT = "dive-compressed/1"
COMPRESSED_META_KEY = "dive_compressed"  # the metadata key (Parquet schema, HDF5 emb attrs) holding the JSON record
COMPRESSED_FIELDS = ("format", "encoding", "compressor", "input", "normalisation")  # and sq8 (int8), faiss_index
# a compress part's range file, beside its float32 spool: its rows of the input and their per-coordinate range
COMPRESS_PART_FIELDS = ("part", "start", "stop", "n", "group", "weights_sha256", "allowed", "vmin", "vmax")
COMPRESSOR_FORMAT = "dive-compressor/2"  # /1 had no config_sha256
COMPRESSOR_DEFINING = ("format", "type", "d", "k", "seed", "hparams", "state_sha256")  # what config_sha256 covers
COMPRESSOR_FIELDS = (*COMPRESSOR_DEFINING, "provenance", "config_sha256")


def compressed(compressor: Mapping[str, Any], vectors: Any, encoding: str,
               sq8: tuple[Sequence[float], Sequence[float]] | None = None, allowed: Sequence[str] = (),
               faiss_index: Mapping[str, Any] | None = None) -> dict:
    """The ``dive_compressed`` metadata record of one output vector set (no time, no path: the CLI
    and a gathered workflow output carry the same record). ``compressor``: its provenance
    (:func:`dive_core.compress.provenance`); ``vectors``: the input set (a
    :class:`~dive_core.vectors.VectorFile`); ``sq8``: an int8 file's ``(vmin, vdiff)`` ranges, as floats;
    ``allowed``: the options that let all-zero rows or repeated ids through on purpose (``input.allowed``);
    ``faiss_index``: the FAISS factory index to be made of this set (:func:`dive_core.compress.index_record`)."""
    rec = {"format": COMPRESSED_FORMAT, "encoding": encoding, "compressor": dict(compressor),
           "input": {"file": vectors.path.name, "group": vectors.group, "n": int(vectors.n), "dim": int(vectors.dim),
                     "dtype": vectors.dtype, **({"allowed": sorted(allowed)} if allowed else {})},
           "normalisation": "input rows L2-normalised, compressed, output rows L2-normalised (Method.compress)"}
    if sq8 is not None:
        rec["sq8"] = {"vmin": list(sq8[0]), "vdiff": list(sq8[1]),
                      "faiss": "ScalarQuantizer QT_8bit, RS_minmax over every row of the input",
                      "decode": "vmin + (stored + 128 + 0.5) / 255 * vdiff"}
    if faiss_index is not None:
        rec["faiss_index"] = dict(faiss_index)
    return rec


def compressed_metadata(record: Mapping[str, Any]) -> dict[str, str]:
    """A :func:`compressed` record as file metadata: ``{COMPRESSED_META_KEY: its JSON}`` (a .npy
    gets it in ``<name>.meta.json`` beside it)."""
    return {COMPRESSED_META_KEY: json.dumps(record, sort_keys=True)}


def read_compressed_metadata(meta: Mapping[str, str]) -> dict:
    """The :func:`compressed` record in a file's metadata (KeyError, TypeError or ValueError: none)."""
    return json.loads(meta[COMPRESSED_META_KEY])


def write_compress_part(path: str | os.PathLike, **fields: Any) -> dict:
    """Write a compress part's range file: exactly :data:`COMPRESS_PART_FIELDS`, in that order."""
    missing = [f for f in COMPRESS_PART_FIELDS if f not in fields]
    extra = [f for f in fields if f not in COMPRESS_PART_FIELDS]
    if missing or extra:
        raise ValueError(f"{path}: compress part: missing {missing}, unknown {extra}")
    obj = {f: fields[f] for f in COMPRESS_PART_FIELDS}
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(obj, fh)
    return obj


def read_compress_part(path: str | os.PathLike) -> dict:
    """A compress part's range file (OSError, ValueError: not a complete one)."""
    with open(path, encoding="utf-8") as fh:
        obj = json.loads(fh.read())
    missing = [f for f in COMPRESS_PART_FIELDS if not isinstance(obj, Mapping) or f not in obj]
    if missing:
        raise RecordError(f"{path}: compress part without field(s) {missing}")
    return obj


def compressor_config_sha256(config: Mapping[str, Any]) -> str:
    """sha256 of what defines the compressor in ``config.json`` (not its provenance): a hand-edited
    k, d, type or hyperparameter is refused, also for a compressor without weights (truncate)."""
    defining = {k: config[k] for k in COMPRESSOR_DEFINING}
    return sha256_bytes(json.dumps(defining, sort_keys=True).encode())


def compressor_config(*, type: str, d: int, k: int, seed: int, hparams: Mapping[str, Any], state_sha256: str,
                      provenance: Mapping[str, Any] | None = None) -> dict:
    """An exported compressor's ``config.json``: every field of :data:`COMPRESSOR_FIELDS`."""
    config = {"format": COMPRESSOR_FORMAT, "type": type, "d": d, "k": k, "seed": seed, "hparams": dict(hparams),
              "state_sha256": state_sha256, "provenance": dict(provenance or {})}
    config["config_sha256"] = compressor_config_sha256(config)
    return config


def write_compressor_config(path: str | os.PathLike, config: Mapping[str, Any]) -> None:
    """Write a :func:`compressor_config` atomically."""
    with atomic_open(path, "w", encoding="utf-8") as fh:
        json.dump(config, fh, indent=2, sort_keys=True, default=str)


def check_compressor_config(config: Mapping[str, Any], path: str | os.PathLike) -> dict:
    """``config`` if its defining fields match its ``config_sha256``; else a ValueError naming ``path``."""
    if config.get("config_sha256") != compressor_config_sha256(config):
        raise ValueError(f"{path}: its type, dimensions or hyperparameters do not match the recorded "
                         "config_sha256 (edited by hand?); export the checkpoint again")
    return dict(config)
