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
        mem_mb=job_resource("embed", "mem_mb"),
        runtime=job_resource("embed", "runtime"),
    params:
        record=records.FORMATS["embeddings"],  # a new record format reruns the job
        spec=lambda wc: backbone_spec(wc.backbone, omit=("dims", "mem_mb")),
        instruction=query_instruction,
        device=config["device"],
    script:
        "../workflow_scripts/embed.py"
