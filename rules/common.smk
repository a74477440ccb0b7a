# Shared helpers: semantic config checks (dive_core.config), path patterns, input functions.
import os
import sys

# The Snakefile imports dive_core from this checkout; workflow scripts (local, conda or cluster
# jobs) find it through workflow_scripts/_dive_path.py, which each of them imports first.
sys.path.insert(0, workflow.basedir)

from dive_core import config as dcfg
from dive_core import studies

# the defaults file's key order, however the config was composed: same settings, same params
_ORDERED = dcfg.canonical_order(config, dcfg.load_yaml(DEFAULT_CONFIG))
config.clear()
config.update(_ORDERED)
REGISTRY = dcfg.load_registry(os.path.join(workflow.basedir, config["dataset_registry"]))
dcfg.expand(config)  # generated variants: selection candidates, head counts, document-disjoint runs
try:
    import torch  # noqa: F401  (deep checks resolve method hyperparameters)

    _DEEP = True
except ImportError:  # e.g. a bare snakemake env driving conda envs: the rules check again
    _DEEP = False
dcfg.check(config, REGISTRY, deep=_DEEP)
dcfg.check_default_backbone(config)  # never overwrite another backbone's headline results and tables
LOCAL_BEIR = dcfg.local_beir_dir(config)


wildcard_constraints:
    dataset=r"[A-Za-z0-9][A-Za-z0-9_.+-]*",
    backbone=r"[A-Za-z0-9][A-Za-z0-9_.+-]*",
    method=r"[A-Za-z0-9][A-Za-z0-9_.+-]*",
    zipname=r"[A-Za-z0-9][A-Za-z0-9_.+-]*",
    k=r"\d+",
    seed=r"\d+",
    stage=r"select|final",
    negatives=r"(random|hard)(-docdisjoint)?",
    experiment=r"[A-Za-z0-9][A-Za-z0-9_.+-]*",


# ---- artifact paths (documented in README.md) ---------------------------------------------
SOURCE = "data/beir/{dataset}/source.json"
ZIP = "data/beir/_zips/{zipname}.zip"
SPLITS = "results/{dataset}/splits.json"
EMBEDDINGS = "results/{dataset}/{backbone}/embeddings.h5"
TRIPLETS = "results/{dataset}/{backbone}/triplets/{stage}-{negatives}.tsv"
CHECKPOINT = "results/{dataset}/{backbone}/{method}/k{k}/{stage}/seed{seed}/model.pt"
TRAIN_LOG = "results/{dataset}/{backbone}/{method}/k{k}/{stage}/seed{seed}/train_log.tsv"
EVAL_JSON = "results/{dataset}/{backbone}/{method}/k{k}/{stage}/seed{seed}/eval.json"
PER_QUERY = "results/{dataset}/{backbone}/{method}/k{k}/{stage}/seed{seed}/per_query.tsv"
EXPORT = "results/{dataset}/{backbone}/{method}/k{k}/{stage}/seed{seed}/export"
HEADLINE = "results/{dataset}/{method}/seed{seed}.json"
TABLE = "results/tables/{experiment}.md"
SELECTION = dcfg.SELECTION_PATH
LOGS = "logs/{rule}/{name}.log"


# ---- job resources (every rule) ------------------------------------------------------------
def job_resource(kind, what, extra_mb=0):
    """A `resources:` callable: `what` (mem_mb or runtime) of a `kind` job from the size of what
    it reads (dive_core.config.job_resources). <TBD> while an input does not exist yet: the
    scheduler evaluates it again once the job is ready."""

    def resource(wildcards, input, attempt):
        from snakemake.common.tbdstring import TBDString

        sizes = dcfg.data_mb(input)
        if sizes is None:
            return TBDString()
        bb = backbone_spec(wildcards.backbone) if kind == "embed" else None
        return dcfg.job_resources(kind, sizes[0], sizes[1] + extra_mb, bb, attempt)[what]

    return resource


def synthetic_mb():
    """MB of the largest synthetic corpus matrix that efficiency_synthetic holds, plus the
    bandwidth probe's array (rule efficiency_synthetic reads no input)."""
    syn = config["efficiency"]["synthetic"]
    largest = max(max(syn["docs"]) * max(syn["dims"]), syn["large_docs"] * max(syn["large_dims"] or [0]))
    return largest * 4 / 2**20 + config["efficiency"]["bandwidth_mb"]


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
        for run in (
            []
            if dcfg.experiment(config, name).get("study") in STUDY_OUTPUTS
            else dcfg.experiment_runs(config, name)
        ):
            targets += run_artifacts(**run)
            if name == "main":
                targets.append(HEADLINE.format(**run))
        targets.append(TABLE.format(experiment=name))
    targets.append(SELECTION.format(study="dive_config"))
    return list(dict.fromkeys(targets))


# ---- data (rules/data.smk) --------------------------------------------------------------
def zip_entry(zipname):
    for name, entry in REGISTRY.items():
        if entry.get("zip") == zipname:
            return entry
    raise ValueError(f"no dataset in {config['dataset_registry']} uses zip {zipname!r}")


def staging_input(wildcards):
    entry = registry_entry(wildcards.dataset)
    if LOCAL_BEIR or entry.get("local_only"):
        return []  # read from the local BEIR directory (config beir_data_dir / $BEIR_DATA_DIR)
    return ZIP.format(zipname=entry["zip"])


# ---- embeddings (rules/embeddings.smk) --------------------------------------------------
def backbone_spec(backbone, omit=()):
    """The backbone's config entry, without the keys in `omit` (scheduling-only keys such as
    mem_mb stay out of job parameters, so changing them reruns nothing)."""
    if backbone not in config["backbones"]:
        raise ValueError(f"backbone {backbone!r} is not defined under backbones: in the config")
    return {k: v for k, v in config["backbones"][backbone].items() if k not in omit}


def query_instruction(wildcards):
    """Only instruction-following backbones get (and depend on) the dataset's instruction."""
    if backbone_spec(wildcards.backbone)["family"] != "llm2vec":
        return ""
    return registry_entry(wildcards.dataset).get("instruction", "")


# ---- triplets (rules/triplets.smk) ------------------------------------------------------
def triplet_inputs(wildcards):
    inputs = {"source": SOURCE.format(**wildcards), "splits": SPLITS.format(**wildcards)}
    if wildcards.negatives.startswith("hard"):  # negatives mined from the frozen top-k of this backbone
        inputs["embeddings"] = EMBEDDINGS.format(**wildcards)
    return inputs


# ---- training (rules/train.smk) ---------------------------------------------------------
def method_params(method):
    """Resolved hyperparameters (config entry + shared training section); resolved again in the
    job when the driving environment cannot import the method implementations."""
    entry = method_entry(method)
    if _DEEP:
        return dcfg.method_hparams(config, method)
    return {"__unresolved__": True, "entry": entry, "training": config["training"]}


def train_inputs(wildcards):
    inputs = {
        "embeddings": EMBEDDINGS.format(**wildcards),
        "splits": SPLITS.format(**wildcards),
    }
    selection = dcfg.selection_input(config, wildcards.method, wildcards.stage)
    if selection:  # hyperparameters picked on validation queries (selected: <study>/<method>)
        inputs["selection"] = selection
    if needs_triplets(wildcards.method):
        tsv = TRIPLETS.format(negatives=dcfg.method_negatives(config, wildcards.method), **wildcards)
        inputs["triplets"] = tsv
        inputs["triplets_meta"] = tsv.replace(".tsv", ".json")
    return inputs


# ---- selection (rules/select.smk) -------------------------------------------------------
def selection_runs(study):
    """The validation (select-stage) runs a selection study reads: its candidates and, for the
    learning-rate audit, DIVE as the reference. Never a final-stage file."""
    sel = dcfg.selection_settings(config)
    methods = [n for cands in dcfg.selection_candidates(config, study).values() for n, _ in cands]
    if study == "lr_audit":
        methods.append("dive")
    bb = config["backbone"]
    return [
        dict(
            dataset=ds,
            backbone=bb,
            method=m,
            k=dcfg.method_k(config, bb, m, "primary"),
            stage="select",
            seed=sel["seed"],
        )
        for ds in sel["datasets"]
        for m in dict.fromkeys(methods)
    ]


def selection_results(wildcards):
    return [EVAL_JSON.format(**run) for run in selection_runs(wildcards.study)]


def dataset_groups(datasets):
    return {ds: registry_entry(ds).get("group", ds) for ds in datasets}


# ---- efficiency and frontier (rules/efficiency.smk) -----------------------------------------
EFFICIENCY = "results/efficiency/{dataset}/{backbone}.json"
SYNTHETIC = "results/efficiency/synthetic.json"
FRONTIER = "results/frontier/{dataset}/{backbone}.json"


def efficiency_dims(wildcards):
    """[(method, k)]: frozen at full dimension, then the configured method's compressed vectors
    at the secondary and the primary dimension."""
    eff = config["efficiency"]
    bb = config["backbones"][wildcards.backbone]
    dims = [("frozen", int(bb["dim"]))]
    for which in ("secondary", "primary"):
        if which in bb["dims"]:
            dims.append((eff["method"], int(bb["dims"][which])))
    return dims


def _checkpoint(wildcards, method, k, seed):
    return CHECKPOINT.format(
        dataset=wildcards.dataset, backbone=wildcards.backbone, method=method, k=k, stage="final", seed=seed
    )


def efficiency_inputs(wildcards):
    seed = config["efficiency"]["seed"]
    return {
        "embeddings": EMBEDDINGS.format(**wildcards),
        "splits": SPLITS.format(**wildcards),
        "checkpoints": [_checkpoint(wildcards, m, k, seed) for m, k in efficiency_dims(wildcards)],
    }


def frontier_runs(wildcards):
    """[(method, k)]: every method of the frontier study at each of its dimensions (frozen: full)."""
    exp = dcfg.experiment(config, "frontier")
    runs = []
    for m in exp["methods"]:
        for which in ("primary", "secondary"):
            k = dcfg.method_k(config, wildcards.backbone, m, which)
            if (m, k) not in runs:
                runs.append((m, k))
    return runs


def frontier_inputs(wildcards):
    seed = dcfg.experiment(config, "frontier")["seeds"][0]
    return {
        "embeddings": EMBEDDINGS.format(**wildcards),
        "splits": SPLITS.format(**wildcards),
        "checkpoints": [_checkpoint(wildcards, m, k, seed) for m, k in frontier_runs(wildcards)],
    }


# ---- report (rules/report.smk) ----------------------------------------------------------
STUDY_OUTPUTS = {"efficiency": EFFICIENCY, "frontier": FRONTIER}  # studies of their own JSONs


def experiment_files(pattern):
    """The study's input files: the runs' result files, or for the efficiency and frontier
    studies their own JSONs (one per dataset and backbone, plus the synthetic scaling)."""

    def files(wildcards):
        exp = dcfg.experiment(config, wildcards.experiment)
        study = exp.get("study", "main")
        if study in STUDY_OUTPUTS:
            if pattern != EVAL_JSON:
                return []
            out = [
                STUDY_OUTPUTS[study].format(dataset=ds, backbone=bb)
                for bb in exp.get("backbones") or [config["backbone"]]
                for ds in exp["datasets"]
            ]
            return out + ([SYNTHETIC] if study == "efficiency" else [])
        return [pattern.format(**run) for run in dcfg.experiment_runs(config, wildcards.experiment)]

    return files


def experiment_selection(wildcards):
    exp = dcfg.experiment(config, wildcards.experiment)
    return [SELECTION.format(study="lr_audit")] if exp.get("study") == "lr_audit" else []


def experiment_title(wildcards):
    exp = dcfg.experiment(config, wildcards.experiment)
    if exp.get("study") in STUDY_OUTPUTS:
        return f"{wildcards.experiment}: {exp.get('description', exp['study'])}"
    if exp.get("study") == "dynamics":  # read from train logs: no query is evaluated
        role = "final-stage training logs" if exp["stage"] == "final" else "select-stage training logs"
    else:
        role = "held-out test queries" if exp["stage"] == "final" else "validation queries"
    backbones = ", ".join(exp.get("backbones") or [config["backbone"]])
    return f"{wildcards.experiment}: {role}, backbone {backbones}, {exp['dim']} dimension" + (
        f" - {exp['description']}" if exp.get("description") else ""
    )


def shown(path, caption, content):
    """An output that `snakemake --report` shows, grouped by experiment, with the caption
    report/{caption}.rst."""
    return report(
        path,
        caption=f"../report/{caption}.rst",
        category="{experiment}",
        labels={"experiment": "{experiment}", "content": content},
    )
