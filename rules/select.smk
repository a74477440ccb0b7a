# Stage 7 - selection: validation (select-stage) results -> the picked hyperparameters (JSON)
# that final-stage jobs read. Its inputs are select-stage results only.


rule select:
    input:
        results=selection_results,
    output:
        SELECTION,
    log:
        "logs/select/{study}.log",
    wildcard_constraints:
        study="|".join(dcfg.SELECTION_STUDIES),
    conda:
        "../envs/report.yaml"
    resources:
        mem_mb=job_resource("small", "mem_mb"),
        runtime=job_resource("small", "runtime"),
    params:
        candidates=lambda wc: dcfg.selection_candidates(config, wc.study),
        datasets=lambda wc: dcfg.selection_settings(config)["datasets"],
        seed=lambda wc: dcfg.selection_settings(config)["seed"],
        groups=lambda wc: dataset_groups(dcfg.selection_settings(config)["datasets"]),
        reference=lambda wc: "dive" if wc.study == "lr_audit" else None,
    script:
        "../workflow_scripts/select.py"
