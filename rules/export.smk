# Stage 10 - export: a trained compressor as a folder usable outside the workflow (on demand,
# not part of `all`): snakemake --cores 1 results/scifact/minilm/dive/k64/final/seed2027/export


rule export:
    input:
        checkpoint=CHECKPOINT,
        result=EVAL_JSON,
    output:
        directory(EXPORT),
    log:
        LOGS["export"],
    conda:
        "../envs/train-gpu.yaml"
    resources:
        mem_mb=job_resource("evaluate", "mem_mb"),
        runtime=job_resource("evaluate", "runtime"),
    params:
        backbone=lambda wc: PLAN.backbone(wc.backbone).job_spec,
    script:
        "../workflow_scripts/export.py"
