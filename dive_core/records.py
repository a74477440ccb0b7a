"""Every record one job writes and another reads, defined once: its format (a versioned tag stored
in the file), the fields a reader may rely on, the rule that makes it, and how it is written and
read. Writers and readers go through this module only.

===============  ===========================================================  ======================
record           file                                                         made by rule
===============  ===========================================================  ======================
source           ``data/beir/{dataset}/source.json``                          stage_beir
splits           ``results/{dataset}/splits.json``                            make_splits
embeddings       attributes of ``results/{dataset}/{backbone}/embeddings.h5``  embed
embedding_shard  ``results/{dataset}/{backbone}/embed_parts/{part}.h5``         embed_part
triplets         ``.../triplets/{stage}-{negatives}.json`` (beside the TSV)   triplets
checkpoint       ``.../{method}/k{k}/{stage}/seed{seed}/model.pt``            train
result           ``.../seed{seed}/eval.json`` (and its headline copy)         evaluate
selection        ``results/selection/{backbone}/{study}.json``                select
efficiency       ``results/efficiency/{dataset}/{backbone}.json``,            efficiency,
                 ``results/efficiency/synthetic.json``                        efficiency_synthetic
frontier         ``results/frontier/{dataset}/{backbone}.json``               frontier
===============  ===========================================================  ======================

A file of another format (written by an older version of the workflow, or not a record at all) is
refused with a :class:`RecordError` that names the file, both formats and what to rerun. Bump a
kind's version whenever its fields change meaning or a reader starts to need a new field.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from .atomic import read_json, write_json

VERSIONS = {
    "source": 1, "splits": 1, "embeddings": 1, "embedding_shard": 1, "triplets": 1, "checkpoint": 2, "result": 2,
    "selection": 2, "efficiency": 1, "frontier": 1,
}  # checkpoints written before this module were tagged dive-pipeline-checkpoint/1: refused like any other
# checkpoint/2, result/2: the training precision (fp32 | bf16) in the checkpoint meta and the result
# selection/2: the backbone whose runs it selects on (a pick never trains another backbone's runs)
FORMATS = {kind: f"dive-pipeline/{kind}/{v}" for kind, v in VERSIONS.items()}

RULES = {
    "source": "stage_beir", "splits": "make_splits", "embeddings": "embed", "embedding_shard": "embed_part",
    "triplets": "triplets",
    "checkpoint": "train", "result": "evaluate", "selection": "select", "efficiency": "efficiency",
    "frontier": "frontier",
}

# The fields every reader may rely on (a record may hold more).
FIELDS = {
    "source": ("dataset", "fingerprint", "counts"),
    "splits": ("dataset", "seed", "fractions", "counts", "source_fingerprint", "stages", "document_overlap",
               "identical_ids", "ids", "qrels"),
    "embeddings": ("content_sha256",),  # + what rule embed adds: backbone, dim, dataset, source_fingerprint, ...
    "embedding_shard": ("part", "shard", "shards", "inputs_key", "n_docs", "n_queries", "dim", "seconds"),
    "triplets": ("dataset", "backbone", "stage", "negatives", "splits_sha256", "source_fingerprint", "tsv_sha256",
                 "stats"),
    "checkpoint": ("type", "d", "k", "seed", "hparams", "state", "state_sha256", "meta"),
    "result": ("dataset", "backbone", "method", "method_type", "stage", "seed", "k", "d", "role", "n_queries",
               "metrics", "subsets", "diagnostics", "top_k", "identical_ids", "config", "fingerprints", "timings",
               "training", "versions", "runtime"),
    "selection": ("study", "backbone", "metric", "datasets", "seed", "methods", "inputs"),
    "efficiency": ("dataset", "indexes", "bandwidth_gb_s", "versions", "runtime"),
    "frontier": ("dataset", "backbone", "n_queries", "rows", "versions", "runtime"),
}
# What the training job stores in a checkpoint's ``meta`` (and evaluate copies into the result).
CHECKPOINT_META = ("dataset", "backbone", "method", "method_type", "stage", "k", "seed", "device", "precision",
                   "negatives", "n_triplets", "n_train_queries", "selected", "train_seconds", "final_epoch",
                   "fingerprints", "versions", "runtime")


class RecordError(ValueError):
    """A file that is not the record this workflow reads; the message says what to rerun."""


def _remedy(kind: str, path: str | os.PathLike) -> str:
    return (f"delete it and rerun `snakemake {path}` (rule {RULES[kind]}), or `snakemake --forcerun "
            f"{RULES[kind]} all`")


def stamp(kind: str, body: Mapping[str, Any]) -> dict:
    """``body`` with the kind's format tag."""
    return {"format": FORMATS[kind], **{k: v for k, v in body.items() if k != "format"}}


def check(kind: str, obj: Any, path: str | os.PathLike) -> dict:
    """``obj`` if it is a ``kind`` record of the current format with every field of :data:`FIELDS`;
    else a :class:`RecordError` naming ``path``, the formats, the missing fields and the remedy."""
    found = obj.get("format") if isinstance(obj, Mapping) else None
    if found != FORMATS[kind]:
        what = "no format tag" if found is None else f"format {found!r}"
        raise RecordError(f"{path}: {kind} record of {what}; this version of the workflow reads "
                          f"{FORMATS[kind]!r}. {_remedy(kind, path).capitalize()}.")
    missing = [f for f in FIELDS[kind] if f not in obj]
    if missing:
        raise RecordError(f"{path}: {kind} record without field(s) {missing}; {_remedy(kind, path)}.")
    return dict(obj)


def write(kind: str, path: str | os.PathLike, body: Mapping[str, Any]) -> dict:
    """Write a JSON record atomically (temporary file, then rename); returns what was written."""
    obj = stamp(kind, body)
    missing = [f for f in FIELDS[kind] if f not in obj]
    if missing:
        raise ValueError(f"{path}: a {kind} record needs field(s) {missing}")
    write_json(path, obj)
    return obj


def read(kind: str, path: str | os.PathLike) -> dict:
    """Read and check a JSON record."""
    try:
        obj = read_json(path)
    except FileNotFoundError:
        raise RecordError(f"{path}: no such {kind} record; run `snakemake {path}` (rule {RULES[kind]})") from None
    except ValueError as exc:
        raise RecordError(f"{path}: not a JSON {kind} record ({exc}); {_remedy(kind, path)}") from None
    return check(kind, obj, path)


# --------------------------------------------------------------------------- builders
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
