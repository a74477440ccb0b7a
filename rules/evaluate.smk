# Stage 6 - evaluation: compress, exact search over the whole corpus, pytrec_eval metrics.


rule evaluate:
    input:
        checkpoint=CHECKPOINT,
        train_log=TRAIN_LOG,
        embeddings=EMBEDDINGS,
        splits=SPLITS,
    output:
        result=EVAL_JSON,
        per_query=PER_QUERY,
    log:
        LOGS["evaluate"],
    benchmark:
        bench_path(LOGS["evaluate"])
    conda:
        "../envs/train-gpu.yaml"
    threads: PLAN.setting("threads", "evaluate")
    resources:
        gpu=gpu_resource("evaluate", "gpu"),
        gpu_share=gpu_resource("evaluate", "gpu_share"),
        gres=gpu_resource("evaluate", "gres"),
        mem_mb=job_resource("evaluate", "mem_mb"),
        runtime=job_resource("evaluate", "runtime"),
    params:
        record=records.FORMATS["result"],  # a new record format reruns the job
        top_k=PLAN.setting("evaluation", "top_k"),
        config_snapshot=PLAN.result_config,
    script:
        "../workflow_scripts/evaluate.py"


rule headline_result:
    """results/{dataset}/{method}/seed{seed}.json: the held-out result (default backbone,
    final stage, primary dimension), copied from its canonical run directory."""
    input:
        PLAN.headline_eval,
    output:
        HEADLINE,
    log:
        LOGS["headline_result"],
    conda:
        "../envs/data.yaml"
    resources:
        mem_mb=job_resource("small", "mem_mb"),
        runtime=job_resource("small", "runtime"),
    script:
        "../workflow_scripts/headline.py"
