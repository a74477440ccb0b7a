# Stage 4 - triplets: shared deterministic (query, positive, negative) triplets per stage.


rule triplets:
    input:
        unpack(triplet_inputs),
    output:
        tsv=TRIPLETS,
        meta=TRIPLETS.replace(".tsv", ".json"),
    log:
        "logs/triplets/{dataset}/{backbone}/{stage}-{negatives}.log",
    benchmark:
        "logs/triplets/{dataset}/{backbone}/{stage}-{negatives}.bench.tsv"
    conda:
        "../envs/data.yaml"
    threads: 1
    resources:
        gpu=lambda wc: config["gpu"]["triplets"] if wc.negatives.startswith("hard") else 0,
        mem_mb=job_resource("text", "mem_mb"),
        runtime=job_resource("text", "runtime"),
    params:
        seed=config["split"]["seed"],
        num_negatives=config["triplets"]["num_negatives"],
        hard_pool=lambda wc: config["triplets"]["hard_pool"] if wc.negatives.startswith("hard") else None,
        max_per_query=lambda wc: dcfg.triplet_cap(config, wc.dataset),
    script:
        "../workflow_scripts/triplets.py"
