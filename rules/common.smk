# Shared helpers: semantic config checks (dive_core.config), path patterns, input functions.
import os
import sys

sys.path.insert(0, workflow.basedir)
# workflow scripts (and cluster jobs) import dive_core from this checkout
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (workflow.basedir, os.environ.get("PYTHONPATH")) if p
)

from dive_core import config as dcfg

REGISTRY = dcfg.load_registry(os.path.join(workflow.basedir, config["dataset_registry"]))
try:
    import torch  # noqa: F401  (deep checks resolve method hyperparameters)

    _DEEP = True
except ImportError:  # e.g. a bare snakemake env driving conda envs: the rules check again
    _DEEP = False
dcfg.check(config, REGISTRY, deep=_DEEP)
LOCAL_BEIR = dcfg.local_beir_dir(config)


wildcard_constraints:
    dataset=r"[A-Za-z0-9][A-Za-z0-9_.+-]*",
    backbone=r"[A-Za-z0-9][A-Za-z0-9_.+-]*",
    method=r"[A-Za-z0-9][A-Za-z0-9_.+-]*",
    zipname=r"[A-Za-z0-9][A-Za-z0-9_.+-]*",
    k=r"\d+",
    seed=r"\d+",
    stage=r"select|final",
    negatives=r"random|hard",
    experiment=r"[A-Za-z0-9][A-Za-z0-9_.+-]*",


# ---- artifact paths (documented in README.md) ---------------------------------------------
SOURCE = "data/beir/{dataset}/source.json"
ZIP = "data/beir/_zips/{zipname}.zip"
SPLITS = "results/{dataset}/splits.json"
EMBEDDINGS = "results/{dataset}/{backbone}/embeddings.h5"
TRIPLETS = "results/{dataset}/{backbone}/triplets/{stage}-{negatives}.tsv"
RUN_DIR = "results/{dataset}/{backbone}/{method}/k{k}/{stage}/seed{seed}"
CHECKPOINT = RUN_DIR + "/model.pt"
TRAIN_LOG = RUN_DIR + "/train_log.tsv"
EVAL_JSON = RUN_DIR + "/eval.json"
PER_QUERY = RUN_DIR + "/per_query.tsv"
HEADLINE = "results/{dataset}/{method}/seed{seed}.json"
TABLE = "results/tables/{experiment}.md"
LOGS = "logs/{rule}/{name}.log"


def registry_entry(dataset):
    if dataset not in REGISTRY:
        raise ValueError(f"dataset {dataset!r} is not in {config['dataset_registry']}")
    return REGISTRY[dataset]


def method_entry(method):
    if method not in config["methods"]:
        raise ValueError(f"method {method!r} is not defined under methods: in the config")
    return config["methods"][method]


def needs_triplets(method):
    """Supervised methods train on the shared triplets (unknown: assume they do)."""
    try:
        from dive_core.methods import method_class

        return method_class(dcfg.method_type(config, method)).supervised
    except ImportError:
        return True


def headline_eval(wildcards):
    """The canonical evaluation behind results/{dataset}/{method}/seed{seed}.json: default
    backbone, final stage (test queries), primary dimension (full dimension for frozen)."""
    method_entry(wildcards.method)
    return EVAL_JSON.format(
        dataset=wildcards.dataset,
        backbone=config["backbone"],
        method=wildcards.method,
        k=dcfg.method_k(config, config["backbone"], wildcards.method, "primary"),
        stage="final",
        seed=wildcards.seed,
    )


def run_artifacts(dataset, backbone, method, k, stage, seed):
    """Every artifact behind one evaluation, from the staged data to the per-query TSV."""
    w = dict(dataset=dataset, backbone=backbone, method=method, k=k, stage=stage, seed=seed)
    files = [SOURCE.format(**w), SPLITS.format(**w), EMBEDDINGS.format(**w)]
    if needs_triplets(method):
        tsv = TRIPLETS.format(negatives=dcfg.method_negatives(config, method), **w)
        files += [tsv, tsv.replace(".tsv", ".json")]
    files += [p.format(**w) for p in (CHECKPOINT, TRAIN_LOG, EVAL_JSON, PER_QUERY)]
    return files


def all_targets():
    """Every enabled experiment's table, the headline copies of `main`, and every intermediate
    artifact behind them: Snakemake ignores a deleted intermediate file while its downstream
    targets exist, so naming them all here makes `all` rebuild a deleted artifact and
    everything after it."""
    targets = []
    for name in dcfg.enabled_experiments(config):
        for run in dcfg.experiment_runs(config, name):
            targets += run_artifacts(**run)
            if name == "main":
                targets.append(HEADLINE.format(**run))
        targets.append(TABLE.format(experiment=name))
    return list(dict.fromkeys(targets))
