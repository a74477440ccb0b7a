"""The scheduler's model of each job: the memory and wall time a rule declares (``resources:
mem_mb, runtime``) from the size of the data it reads, so that a local run under ``--resources
mem_mb=N`` and a SLURM submission schedule jobs by what they hold. No Snakemake import."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping

# Memory: the embedding-reading jobs hold one float32 copy of the corpus matrix plus
# what the method or index needs (peak RSS per stage measured with benchmarks/scale.py, at most
# 2.5x the matrix); text jobs hold the JSONL as Python objects. Runtime: generous wall-clock
# bounds in minutes for a cluster queue. Each retry (`--retries`) asks for 50% more of both.
JOB_RESOURCES = {
    # kind: (fixed MB, MB per MB of text read, MB per MB of matrices read, fixed minutes, minutes
    #        per GB read). Text: JSONL/TSV/JSON inputs; matrices: embedding files and checkpoints.
    "text": (1500, 8.0, 2.0, 15, 60),      # stage_beir, make_splits, triplets (hard negatives: + matrix)
    "embed": (1500, 8.0, 1.0, 60, 600),    # + the backbone's own memory (backbones.<name>.mem_mb)
    "train": (2500, 3.0, 1.5, 60, 240),    # one float32 copy of the matrices, triplets as arrays
    "evaluate": (2000, 3.0, 2.5, 30, 60),  # + the compressed copy, the index, a query batch
    "measure": (2000, 3.0, 3.5, 60, 120),  # efficiency, frontier: several indexes of one corpus
    "small": (1000, 2.0, 0.0, 10, 10),     # tables, selection, headline copies, downloads
}
# weights + activations, default; vectors: files ingested in row chunks, no model
BACKBONE_MEM_MB = {"sentence_transformers": 2000, "llm2vec": 24000, "vectors": 500}
MATRIX_SUFFIXES = (".h5", ".hdf5", ".pt", ".npy", ".parquet", ".pq")


def _retry_growth(attempt: int) -> float:
    """The factor of a job's resources on its ``attempt``-th try: 50% more per retry."""
    return 1.0 + 0.5 * (max(int(attempt), 1) - 1)


def job_resources(kind: str, text_mb: float, matrix_mb: float = 0.0, backbone: Mapping | None = None,
                  attempt: int = 1) -> dict:
    """``{"mem_mb": ..., "runtime": ...}`` for a job of ``kind`` (see :data:`JOB_RESOURCES`)
    reading ``text_mb`` MB of text and ``matrix_mb`` MB of matrices; ``backbone`` (its config
    entry) for embedding jobs. Each retry (``attempt`` > 1) asks for 50% more."""
    if kind not in JOB_RESOURCES:
        raise ValueError(f"unknown job kind {kind!r}; known: {sorted(JOB_RESOURCES)}")
    fixed, per_text, per_matrix, minutes, per_gb = JOB_RESOURCES[kind]
    if backbone is not None:
        fixed += backbone.get("mem_mb") or BACKBONE_MEM_MB[backbone["family"]]
    grow = _retry_growth(attempt)
    return {"mem_mb": math.ceil((fixed + per_text * text_mb + per_matrix * matrix_mb) * grow),
            "runtime": math.ceil((minutes + per_gb * (text_mb + matrix_mb) / 1024) * grow)}


# Compress jobs (rules/compress.smk, dive_core.compress): memory is bounded by the chunking, not the file.
COMPRESS_INDEX_MEM_MB = 1500  # rule compress_index: the codes streamed from the file into the index, no model


def compress_resources(input_mb: float, model_mb: float, shards: int = 1, attempt: int = 1) -> dict:
    """``{"mem_mb", "runtime"}`` of a compress job: memory is bounded by the chunking (the
    interpreter, torch, the compressor and one chunk; not the file), wall time grows with the input
    one job reads (minutes: 15 + 10 per GB of input, a conservative CPU rate). Each retry asks
    for 50% more."""
    grow = _retry_growth(attempt)
    return {"mem_mb": math.ceil((2000 + 4 * model_mb) * grow),
            "runtime": math.ceil((15 + 10 * input_mb / 1024 / max(1, int(shards))) * grow)}


def compress_index_resources(input_mb: float, attempt: int = 1) -> dict:
    """``{"mem_mb", "runtime"}`` of rule compress_index over a compressed file of ``input_mb`` MB:
    :data:`COMPRESS_INDEX_MEM_MB` (not grown on a retry), and the runtime of a one-job compress of
    as much input."""
    return {"mem_mb": COMPRESS_INDEX_MEM_MB, "runtime": compress_resources(input_mb, 0, 1, attempt)["runtime"]}


def data_mb(paths, staged_manifest: str = "source.json") -> tuple[float, float] | None:
    """``(text MB, matrix MB)`` that a job reads: its input files, where a staged dataset's
    ``source.json`` stands for every file of its folder. None if an input does not exist yet."""
    sizes = {"text": 0, "matrix": 0}

    def add(f: Path) -> None:
        sizes["matrix" if f.suffix in MATRIX_SUFFIXES else "text"] += f.stat().st_size

    for p in map(Path, paths):
        if not p.exists():
            return None
        if p.name == staged_manifest or p.is_dir():
            for f in (p.parent if p.name == staged_manifest else p).rglob("*"):
                if f.is_file():
                    add(f)
        else:
            add(p)
    return sizes["text"] / 2**20, sizes["matrix"] / 2**20


def synthetic_mb(efficiency: Mapping) -> float:
    """MB that rule efficiency_synthetic holds without reading any input: its largest synthetic
    corpus matrix (float32) plus the bandwidth probe's array (config ``efficiency``)."""
    syn = efficiency["synthetic"]
    largest = max(max(syn["docs"]) * max(syn["dims"]), syn["large_docs"] * max(syn["large_dims"] or [0]))
    return largest * 4 / 2**20 + efficiency["bandwidth_mb"]


# ---- GPUs: whole ones, and shares of one for trainings -----------------------------------------
SHARED_GPU_RULES = ("train", "evaluate")  # jobs that share one GPU, trainings_per_gpu at a time (an
# evaluation searches one corpus on it: a small product and top-k, far below a training's use)


def gpu_resources(gpus: int, trainings_per_gpu: int, shared: bool = False) -> dict:
    """The GPU resources of a job that asks for ``gpus`` GPUs (the config's ``gpu:`` count).

    ``gpu``: whole GPUs (SLURM ``--gpus``; a local ``--resources gpu=N`` counts them).
    ``gpu_share``: a GPU holds ``trainings_per_gpu`` shares (a local ``--resources gpu=N`` holds N
    times that many, registered by the Snakefile); a whole-GPU job takes every share of its GPUs.
    ``gres``: what a shared job asks SLURM for, ``gpu:1``, as a string: Snakemake sums the integer
    resources of a group job's parallel members but passes a string once, so ``trainings_per_gpu``
    training jobs grouped into one SLURM job (``--groups train=gpu_train --group-components
    gpu_train=N``) share one GPU allocation.

    A shared job (``shared``, one GPU asked for, ``trainings_per_gpu`` > 1) asks for ``gpu=0``,
    one share and ``gres="gpu:1"``; any other job for its whole GPUs, all their shares, no gres.
    Measured on an H100: 8 DIVE trainings at once gave 5.4x the throughput of one
    (docs/performance.md)."""
    per = int(trainings_per_gpu)
    if per < 1:
        raise ValueError(f"trainings_per_gpu must be >= 1, got {trainings_per_gpu!r}")
    if shared and gpus == 1 and per > 1:
        return {"gpu": 0, "gpu_share": 1, "gres": "gpu:1"}
    return {"gpu": int(gpus), "gpu_share": int(gpus) * per, "gres": ""}


def gpu_share_capacity(gpus: int, trainings_per_gpu: int) -> int:
    """The shares that ``gpus`` GPUs hold (a local run's ``--resources gpu=N``)."""
    return int(gpus) * int(trainings_per_gpu)


def gres_gpus(gres: str) -> int:
    """GPUs in a SLURM gres string: ``gpu:2``, ``gpu:a100:2`` (2), ``gpu`` (1), ``shard:1`` (0)."""
    total = 0
    for item in filter(None, (g.strip() for g in (gres or "").split(","))):
        parts = item.split("(")[0].split(":")  # "gpu:h100:4(S:0-1)": socket binding dropped
        if parts[0] == "gpu":
            total += int(parts[-1]) if len(parts) > 1 and parts[-1].isdigit() else 1
    return total


# ---- will the cluster ever run it? ------------------------------------------------------------
SINFO_FORMAT = "%N|%P|%c|%m|%G"  # node, partition (default marked *), CPUs, memory MB, gres


def parse_sinfo(text: str) -> list[dict]:
    """Nodes from ``sinfo -h -N -o '%N|%P|%c|%m|%G'``: name, partition, default (bool), cpus,
    mem_mb and gpus (the count of ``gpu`` generic resources)."""
    import re

    nodes = []
    for line in text.splitlines():
        if not line.strip():
            continue
        name, part, cpus, mem, gres = (line.split("|") + [""] * 5)[:5]
        gpus = gres_gpus(gres)
        nodes.append({"node": name, "partition": part.rstrip("*"), "default": part.endswith("*"),
                      "cpus": int(re.sub(r"\D", "", cpus) or 0), "mem_mb": int(re.sub(r"\D", "", mem) or 0),
                      "gpus": gpus})
    return nodes


def unschedulable(jobs, nodes: list[dict]) -> list[str]:
    """Why each job of ``jobs`` fits no node of its partition (none: every job fits).

    A job is ``{"job": name, "partition": str | None (the default), "cpus": int, "gpus": int,
    "mem_mb": int | None (not known yet)}``. A cluster leaves such a job pending for ever (or
    refuses it, depending on its EnforcePartLimits), so the workflow names it before submitting."""
    problems = []
    for job in jobs:
        part = job.get("partition") or next((n["partition"] for n in nodes if n["default"]), None)
        pool = [n for n in nodes if n["partition"] == part]
        if not pool:
            problems.append(f"{job['job']}: partition {part!r} has no nodes (sinfo lists "
                            f"{sorted({n['partition'] for n in nodes})})")
            continue
        want = {"cpus": job["cpus"], "gpus": job["gpus"], "mem_mb": job.get("mem_mb")}
        if any(all(v is None or n[k] >= v for k, v in want.items()) for n in pool):
            continue
        most = {k: max(n[k] for n in pool) for k in want}
        unit = {"cpus": "CPU(s)", "gpus": "GPU(s)", "mem_mb": "MB memory"}
        short = ", ".join(f"{v} {unit[k]}" for k, v in want.items() if v is not None and v > most[k])
        if not short:  # each fits somewhere, never all on one node
            asked = ", ".join(f"{v} {unit[k]}" for k, v in want.items() if v)
            problems.append(f"{job['job']}: asks for {asked} together, which no single node of partition "
                            f"{part!r} has")
            continue
        problems.append(f"{job['job']}: asks for {short}; the nodes of partition {part!r} have at most "
                        + ", ".join(f"{most[k]} {unit[k]}" for k in want))
    return problems


class ClusterFitError(RuntimeError):
    """Jobs that no node of the cluster can run; the message names each and what would fit."""


def job_requests(jobs) -> list[dict]:
    """What each rule's first cluster job asks for (Snakemake jobs, read by attribute: ``is_local``,
    ``rule.name``, ``resources``, ``threads``, ``output``), as :func:`unschedulable` reads it."""

    def number(v):
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    requests = {}
    for job in jobs:
        if job.is_local or job.rule.name in requests:
            continue
        res = job.resources
        requests[job.rule.name] = {
            "job": f"rule {job.rule.name} ({', '.join(map(str, job.output))})",
            "partition": res.get("slurm_partition"),
            "cpus": number(res.get("cpus_per_task")) or job.threads,
            "gpus": max(number(res.get("gpu")) or 0, gres_gpus(res.get("gres") or "")),
            "mem_mb": number(res.get("mem_mb")),
        }
    return list(requests.values())


def check_cluster_fit(jobs, sinfo=None) -> None:
    """Refuse to submit jobs that no node of their partition can run (they would wait for ever):
    one line per rule, naming what it asks for and what the cluster has. ``sinfo``: a function
    returning ``sinfo -h -N -o SINFO_FORMAT``'s output (default: run it)."""
    import subprocess

    def run_sinfo() -> str:
        return subprocess.run(["sinfo", "-h", "-N", "-o", SINFO_FORMAT], capture_output=True, text=True,
                              check=True).stdout

    try:
        text = (sinfo or run_sinfo)()
    except (OSError, subprocess.CalledProcessError) as exc:
        raise ClusterFitError(f"cannot list the cluster's nodes with sinfo: {exc}") from exc
    problems = unschedulable(job_requests(jobs), parse_sinfo(text))
    if problems:
        raise ClusterFitError(
            "these jobs fit no node of the cluster and would wait for ever:\n  " + "\n  ".join(problems)
            + "\nOn a CPU-only cluster: --config gpu=0. Fewer CPUs: --config threads=N (or "
            "--set-threads RULE=N). A partition: --default-resources slurm_partition=NAME.")
