# Stage 7 - selection: validation (select-stage) results -> the picked hyperparameters (JSON)
# that final-stage jobs read. Its inputs are select-stage results of one backbone only; that
# backbone's jobs alone read the pick.


rule select:
    input:
        results=selection_results,
    output:
        SELECTION,
    log:
        "logs/select/{backbone}/{study}.log",
    conda:
        "../envs/report.yaml"
    resources:
        mem_mb=job_resource("small", "mem_mb"),
        runtime=job_resource("small", "runtime"),
    params:
        record=records.FORMATS["selection"],  # a new record format reruns the job
        candidates=lambda wc: plan.selection_candidates(config, wc.study),
        datasets=lambda wc: plan.selection_settings(config)["datasets"],
        seed=lambda wc: plan.selection_settings(config)["seed"],
        groups=lambda wc: plan.dataset_groups(REGISTRY, plan.selection_settings(config)["datasets"]),
        reference=lambda wc: plan.selection_reference(config, wc.study),
    script:
        "../workflow_scripts/select.py"
