# Stage 3 - embeddings: frozen backbone vectors of the corpus and the judged queries (HDF5).


def backbone_spec(backbone):
    if backbone not in config["backbones"]:
        raise ValueError(f"backbone {backbone!r} is not defined under backbones: in the config")
    return config["backbones"][backbone]


def query_instruction(wildcards):
    """Only instruction-following backbones get (and depend on) the dataset's instruction."""
    if backbone_spec(wildcards.backbone)["family"] != "llm2vec":
        return ""
    return registry_entry(wildcards.dataset).get("instruction", "")


rule embed:
    input:
        SOURCE,
    output:
        EMBEDDINGS,
    params:
        spec=lambda wc: {k: v for k, v in backbone_spec(wc.backbone).items() if k != "dims"},
        instruction=query_instruction,
        device=config["device"],
    threads: config["threads"]["embed"]
    resources:
        gpu=config["gpu"]["embed"],
    log:
        "logs/embed/{dataset}/{backbone}.log",
    benchmark:
        "logs/embed/{dataset}/{backbone}.bench.tsv"
    conda:
        "../envs/embed-gpu.yaml"
    script:
        "../workflow_scripts/embed.py"
