# Stage 3 - embeddings: frozen backbone vectors of the corpus and the judged queries (HDF5).


rule embed:
    input:
        SOURCE,
    output:
        EMBEDDINGS,
    log:
        "logs/embed/{dataset}/{backbone}.log",
    benchmark:
        "logs/embed/{dataset}/{backbone}.bench.tsv"
    conda:
        "../envs/embed-gpu.yaml"
    threads: config["threads"]["embed"]
    resources:
        gpu=config["gpu"]["embed"],
    params:
        spec=lambda wc: {k: v for k, v in backbone_spec(wc.backbone).items() if k != "dims"},
        instruction=query_instruction,
        device=config["device"],
    script:
        "../workflow_scripts/embed.py"
