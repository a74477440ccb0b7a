# Stage 8 - report: one table (Markdown + TSV), a per-run TSV and one figure per study, from the
# files its rule declares (table_inputs) and nothing else. Figure captions: report/figure.rst.


rule table:
    input:
        unpack(table_inputs),
    output:
        md=TABLE,
        tsv=shown(TABLE_TSV, "table", "summary table"),
        runs=shown(RUNS_TSV, "runs", "per-run table"),
        png=shown(FIGURE, "figure", "figure"),
    log:
        "logs/table/{experiment}.log",
    conda:
        "../envs/report.yaml"
    resources:
        mem_mb=job_resource("small", "mem_mb"),
        runtime=job_resource("small", "runtime"),
    params:
        study=lambda wc: experiment_of(wc)["study"],
        methods=lambda wc: experiment_of(wc)["methods"],
        datasets=lambda wc: experiment_of(wc)["datasets"],
        backbones=lambda wc: experiment_of(wc)["backbones"],
        groups=lambda wc: plan.dataset_groups(REGISTRY, experiment_of(wc)["datasets"]),
        note=lambda wc: experiment_of(wc).get("heads_note") or "",
        highlight=lambda wc: experiment_of(wc).get("base", "dive"),
        title=lambda wc: plan.experiment_title(config, wc.experiment),
    script:
        "../workflow_scripts/table.py"
