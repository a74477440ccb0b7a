# Stage 1 - data: fetch the official BEIR zip (sha256-checked) or link a local BEIR copy.


rule download_beir:
    output:
        ZIP,
    log:
        LOGS["download_beir"],
    benchmark:
        bench_path(LOGS["download_beir"])
    conda:
        "../envs/data.yaml"
    resources:
        downloads=1,
        mem_mb=job_resource("small", "mem_mb"),
        runtime=job_resource("small", "runtime"),
    params:
        url=lambda wc: PLAN.zip_entry(wc.zipname)["url"],
        sha256=lambda wc: PLAN.zip_entry(wc.zipname).get("zip_sha256"),
    script:
        "../workflow_scripts/download_beir.py"


rule stage_beir:
    input:
        PLAN.staging_input,
    output:
        SOURCE,
    log:
        LOGS["stage_beir"],
    benchmark:
        bench_path(LOGS["stage_beir"])
    conda:
        "../envs/data.yaml"
    resources:
        mem_mb=job_resource("text", "mem_mb"),
        runtime=job_resource("text", "runtime"),
    params:
        record=records.FORMATS["source"],  # a new record format reruns the job
        entry=lambda wc: PLAN.dataset(wc.dataset),
        mode=PLAN.setting("beir_local_mode"),
        on_missing=PLAN.setting("on_missing_qrels_ids"),
    script:
        "../workflow_scripts/stage_beir.py"
