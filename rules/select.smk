# Stage 7 - selection: validation (select-stage) results -> the picked hyperparameters (JSON)
# that final-stage jobs read. Its inputs are select-stage results of one backbone only; that
# backbone's jobs alone read the pick.


rule select:
    input:
        unpack(PLAN.selection_inputs),
    output:
        SELECTION,
    log:
        LOGS["select"],
    conda:
        "../envs/report.yaml"
    resources:
        mem_mb=job_resource("small", "mem_mb"),
        runtime=job_resource("small", "runtime"),
    params:
        record=records.FORMATS["selection"],  # a new record format reruns the job
        candidates=lambda wc: PLAN.selection_candidates(wc.study),
        datasets=lambda wc: PLAN.selection()["datasets"],
        seed=lambda wc: PLAN.selection()["seed"],
        groups=lambda wc: PLAN.groups(PLAN.selection()["datasets"]),
        reference=lambda wc: PLAN.selection_reference(wc.study),
        arrival=lambda wc: PLAN.arrival_selection(wc.study),
    script:
        "../workflow_scripts/select.py"
