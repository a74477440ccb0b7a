"""The workflow's ``compress:`` config entries: their defaults, checks, outputs and job inputs.
No torch: the Snakefile's plan reads them."""

from __future__ import annotations

from typing import Any, Mapping

from ..methods.specs import SIDES  # torch-free: what Method.compress maps (the schema enum's owner)
from ..vectors import ENCODINGS, ID_COLUMN, VECTOR_COLUMN, VectorFileError, ids_path, meta_path, vector_format
from .index import TRAIN_SEED, TRAIN_SIZE

ENTRY_DEFAULTS = {"shards": 1, "encoding": "float32", "faiss": False, "group": None, "id_column": ID_COLUMN,
                  "vector_column": VECTOR_COLUMN, "side": "document", "allow_zero_rows": False,
                  "allow_duplicate_ids": False, "faiss_index": None, "faiss_train_size": TRAIN_SIZE,
                  "faiss_seed": TRAIN_SEED}


def entries(config: Mapping[str, Any]) -> dict[str, dict]:
    """The ``compress:`` entries of a config, with their defaults (:data:`ENTRY_DEFAULTS`)."""
    return {name: {**ENTRY_DEFAULTS, **dict(e)} for name, e in dict(config.get("compress") or {}).items()}


def entry(config: Mapping[str, Any], name: str) -> dict:
    from ..config import ConfigError

    all_ = entries(config)
    if name not in all_:
        raise ConfigError(f"config: no compress.{name} (compress: names {sorted(all_)})")
    return all_[name]


def check_config(config: Mapping[str, Any]) -> None:
    """Refuse ``compress:`` entries the jobs could not run, naming the key."""
    from .. import paths
    from ..config import ConfigError

    for name, e in entries(config).items():
        try:
            vector_format(e["input"])
        except VectorFileError as exc:
            raise ConfigError(f"config: compress.{name}.input: {exc}") from None
        if e["encoding"] not in ENCODINGS:
            raise ConfigError(f"config: compress.{name}.encoding = {e['encoding']!r}: expected one of {ENCODINGS}")
        if e["side"] not in SIDES:
            raise ConfigError(f"config: compress.{name}.side = {e['side']!r}: expected one of {list(SIDES)}")
        if e["faiss_index"] is not None and not e["faiss"]:
            raise ConfigError(f"config: compress.{name}.faiss_index = {e['faiss_index']!r} names the index of "
                              f"{paths.COMPRESSED_INDEX.format(name=name)}: set compress.{name}.faiss: true too")
        if str(e["model"]).startswith(paths.COMPRESSED.split("{")[0]):
            raise ConfigError(f"config: compress.{name}.model: {e['model']} is a compressed output, not a compressor")


def output_files(name: str, e: Mapping[str, Any]) -> list[str]:
    """What the gather of entry ``name`` writes: the vector file (and for a .npy its ids and metadata)."""
    from .. import paths

    main = paths.compressed_path(name, e["input"])
    if vector_format(main) == "npy":
        return [main, str(ids_path(main)), str(meta_path(main))]
    return [main]


def targets(config: Mapping[str, Any]) -> list[str]:
    """Every configured output, and the FAISS index of each entry with ``faiss: true``."""
    from .. import paths

    out = []
    for name, e in entries(config).items():
        out += output_files(name, e)
        if e["faiss"]:
            out.append(paths.COMPRESSED_INDEX.format(name=name))
    return out


def job_inputs(config: Mapping[str, Any], name: str, ext: str | None = None) -> dict:
    """A compress job's inputs: ``model`` and ``vectors`` (the input, and a .npy's id list);
    ``ext``: the extension asked for, refused when it is not the input's."""
    from .. import paths
    from ..config import ConfigError

    e = entry(config, name)
    asked = None if ext is None else paths.COMPRESSED.format(name=name, ext=ext)
    if asked is not None and paths.compressed_path(name, e["input"]) != asked:
        raise ConfigError(f"{asked}: compress.{name} reads {e['input']}; its output is "
                          f"{paths.compressed_path(name, e['input'])}")
    vectors = [e["input"]] + ([str(ids_path(e["input"]))] if vector_format(e["input"]) == "npy" else [])
    return {"model": e["model"], "vectors": vectors}


def part_dirs(config: Mapping[str, Any], name: str) -> list[str]:
    """The row-range parts a sharded entry is gathered from (none when ``shards`` is 1)."""
    from .. import paths

    shards = int(entry(config, name)["shards"])
    return [] if shards <= 1 else [paths.COMPRESS_PART.format(name=name, shard=p)
                                   for p in paths.compress_part_names(shards)]
