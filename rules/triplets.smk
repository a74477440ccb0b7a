# Stage 4 - triplets: shared deterministic (query, positive, negative) triplets per stage.


rule triplets:
    input:
        unpack(triplet_inputs),
    output:
        tsv=TRIPLETS,
        meta=TRIPLETS_META,
    log:
        "logs/triplets/{dataset}/{backbone}/{stage}-{negatives}.log",
    benchmark:
        "logs/triplets/{dataset}/{backbone}/{stage}-{negatives}.bench.tsv"
    conda:
        "../envs/data.yaml"
    threads: 1
    resources:
        gpu=lambda wc: config["gpu"]["triplets"] if hard_negatives(wc) else 0,
        mem_mb=job_resource("text", "mem_mb"),
        runtime=job_resource("text", "runtime"),
    params:
        record=records.FORMATS["triplets"],  # a new record format reruns the job
        seed=config["split"]["seed"],
        num_negatives=config["triplets"]["num_negatives"],
        hard_pool=lambda wc: config["triplets"]["hard_pool"] if hard_negatives(wc) else None,
        max_per_query=lambda wc: plan.triplet_cap(config, wc.dataset),
    script:
        "../workflow_scripts/triplets.py"
