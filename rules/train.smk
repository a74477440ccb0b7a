# Stage 5 - training: fit one method variant at one dimension, seed and stage.


rule train:
    input:
        unpack(train_inputs),
    output:
        checkpoint=CHECKPOINT,
        log=TRAIN_LOG,
    log:
        "logs/train/{dataset}/{backbone}/{method}/k{k}/{stage}/seed{seed}.log",
    benchmark:
        "logs/train/{dataset}/{backbone}/{method}/k{k}/{stage}/seed{seed}.bench.tsv"
    conda:
        "../envs/train-gpu.yaml"
    threads: config["threads"]["train"]
    resources:
        gpu=config["gpu"]["train"],
        mem_mb=job_resource("train", "mem_mb"),
        runtime=job_resource("train", "runtime"),
    params:
        record=records.FORMATS["checkpoint"],  # a new record format reruns the job
        type=lambda wc: plan.method_type(config, wc.method),
        hparams=lambda wc: plan.method_hparams(config, wc.method),
        negatives=lambda wc: plan.method_negatives(config, wc.method),
        selected=lambda wc: config["methods"][wc.method].get("selected"),
        device=config["device"],
        precision=config["training"]["precision"],
    script:
        "../workflow_scripts/train.py"
