# Stage 9 - efficiency: what a compressed index saves (FAISS flat index: bytes, latency,
# throughput, against the measured memory-bandwidth bound), synthetic scaling, and the
# quality-per-byte frontier of every method under float32 / float16 / SQ8 / binary codes.


rule efficiency:
    input:
        unpack(efficiency_inputs),
    output:
        "results/efficiency/{dataset}/{backbone}.json",
    params:
        settings=config["efficiency"],
        dims=efficiency_dims,
    threads: config["threads"]["evaluate"]
    resources:
        gpu=1,
    log:
        "logs/efficiency/{dataset}/{backbone}.log",
    benchmark:
        "logs/efficiency/{dataset}/{backbone}.bench.tsv"
    conda:
        "../envs/train-gpu.yaml"
    script:
        "../workflow_scripts/efficiency.py"


rule efficiency_synthetic:
    output:
        "results/efficiency/synthetic.json",
    params:
        settings=config["efficiency"],
    threads: config["threads"]["evaluate"]
    resources:
        gpu=1,
    log:
        "logs/efficiency/synthetic.log",
    benchmark:
        "logs/efficiency/synthetic.bench.tsv"
    conda:
        "../envs/train-gpu.yaml"
    script:
        "../workflow_scripts/efficiency_synthetic.py"


rule frontier:
    input:
        unpack(frontier_inputs),
    output:
        "results/frontier/{dataset}/{backbone}.json",
    params:
        runs=frontier_runs,
        top_k=config["evaluation"]["top_k"],
    threads: config["threads"]["evaluate"]
    log:
        "logs/frontier/{dataset}/{backbone}.log",
    benchmark:
        "logs/frontier/{dataset}/{backbone}.bench.tsv"
    conda:
        "../envs/train-gpu.yaml"
    script:
        "../workflow_scripts/frontier.py"
