# Stage 9 - efficiency: what a compressed index saves (FAISS flat index: bytes, latency,
# throughput, against the measured memory-bandwidth bound), synthetic scaling, and the
# quality-per-byte frontier of every method under float32 / float16 / SQ8 / binary codes.


rule efficiency:
    input:
        unpack(efficiency_inputs),
    output:
        EFFICIENCY,
    log:
        "logs/efficiency/{dataset}/{backbone}.log",
    benchmark:
        "logs/efficiency/{dataset}/{backbone}.bench.tsv"
    conda:
        "../envs/train-gpu.yaml"
    threads: config["threads"]["evaluate"]
    resources:
        gpu=config["gpu"]["efficiency"],
        mem_mb=job_resource("measure", "mem_mb"),
        runtime=job_resource("measure", "runtime"),
    params:
        record=records.FORMATS["efficiency"],  # a new record format reruns the job
        settings=config["efficiency"],
        dims=lambda wc: plan.efficiency_runs(config, wc.backbone),
    script:
        "../workflow_scripts/efficiency.py"


rule efficiency_synthetic:
    output:
        SYNTHETIC,
    log:
        "logs/efficiency/synthetic.log",
    benchmark:
        "logs/efficiency/synthetic.bench.tsv"
    conda:
        "../envs/train-gpu.yaml"
    threads: config["threads"]["evaluate"]
    resources:
        gpu=config["gpu"]["efficiency"],
        mem_mb=job_resource("measure", "mem_mb", extra_mb=resources.synthetic_mb(config["efficiency"])),
        runtime=job_resource("measure", "runtime", extra_mb=resources.synthetic_mb(config["efficiency"])),
    params:
        record=records.FORMATS["efficiency"],  # a new record format reruns the job
        settings=config["efficiency"],
    script:
        "../workflow_scripts/efficiency_synthetic.py"


rule frontier:
    input:
        unpack(frontier_inputs),
    output:
        FRONTIER,
    log:
        "logs/frontier/{dataset}/{backbone}.log",
    benchmark:
        "logs/frontier/{dataset}/{backbone}.bench.tsv"
    conda:
        "../envs/train-gpu.yaml"
    threads: config["threads"]["evaluate"]
    resources:
        mem_mb=job_resource("measure", "mem_mb"),
        runtime=job_resource("measure", "runtime"),
    params:
        record=records.FORMATS["frontier"],  # a new record format reruns the job
        runs=lambda wc: plan.frontier_runs(config, wc.backbone),
        top_k=config["evaluation"]["top_k"],
    script:
        "../workflow_scripts/frontier.py"
