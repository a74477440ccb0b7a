# Stage 8 - report: one table (Markdown + TSV), a per-run TSV and one figure per study.


rule table:
    input:
        results=experiment_files(EVAL_JSON),
        per_query=experiment_files(PER_QUERY),
        train_logs=experiment_files(TRAIN_LOG),
        selection=experiment_selection,
    output:
        md=TABLE,
        tsv=shown("results/tables/{experiment}.tsv", "table", "summary table"),
        runs=shown("results/tables/{experiment}_runs.tsv", "runs", "per-run table"),
        png=shown("results/figures/{experiment}.png", "figure", "figure"),
    log:
        "logs/table/{experiment}.log",
    conda:
        "../envs/report.yaml"
    resources:
        mem_mb=job_resource("small", "mem_mb"),
        runtime=job_resource("small", "runtime"),
    params:
        study=lambda wc: dcfg.experiment(config, wc.experiment).get("study", "main"),
        methods=lambda wc: dcfg.experiment(config, wc.experiment).get("methods", []),
        datasets=lambda wc: dcfg.experiment(config, wc.experiment)["datasets"],
        backbones=lambda wc: dcfg.experiment(config, wc.experiment).get("backbones") or [config["backbone"]],
        groups=lambda wc: dataset_groups(dcfg.experiment(config, wc.experiment)["datasets"]),
        note=lambda wc: dcfg.experiment(config, wc.experiment).get("heads_note") or "",
        highlight=lambda wc: dcfg.experiment(config, wc.experiment).get("base", "dive"),
        title=experiment_title,
        caption=lambda wc: studies.CAPTIONS[dcfg.experiment(config, wc.experiment).get("study", "main")],
    script:
        "../workflow_scripts/table.py"
