# Wiring only: the plan (PLAN, dive_core.plan.resolve in the Snakefile), the artifact paths
# (dive_core.paths) and the record formats (dive_core.records) handed to Snakemake. Every path,
# input function and lookup is defined and tested in dive_core.
from dive_core import environments, records, resources
from dive_core.paths import (
    ARRIVAL,
    ARRIVAL_CODES,
    ARRIVAL_CODES_VALIDATION,
    CHECKPOINT,
    EFFICIENCY,
    EMBED_PART,
    EMBEDDINGS,
    EVAL_JSON,
    EXPORT,
    FIGURE,
    FRONTIER,
    FRONTIER_SEED,
    FRONTIER_VALIDATION,
    BUDGET_CARD,
    BUDGET_INDEX,
    BUDGET_VECTORS,
    HEADLINE,
    LOGS,
    MODEL_DIR,
    PER_QUERY,
    RUNS_TSV,
    SELECTION,
    SOURCE,
    SPLITS,
    SYNTHETIC,
    TABLE,
    TABLE_TSV,
    TRAIN_LOG,
    TRIPLETS,
    TRIPLETS_META,
    ZIP,
    bench_path,
)


wildcard_constraints:
    **plan.WILDCARDS,


# --sdm conda: each rule's environment file; else (pip) LLM2Vec backbones embed in their own venv
USES_CONDA = any(m.name == "CONDA" for m in workflow.deployment_settings.deployment_method)


# never overwrite another backbone's headline results and tables (their paths carry no backbone)
PLAN.check_default_backbone()


def gpu_resource(rule, what, needs_gpu=None):
    """A `resources:` callable: `what` (gpu, gpu_share or gres) of a job of `rule` asking for the
    config's `gpu:` count of that rule (dive_core.resources.gpu_resources; train jobs share a GPU,
    `trainings_per_gpu` at a time). `needs_gpu(wildcards)`: False where a job runs on the CPU anyway."""

    def resource(wildcards):
        gpus = PLAN.setting("gpu", rule) if needs_gpu is None or needs_gpu(wildcards) else 0
        shared = rule in resources.SHARED_GPU_RULES
        return resources.gpu_resources(gpus, PLAN.setting("trainings_per_gpu"), shared)[what]

    return resource


def faiss_on_gpu(wildcards):
    """The efficiency jobs time FAISS indexes, on a GPU only where FAISS has one (faiss-gpu): with
    pip's faiss-cpu they run on the CPU and leave the GPU to trainings and evaluations."""
    from dive_core import retrieval

    return retrieval.faiss_gpus() > 0


def job_resource(kind, what, extra_mb=0):
    """A `resources:` callable: `what` (mem_mb or runtime) of a `kind` job from the size of what
    it reads (dive_core.resources). <TBD> while an input does not exist yet: the scheduler
    evaluates it again once the job is ready."""

    def resource(wildcards, input, attempt):
        from snakemake.common.tbdstring import TBDString

        sizes = resources.data_mb([p for p in input if not p.startswith(MODEL_DIR.split("{")[0])])
        if sizes is None:
            return TBDString()
        bb = PLAN.backbone(wildcards.backbone).entry if kind == "embed" else None
        return resources.job_resources(kind, sizes[0], sizes[1] + extra_mb, bb, attempt)[what]

    return resource


def compress_resource(what):
    """mem_mb / runtime of a compress job (dive_core.resources.compress_resources: memory bounded by
    the chunking, time from the input's size per shard); <TBD> until the inputs exist."""

    def resource(wildcards, input, attempt):
        from snakemake.common.tbdstring import TBDString

        vectors, model = resources.data_mb(list(input.vectors)), resources.data_mb([input.model])
        if vectors is None or model is None:
            return TBDString()
        shards = int(PLAN.compress_entry(wildcards)["shards"])
        return resources.compress_resources(sum(vectors), sum(model), shards, attempt)[what]

    return resource


def compress_index_resource(what):
    """mem_mb / runtime of rule compress_index (dive_core.resources.compress_index_resources) from
    the size of the compressed file; an input that does not exist yet counts as empty."""

    def resource(wildcards, input, attempt):
        input_mb = sum(resources.data_mb(list(input)) or (0, 0))
        return resources.compress_index_resources(input_mb, attempt)[what]

    return resource


def shown(path, caption, content):
    """An output that `snakemake --report` shows, grouped by experiment, with the caption
    report/{caption}.rst."""
    return report(
        path,
        caption=f"../report/{caption}.rst",
        category="{experiment}",
        labels={"experiment": "{experiment}", "content": content},
    )


# The local run's job server (dive_core.job_server): torch jobs start as forks of one process that has
# imported torch, not as fresh interpreters. Local executor only, without conda, containers or modules
# (their jobs run another interpreter).
JOB_SERVER = {}


def start_job_server(snakemake_log):
    """Onstart: start the job server for a local run; its log beside Snakemake's own."""
    from dive_core import job_server

    if workflow.executor_plugin.name != "local" or workflow.deployment_settings.deployment_method:
        return
    logs = [snakemake_log] if isinstance(snakemake_log, str) else list(snakemake_log or [])
    log = f"{os.path.splitext(logs[0])[0]}.job_server.log" if logs else None
    JOB_SERVER["proc"] = job_server.start(log)


def stop_job_server():
    """Onsuccess and onerror: stop the job server, if one was started."""
    from dive_core import job_server

    if "proc" in JOB_SERVER:
        job_server.stop(JOB_SERVER.pop("proc"))


def check_cluster_fit(jobs):
    """Before a SLURM run: refuse jobs that no node of their partition can run (dive_core.resources)."""
    from snakemake.exceptions import WorkflowError

    try:
        resources.check_cluster_fit(jobs)
    except resources.ClusterFitError as exc:
        raise WorkflowError(str(exc)) from exc


def picked_maps(wc):
    """The maps picked on validation queries (checkpoint frontier_validation) where the job's seed is a
    budget study's: they run again there. None asked for at another seed."""
    if int(wc.seed) not in PLAN.budget_seeds():
        return []
    path = checkpoints.frontier_validation.get(dataset=wc.dataset, backbone=wc.backbone).output[0]
    return PLAN.picked_maps(path)


def budget_pick(wc):
    """The code budget study wc.experiment picks at wc.budget bytes on validation queries (checkpoint
    frontier_validation): its row of the validation record."""
    path = checkpoints.frontier_validation.get(dataset=wc.dataset, backbone=wc.backbone).output[0]
    return PLAN.budget_pick(wc, path)
