# Stage 2 - splits: query-disjoint train/validation/test by the SHA-256 rank rule.


rule make_splits:
    input:
        SOURCE,
    output:
        SPLITS,
    log:
        LOGS["make_splits"],
    benchmark:
        bench_path(LOGS["make_splits"])
    conda:
        "../envs/data.yaml"
    resources:
        mem_mb=job_resource("text", "mem_mb"),
        runtime=job_resource("text", "runtime"),
    params:
        record=records.FORMATS["splits"],  # a new record format reruns the job
        seed=PLAN.setting("split", "seed"),
        fractions=PLAN.setting("split", "fractions"),
        queries_in_corpus=lambda wc: PLAN.dataset(wc.dataset).get("queries_in_corpus"),
    script:
        "../workflow_scripts/make_splits.py"


# The documents that arrive after training (the arrival study): every fit sees the others only.
rule make_arrival:
    input:
        source=SOURCE,
        splits=SPLITS,
    output:
        ARRIVAL,
    log:
        LOGS["make_arrival"],
    conda:
        "../envs/data.yaml"
    resources:
        mem_mb=job_resource("text", "mem_mb"),
        runtime=job_resource("text", "runtime"),
    params:
        record=records.FORMATS["arrival"],  # a new record format reruns the job
        arrival=PLAN.arrival(),
    script:
        "../workflow_scripts/make_arrival.py"
