# DIVE pipeline: supervised compression of frozen text embeddings, reproduced against its
# baselines on BEIR. This file only loads and validates the configuration, includes the
# stages and defines `all`; see docs/layout.md for the artifact layout.
import copy
import os
import sys

from snakemake.utils import min_version, validate

# The Snakefile imports dive_core from this checkout; workflow scripts (local, conda or cluster
# jobs) find it through workflow_scripts/_dive_path.py, which each of them imports first.
sys.path.insert(0, workflow.basedir)

from dive_core import config as dcfg
from dive_core import plan, resources

min_version("9.0")


# Relative to this file, so that `--directory elsewhere` still finds the defaults; any
# --configfile / --config given on the command line is merged on top.
DEFAULT_CONFIG = os.path.join(workflow.basedir, "config", "config.yaml")
# Read once here, so that a YAML error in it names the file and line (Snakemake's own parse below
# names neither); the defaults are read-only below (key order, per-rule shorthands).
DEFAULTS = dcfg.load_yaml(DEFAULT_CONFIG)


configfile: DEFAULT_CONFIG


# --config values below the top level arrive as text: typed by the schema (in a copy; Snakemake's
# own `config` is never changed), `--config gpu=0` / `threads=N` stand for every rule
# (dive_core.config.command_line_values); then validated, and resolved into the one read-only plan
# that every rule and input function reads (dive_core.plan.resolve: generated method variants,
# semantic checks, the defaults file's key order).
SCHEMA = os.path.join(workflow.basedir, "config", "schema", "config.schema.yaml")
CONFIG = dcfg.command_line_values(copy.deepcopy(config), dcfg.load_yaml(SCHEMA), DEFAULTS)


validate(CONFIG, SCHEMA)


PLAN = plan.resolve(
    CONFIG,
    dcfg.load_registry(os.path.join(workflow.basedir, CONFIG["dataset_registry"])),
    defaults=DEFAULTS,
    registry_file=CONFIG["dataset_registry"],
)


# A local `--resources gpu=N` holds N x trainings_per_gpu GPU shares: train jobs take one share each,
# every other GPU job a whole GPU's (dive_core.resources.gpu_resources). Only the submitting process
# registers it; a cluster job's own Snakemake gets its group's resources.
if workflow.is_main_process:
    _gpus = workflow.global_resources.get("gpu").value
    if _gpus is not None and workflow.global_resources.get("gpu_share").value is None:
        workflow.register_resource(
            "gpu_share",
            resources.gpu_share_capacity(_gpus, PLAN.setting("trainings_per_gpu")),
        )


report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/data.smk"
include: "rules/splits.smk"
include: "rules/embeddings.smk"
include: "rules/triplets.smk"
include: "rules/train.smk"
include: "rules/evaluate.smk"
include: "rules/select.smk"
include: "rules/efficiency.smk"
include: "rules/report.smk"
include: "rules/export.smk"
include: "rules/compress.smk"


# Seconds of bookkeeping each: run them in the submitting process, never as cluster jobs.
localrules:
    all,
    fetch_model,
    python_env,
    table,
    headline_result,
    select,
    compress_all,


onstart:
    # a SLURM run names the jobs no node can ever run, instead of leaving them pending
    if workflow.executor_plugin is not None and workflow.executor_plugin.name == "slurm":
        check_cluster_fit(workflow.dag.needrun_jobs())
    # a local run starts its torch jobs from one warm process (dive_core.job_server)
    start_job_server(log)


onsuccess:
    stop_job_server()


onerror:
    stop_job_server()


rule all:
    default_target: True
    input:
        PLAN.targets(),
