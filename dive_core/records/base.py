"""The JSON records (:data:`FORMATS`, :data:`FIELDS`, :data:`ROW_FIELDS`): their format tags, the
fields a reader may rely on, the rule that makes each, their one writer and reader, and the
builders of a checkpoint's meta and of a result record. The messages of every record kind (the
TSV and HDF5 modules' too) name the file and what to rerun (:func:`_remedy`)."""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

from ..atomic import read_json, write_json

VERSIONS = {
    "source": 1, "splits": 1, "arrival": 1, "embeddings": 1, "embedding_shard": 1, "triplets": 1, "checkpoint": 2, "result": 2,
    "selection": 2, "efficiency": 3, "efficiency_synthetic": 2, "frontier": 3,
    "arrival_codes": 2,
}  # checkpoints written before this module were tagged dive-pipeline-checkpoint/1: refused like any other
# checkpoint/2, result/2: the training precision (fp32 | bf16) in the checkpoint meta and the result
# selection/2: the backbone whose runs it selects on (a pick never trains another backbone's runs)
# efficiency/2: the fields its study reads (backbone, n_queries, FAISS version and threads, device,
# CPU, each index row's figures); the synthetic scaling is its own kind (efficiency_synthetic), no
# longer an efficiency/1 record of another shape
# efficiency/3, efficiency_synthetic/2: each index's ``encoding`` (float32, sparse, or an index quantizer
# of dive_core.quantizers timed beside the flat index), its memory as FAISS serializes it
# (``memory_bytes``) and its batched throughput on one thread (``throughput_qps_one_thread``)
# frontier/2: each row's nDCG@10 per query (``per_query``, in the order of ``query_ids``), for the paired
# tests of the sparse codes against the dense rows of no more bytes
# frontier/3: the index quantizers' rows (PQ, OPQ + PQ, RaBitQ, SQ4: factory, fit seconds, training rows,
# codebook bytes, seed), each row's method type and whether it was trained with labels (``supervised``),
# and ``seen`` (per query of ``query_ids``: 1 if a relevant document is a training positive), for the
# verdict at each budget on seen and unseen queries
FORMATS = {kind: f"dive-pipeline/{kind}/{v}" for kind, v in VERSIONS.items()}

RULES = {
    "source": "stage_beir", "splits": "make_splits", "arrival": "make_arrival", "embeddings": "embed", "embedding_shard": "embed_part",
    "triplets": "triplets",
    "checkpoint": "train", "result": "evaluate", "selection": "select", "efficiency": "efficiency",
    "efficiency_synthetic": "efficiency_synthetic", "frontier": "frontier", "arrival_codes": "arrival_codes",
}

# What every efficiency measurement records about where it ran (dive_core.efficiency.faiss_info and
# memory_bandwidth), and the figures of each timed index (dive_core.efficiency.measure).
_MACHINE = ("faiss_version", "faiss_threads", "device", "cpu", "bandwidth_gb_s")
_INDEX = ("method", "dim", "encoding", "n_docs", "bytes_per_vector", "index_bytes", "memory_bytes",
          "latency_ms_median", "latency_ms_p99", "throughput_qps", "throughput_qps_one_thread", "n_single", "batch_queries", "repeats", "k", "lower_bound_ms", "latency_ratio_to_bound",
          "read_ms_same_size", "latency_ratio_to_read")

# The fields every reader may rely on (a record may hold more).
FIELDS = {
    "source": ("dataset", "fingerprint", "counts"),
    "splits": ("dataset", "seed", "fractions", "counts", "source_fingerprint", "stages", "document_overlap",
               "identical_ids", "ids", "qrels"),
    "arrival": ("dataset", "seed", "fraction", "new_query_share", "rule", "source_fingerprint", "splits_sha256",
                "counts", "taken", "strata", "arriving"),
    "embeddings": ("content_sha256",),  # + what rule embed adds: backbone, dim, dataset, source_fingerprint, ...
    "embedding_shard": ("part", "shard", "shards", "inputs_key", "n_docs", "n_queries", "dim", "seconds"),
    "triplets": ("dataset", "backbone", "stage", "negatives", "splits_sha256", "source_fingerprint", "tsv_sha256",
                 "stats"),
    "checkpoint": ("type", "d", "k", "seed", "hparams", "state", "state_sha256", "meta"),
    "result": ("dataset", "backbone", "method", "method_type", "stage", "seed", "k", "d", "role", "n_queries",
               "metrics", "subsets", "diagnostics", "top_k", "identical_ids", "config", "fingerprints", "timings",
               "training", "versions", "runtime"),
    "selection": ("study", "backbone", "metric", "datasets", "seed", "methods", "inputs"),
    "efficiency": ("dataset", "backbone", "n_queries", *_MACHINE, "indexes", "versions", "runtime"),
    "efficiency_synthetic": ("dataset", *_MACHINE, "indexes", "versions", "runtime"),
    "frontier": ("dataset", "backbone", "n_queries", "query_ids", "seen", "rows", "versions", "runtime"),
    # frontier rows (float32 and quantizer codes) of an arrival study's maps, every fit on the known documents
    "arrival_codes": ("experiment", "dataset", "backbone", "seed", "stage", "role", "n_queries", "query_ids", "strata",
                      "known_docs",
                      "arrival_sha256", "rows", "skipped", "quantizers", "versions", "runtime"),
}
# Records holding a list of rows: the list's field and the fields of every row (the list is not empty).
ROW_FIELDS = {
    # one index per timed (method, dim), the first at the full dimension, with the ratios to it
    "efficiency": ("indexes", _INDEX + ("memory_ratio_to_full", "latency_speedup_vs_full",
                                        "throughput_ratio_to_full")),
    # one index per (corpus size, dim) of random unit vectors: no full dimension to compare with
    "efficiency_synthetic": ("indexes", _INDEX),
}

# What the training job stores in a checkpoint's ``meta`` (and evaluate copies into the result).
CHECKPOINT_META = ("dataset", "backbone", "method", "method_type", "stage", "k", "seed", "device", "precision",
                   "negatives", "n_triplets", "n_train_queries", "selected", "train_seconds", "final_epoch",
                   "fingerprints", "versions", "runtime")


class RecordError(ValueError):
    """A file that is not the record this workflow reads; the message says what to rerun."""


def _remedy(kind: str, path: str | os.PathLike, rule: str | None = None) -> str:
    rule = rule or RULES[kind]
    return f"delete it and rerun `snakemake {path}` (rule {rule}), or `snakemake --forcerun {rule} all`"


def stamp(kind: str, body: Mapping[str, Any]) -> dict:
    """``body`` with the kind's format tag."""
    return {"format": FORMATS[kind], **{k: v for k, v in body.items() if k != "format"}}


def _missing(kind: str, obj: Mapping[str, Any]) -> str | None:
    """What of :data:`FIELDS` / :data:`ROW_FIELDS` ``obj`` lacks, in words; None: nothing."""
    missing = [f for f in FIELDS[kind] if f not in obj]
    if missing:
        return f"field(s) {missing}"
    if kind in ROW_FIELDS:
        key, fields = ROW_FIELDS[kind]
        rows = obj[key]
        if not isinstance(rows, list) or not rows:
            return f"rows: {key} is {rows!r}, not a list of one or more rows"
        for i, row in enumerate(rows):
            lacks = [f for f in fields if not isinstance(row, Mapping) or f not in row]
            if lacks:
                return f"row field(s) {lacks} in {key}[{i}]"
    return None


def check(kind: str, obj: Any, path: str | os.PathLike) -> dict:
    """``obj`` if it is a ``kind`` record of the current format with every field of :data:`FIELDS`
    (and of :data:`ROW_FIELDS` in each row); else a :class:`RecordError` naming ``path``, the
    formats, the missing fields and the remedy."""
    found = obj.get("format") if isinstance(obj, Mapping) else None
    if found != FORMATS[kind]:
        what = "no format tag" if found is None else f"format {found!r}"
        raise RecordError(f"{path}: {kind} record of {what}; this version of the workflow reads "
                          f"{FORMATS[kind]!r}. {_remedy(kind, path).capitalize()}.")
    missing = _missing(kind, obj)
    if missing:
        raise RecordError(f"{path}: {kind} record without {missing}; {_remedy(kind, path)}.")
    return dict(obj)


def write(kind: str, path: str | os.PathLike, body: Mapping[str, Any]) -> dict:
    """Write a JSON record atomically (temporary file, then rename); returns what was written."""
    obj = stamp(kind, body)
    missing = _missing(kind, obj)
    if missing:
        raise ValueError(f"{path}: a {kind} record needs {missing}")
    write_json(path, obj)
    return obj


def read(kind: str, path: str | os.PathLike) -> dict:
    """Read and check a JSON record."""
    return check(kind, _load(kind, path), path)


def read_one_of(kinds: Sequence[str], path: str | os.PathLike) -> dict:
    """Read a JSON record that may be of any of ``kinds`` (a study's inputs: the efficiency study
    reads ``efficiency`` and ``efficiency_synthetic`` records), checked as the kind its format tag
    names; a file of none of them is refused naming every kind's format and rule."""
    obj = _load(kinds[0], path)
    found = obj.get("format") if isinstance(obj, Mapping) else None
    kind = next((k for k in kinds if FORMATS[k] == found), None)
    if kind is None and len(kinds) > 1:
        what = "no format tag" if found is None else f"format {found!r}"
        raise RecordError(f"{path}: a record of {what}; this version of the workflow reads "
                          f"{' or '.join(repr(FORMATS[k]) for k in kinds)} here. Delete it and rerun "
                          f"`snakemake {path}` (rule {' or '.join(RULES[k] for k in kinds)}).")
    return check(kind or kinds[0], obj, path)


def _load(kind: str, path: str | os.PathLike) -> Any:
    try:
        return read_json(path)
    except FileNotFoundError:
        raise RecordError(f"{path}: no such {kind} record; run `snakemake {path}` (rule {RULES[kind]})") from None
    except ValueError as exc:
        raise RecordError(f"{path}: not a JSON {kind} record ({exc}); {_remedy(kind, path)}") from None


def _shown(v: Any) -> str:
    """``repr`` of a value, a numpy scalar as its Python value."""
    return repr(v.item() if type(v).__module__ == "numpy" and getattr(v, "ndim", None) == 0 else v)


def checkpoint_meta(**fields: Any) -> dict:
    """The provenance the training job stores in a checkpoint: exactly :data:`CHECKPOINT_META`."""
    missing = [f for f in CHECKPOINT_META if f not in fields]
    extra = [f for f in fields if f not in CHECKPOINT_META]
    if missing or extra:
        raise ValueError(f"checkpoint meta: missing {missing}, unknown {extra}")
    return {f: fields[f] for f in CHECKPOINT_META}


def result(*, run: Mapping[str, Any], method: Any, summary: Mapping[str, Any], config_snapshot: Mapping[str, Any],
           checkpoint_sha256: str, per_query_sha256: str, versions: Mapping, runtime: Mapping) -> dict:
    """A result record (``eval.json``) of one evaluated run.

    ``run``: dataset, backbone, method, stage, seed (the job's wildcards); ``method``: the loaded
    :class:`~dive_core.methods.base.Method` (its checkpoint meta supplies the training
    provenance); ``summary``: :func:`dive_core.evaluation.evaluate_method`'s summary."""
    meta = method.meta
    return stamp("result", {
        "dataset": run["dataset"], "backbone": run["backbone"], "method": run["method"],
        "method_type": method.type, "stage": run["stage"], "seed": int(run["seed"]), "k": method.k, "d": method.d,
        **{k: summary[k] for k in ("role", "n_queries", "metrics", "subsets", "diagnostics", "top_k",
                                   "identical_ids")},
        "config": {**config_snapshot, "hparams": method.hp, "negatives": meta["negatives"],
                   "n_triplets": meta["n_triplets"], "n_train_queries": meta["n_train_queries"],
                   "selected": meta["selected"]},
        "fingerprints": {**meta["fingerprints"], "checkpoint_sha256": checkpoint_sha256,
                         "weights_sha256": method.state_sha256(), "per_query_sha256": per_query_sha256},
        "timings": {"train_seconds": meta["train_seconds"], **summary["timings"]},
        "training": {"final_epoch": meta["final_epoch"], "device": meta["device"], "precision": meta["precision"],
                     "runtime": meta["runtime"], "versions": meta["versions"]},
        "versions": dict(versions),
        "runtime": dict(runtime),
    })


def run_key(record: Mapping[str, Any]) -> tuple:
    """(dataset, backbone, method, k, stage, seed) of a result record: the run it describes."""
    return tuple(record[f] for f in ("dataset", "backbone", "method", "k", "stage", "seed"))
