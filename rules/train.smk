# Stage 5 - training: fit one method variant at one dimension, seed and stage.


def method_params(method):
    """Resolved hyperparameters (config entry + shared training section); resolved again in the
    job when the driving environment cannot import the method implementations."""
    entry = method_entry(method)
    if _DEEP:
        return dcfg.method_hparams(config, method)
    return {"__unresolved__": True, "entry": entry, "training": config["training"]}


def train_inputs(wildcards):
    inputs = {
        "embeddings": EMBEDDINGS.format(**wildcards),
        "splits": SPLITS.format(**wildcards),
    }
    if needs_triplets(wildcards.method):
        tsv = TRIPLETS.format(negatives=dcfg.method_negatives(config, wildcards.method), **wildcards)
        inputs["triplets"] = tsv
        inputs["triplets_meta"] = tsv.replace(".tsv", ".json")
    return inputs


rule train:
    input:
        unpack(train_inputs),
    output:
        checkpoint=CHECKPOINT,
        log=TRAIN_LOG,
    params:
        type=lambda wc: dcfg.method_type(config, wc.method),
        hparams=lambda wc: method_params(wc.method),
        negatives=lambda wc: dcfg.method_negatives(config, wc.method),
        device=config["device"],
    threads: config["threads"]["train"]
    resources:
        gpu=config["gpu"]["train"],
    log:
        "logs/train/{dataset}/{backbone}/{method}/k{k}/{stage}/seed{seed}.log",
    benchmark:
        "logs/train/{dataset}/{backbone}/{method}/k{k}/{stage}/seed{seed}.bench.tsv"
    conda:
        "../envs/train-gpu.yaml"
    script:
        "../workflow_scripts/train.py"
