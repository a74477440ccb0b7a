# Stage 4 - triplets: shared deterministic (query, positive, negative) triplets per stage.


rule triplets:
    input:
        unpack(PLAN.triplet_inputs),
    output:
        tsv=TRIPLETS,
        meta=TRIPLETS_META,
    log:
        LOGS["triplets"],
    benchmark:
        bench_path(LOGS["triplets"])
    conda:
        "../envs/data.yaml"
    threads: 1
    resources:
        gpu=gpu_resource("triplets", "gpu", PLAN.hard_negatives),
        gpu_share=gpu_resource("triplets", "gpu_share", PLAN.hard_negatives),
        mem_mb=job_resource("text", "mem_mb"),
        runtime=job_resource("text", "runtime"),
    params:
        record=records.FORMATS["triplets"],  # a new record format reruns the job
        seed=PLAN.setting("split", "seed"),
        num_negatives=PLAN.setting("triplets", "num_negatives"),
        hard_pool=lambda wc: PLAN.setting("triplets", "hard_pool") if PLAN.hard_negatives(wc) else None,
        max_per_query=lambda wc: PLAN.triplet_cap(wc.dataset),
    script:
        "../workflow_scripts/triplets.py"
