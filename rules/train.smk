# Stage 5 - training: fit one method variant at one dimension, seed and stage.


rule train:
    input:
        unpack(PLAN.train_inputs),
    output:
        checkpoint=CHECKPOINT,
        log=TRAIN_LOG,
    log:
        LOGS["train"],
    benchmark:
        bench_path(LOGS["train"])
    conda:
        "../envs/train-gpu.yaml"
    threads: PLAN.setting("threads", "train")
    resources:
        gpu=gpu_resource("train", "gpu"),
        gpu_share=gpu_resource("train", "gpu_share"),
        gres=gpu_resource("train", "gres"),
        mem_mb=job_resource("train", "mem_mb"),
        runtime=job_resource("train", "runtime"),
    params:
        record=records.FORMATS["checkpoint"],  # a new record format reruns the job
        type=lambda wc: PLAN.method(wc.method).type,
        hparams=lambda wc: PLAN.hparams(wc.method),
        negatives=lambda wc: PLAN.method(wc.method).negatives,
        selected=lambda wc: PLAN.method(wc.method).selected,
        device=PLAN.setting("device"),
        precision=PLAN.setting("training", "precision"),
    script:
        "../workflow_scripts/train.py"
