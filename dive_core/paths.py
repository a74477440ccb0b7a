"""Every file that jobs pass to each other, named once: the artifact path templates (relative to
the working directory), the grammar of their wildcards, and the names of an embedding's shard
parts. The rules' inputs and outputs, :class:`dive_core.plan.Plan`'s input functions and the
tests read these names; the record formats of the files themselves are in
:mod:`dive_core.records`. No Snakemake, no torch.
"""

from __future__ import annotations

import re

# ---- the wildcard grammar (rules/common.smk hands it to Snakemake's wildcard_constraints) ------
NAME = r"[A-Za-z0-9][A-Za-z0-9_.+-]*"  # a dataset, backbone, method, zip or experiment name
QUERIES_PART = "queries"
PART = rf"{QUERIES_PART}|corpus\d+of\d+"  # one job of a sharded embedding

# ---- artifact paths -------------------------------------------------------------------------
SOURCE = "data/beir/{dataset}/source.json"
ZIP = "data/beir/_zips/{zipname}.zip"
MODEL_DIR = "data/models/{backbone}"  # a backbone with `source:`: its pinned model folder (rule fetch_model)
SPLITS = "results/{dataset}/splits.json"
ARRIVAL = "results/{dataset}/arrival.json"  # the documents that arrive after training (the arrival study)
EMBEDDINGS = "results/{dataset}/{backbone}/embeddings.h5"
EMBED_PART = "results/{dataset}/{backbone}/embed_parts/{part}.h5"  # temporary: one job of a sharded embed
TRIPLETS = "results/{dataset}/{backbone}/triplets/{stage}-{negatives}.tsv"
TRIPLETS_META = "results/{dataset}/{backbone}/triplets/{stage}-{negatives}.json"
RUN_DIR = "results/{dataset}/{backbone}/{method}/k{k}/{stage}/seed{seed}"
CHECKPOINT = RUN_DIR + "/model.pt"
TRAIN_LOG = RUN_DIR + "/train_log.tsv"
EVAL_JSON = RUN_DIR + "/eval.json"
PER_QUERY = RUN_DIR + "/per_query.tsv"
EXPORT = RUN_DIR + "/export"
HEADLINE = "results/{dataset}/{method}/seed{seed}.json"  # the default backbone's held-out result
SELECTION = "results/selection/{backbone}/{study}.json"  # each backbone selects for itself
EFFICIENCY = "results/efficiency/{dataset}/{backbone}.json"
SYNTHETIC = "results/efficiency/synthetic.json"
FRONTIER = "results/frontier/{dataset}/{backbone}.json"
# the frontier's rows of the methods it repeats at another seed (experiments.frontier.method_seeds)
FRONTIER_SEED = "results/frontier/{dataset}/{backbone}/seed{seed}.json"
# every frontier code on validation queries, select-stage maps (trained on train queries) at the frontier's
# first seed: what the frontier's verdict and the budget study pick their codes on (never the test queries)
FRONTIER_VALIDATION = "results/frontier/{dataset}/{backbone}/validation.json"
# a budget study's pick at one budget, written out: the corpus through the picked map (dive-compress's
# output), the FAISS index of the picked code, and its card (the pick, its scores and tests, the machine)
BUDGET_DIR = "results/budget/{experiment}/{dataset}/{backbone}/{budget}B"
BUDGET_VECTORS = BUDGET_DIR + "/corpus.h5"
BUDGET_INDEX = BUDGET_DIR + "/index.faiss"
BUDGET_CARD = BUDGET_DIR + "/card.json"
# an arrival study's index quantizers (config experiments.<name>.codes): codebooks fitted on the known documents
ARRIVAL_CODES = "results/arrival_codes/{experiment}/{dataset}/{backbone}.json"
# the same codes of the select stage's arrival-fitted maps on the validation queries: what an arrival
# budget study (experiments.<name>.arrival) picks on
ARRIVAL_CODES_VALIDATION = "results/arrival_codes/{experiment}/{dataset}/{backbone}/validation.json"
TABLE = "results/tables/{experiment}.md"
TABLE_TSV = "results/tables/{experiment}.tsv"
RUNS_TSV = "results/tables/{experiment}_runs.tsv"
FIGURE = "results/figures/{experiment}.png"
STUDY_JSON = {"efficiency": EFFICIENCY, "frontier": FRONTIER, "budget": FRONTIER}  # the studies over their own records

# every file of one evaluated run, from the checkpoint to the per-query TSV
RUN_FILES = (CHECKPOINT, TRAIN_LOG, EVAL_JSON, PER_QUERY)


def model_dir(backbone: str) -> str:
    return MODEL_DIR.format(backbone=backbone)


def part_name(shard: int | None, shards: int) -> str:
    """The name of one part of a sharded embedding: ``queries``, or ``corpus{i}of{n}``."""
    return QUERIES_PART if shard is None else f"corpus{shard}of{shards}"


def parse_part(name: str) -> tuple[int | None, int | None]:
    """``(shard, shards)`` of a part name; ``(None, None)`` for the queries part."""
    if not re.fullmatch(PART, name):
        raise ValueError(f"embedding part {name!r}: expected 'queries' or 'corpus<i>of<n>'")
    if name == QUERIES_PART:
        return None, None
    shard, shards = map(int, re.findall(r"\d+", name))
    return shard, shards


def part_names(shards: int) -> list[str]:
    """The parts a backbone with ``shards`` > 1 is embedded in: the corpus ranges, then the queries."""
    return [part_name(i, shards) for i in range(1, shards + 1)] + [part_name(None, shards)]


# ---- compressed vector files (dive_core.compress, rules/compress.smk) --------------------------
# `compress:` entry <name> -> its input's vectors through a trained compressor, in the input's format
# (a .npy comes with <name>.ids.txt and <name>.meta.json beside it)
COMPRESSED_STEM = "results/compressed/{name}"  # then the extension(s) of each file
COMPRESSED = COMPRESSED_STEM + ".{ext}"
COMPRESSED_EXT = r"parquet|pq|h5|hdf5"  # {ext} of a one-file output (a .npy has its own rule: 3 files)
COMPRESSED_NPY_EXTS = (".npy", ".ids.txt", ".meta.json")  # a .npy output: matrix, ids, metadata (dive_core.vectors)
COMPRESSED_INDEX = COMPRESSED_STEM + ".faiss"  # its FAISS index (the entry's `faiss: true`)
COMPRESS_PART = COMPRESSED_STEM + ".parts/{shard}"  # temporary: one row range of a sharded entry
COMPRESS_SHARD = r"\d+of\d+"  # the {shard} wildcard: row range i of n, i = 1..n

# ---- every job's log (rule name -> template; its benchmark table beside it: bench_path) ---------
# rule compress_npy is rule compress with {ext} = npy
LOGS = {
    "download_beir": "logs/download_beir/{zipname}.log",
    "stage_beir": "logs/stage_beir/{dataset}.log",
    "efficiency": "logs/efficiency/{dataset}/{backbone}.log",
    "efficiency_synthetic": "logs/efficiency/synthetic.log",
    "frontier": "logs/frontier/{dataset}/{backbone}.log",
    "frontier_seed": "logs/frontier/{dataset}/{backbone}/seed{seed}.log",
    "frontier_validation": "logs/frontier/{dataset}/{backbone}/validation.log",
    "budget_index": "logs/budget_index/{experiment}/{dataset}/{backbone}/{budget}B.log",
    "arrival_codes": "logs/arrival_codes/{experiment}/{dataset}/{backbone}.log",
    "arrival_codes_validation": "logs/arrival_codes/{experiment}/{dataset}/{backbone}/validation.log",
    "fetch_model": "logs/fetch_model/{backbone}.log",
    "python_env": "logs/python_env/{env}.log",
    "embed_part": "logs/embed_part/{dataset}/{backbone}/{part}.log",
    "embed": "logs/embed/{dataset}/{backbone}.log",
    "evaluate": "logs/evaluate/{dataset}/{backbone}/{method}/k{k}/{stage}/seed{seed}.log",
    "headline_result": "logs/headline_result/{dataset}/{method}/seed{seed}.log",
    "export": "logs/export/{dataset}/{backbone}/{method}/k{k}/{stage}/seed{seed}.log",
    "table": "logs/table/{experiment}.log",
    "select": "logs/select/{backbone}/{study}.log",
    "make_splits": "logs/make_splits/{dataset}.log",
    "make_arrival": "logs/make_arrival/{dataset}.log",
    "train": "logs/train/{dataset}/{backbone}/{method}/k{k}/{stage}/seed{seed}.log",
    "triplets": "logs/triplets/{dataset}/{backbone}/{stage}-{negatives}.log",
    "compress_part": "logs/compress_part/{name}/{shard}.log",
    "compress": "logs/compress/{name}.{ext}.log",
    "compress_npy": "logs/compress/{name}.npy.log",
    "compress_index": "logs/compress_index/{name}.log",
}


def bench_path(log: str) -> str:
    """A job's benchmark table beside its log: ``<x>.log`` -> ``<x>.bench.tsv``."""
    if not log.endswith(".log"):
        raise ValueError(f"{log}: not a log path (<x>.log)")
    return log[:-len(".log")] + ".bench.tsv"


def compressed_path(name: str, input_path: str) -> str:
    """The output of ``compress:`` entry ``name``: ``results/compressed/<name><input's extension>``."""
    ext = input_path.rsplit(".", 1)[-1].lower() if "." in input_path.rsplit("/", 1)[-1] else ""
    return COMPRESSED.format(name=name, ext=ext)


def compress_part_names(shards: int) -> list[str]:
    """The parts a ``compress:`` entry with ``shards`` > 1 is computed in: ``1of<n>`` .. ``<n>of<n>``."""
    return [f"{i}of{shards}" for i in range(1, shards + 1)]
