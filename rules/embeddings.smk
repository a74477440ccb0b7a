# Stage 3 - embeddings: frozen backbone vectors of the corpus and the judged queries (HDF5).
# A backbone with `source:` first gets its pinned model folder (fetch_model: a local rule, since
# cluster nodes often have no internet; the weights' sha256 is checked before anything embeds).
# A backbone with `shards: N` > 1 embeds in N + 1 independent jobs (embed_part: corpus ranges
# and the queries), which rule embed gathers into the same file an unsharded run writes.
# An LLM2Vec backbone embeds in its own environment (dive_core.environments): conda users get
# envs/embed-llm2vec.yaml, pip users .venv-llm2vec, which rule python_env builds when missing.


rule python_env:
    output:
        os.path.join(workflow.basedir, ".venv-{env}", ".installed"),
    log:
        LOGS["python_env"],
    wildcard_constraints:
        env="|".join(environments.ENVIRONMENTS),
    conda:
        "../envs/data.yaml"  # never runs under conda (the embed rules take the env's conda file instead)
    params:
        checkout=lambda wc, output: os.path.dirname(os.path.dirname(output[0])),
    shell:
        "make -C {params.checkout} venv-{wildcards.env} > {log} 2>&1"


rule fetch_model:
    output:
        directory(MODEL_DIR),
    log:
        LOGS["fetch_model"],
    conda:
        "../envs/embed-gpu.yaml"  # huggingface-hub and pip, the two ways the folder is fetched
    params:
        fetch=lambda wc: PLAN.backbone(wc.backbone).fetch_spec,
    script:
        "../workflow_scripts/fetch_model.py"


rule embed_part:
    input:
        SOURCE,
        model=PLAN.model_folder,
        venv=lambda wc: [ancient(p) for p in PLAN.embed_venv(wc, USES_CONDA)],
    output:
        temp(EMBED_PART),
    log:
        LOGS["embed_part"],
    benchmark:
        bench_path(LOGS["embed_part"])
    conda:
        PLAN.embed_conda
    threads: PLAN.setting("threads", "embed")
    resources:
        gpu=gpu_resource("embed", "gpu"),
        gpu_share=gpu_resource("embed", "gpu_share"),
        mem_mb=job_resource("embed", "mem_mb"),
        runtime=job_resource("embed", "runtime"),
    params:
        record=records.FORMATS["embedding_shard"],  # a new record format reruns the job
        spec=lambda wc: PLAN.backbone(wc.backbone).job_spec,
        instruction=PLAN.query_instruction,
        device=PLAN.setting("device"),
    script:
        "../workflow_scripts/embed.py"


rule embed:
    input:
        source=SOURCE,
        model=PLAN.model_folder,
        parts=PLAN.embed_parts,
        vectors=PLAN.vector_files,
        venv=lambda wc: [ancient(p) for p in PLAN.embed_venv(wc, USES_CONDA)],
    output:
        EMBEDDINGS,
    log:
        LOGS["embed"],
    benchmark:
        bench_path(LOGS["embed"])
    conda:
        PLAN.embed_conda
    threads: PLAN.setting("threads", "embed")
    resources:
        # a gather, or ingesting a vectors backbone's files, needs no GPU
        gpu=gpu_resource("embed", "gpu", PLAN.embeds_here),
        gpu_share=gpu_resource("embed", "gpu_share", PLAN.embeds_here),
        mem_mb=job_resource("embed", "mem_mb"),
        runtime=job_resource("embed", "runtime"),
    params:
        record=records.FORMATS["embeddings"],  # a new record format reruns the job
        spec=lambda wc: PLAN.backbone(wc.backbone).job_spec,
        instruction=PLAN.query_instruction,
        device=PLAN.setting("device"),
    script:
        "../workflow_scripts/embed.py"
