# Stage 7 - report: one table (Markdown + TSV) and two bar charts per experiment.


rule table:
    input:
        results=experiment_files(EVAL_JSON),
        per_query=experiment_files(PER_QUERY),
    output:
        md=TABLE,
        tsv=shown("results/tables/{experiment}.tsv", "table", "summary table"),
        runs=shown("results/tables/{experiment}_runs.tsv", "runs", "per-run table"),
        ndcg_png=shown("results/figures/{experiment}_ndcg10.png", "figure", "nDCG@10 chart"),
        recall_png=shown("results/figures/{experiment}_recall10.png", "figure", "Recall@10 chart"),
    params:
        methods=lambda wc: dcfg.experiment(config, wc.experiment)["methods"],
        datasets=lambda wc: dcfg.experiment(config, wc.experiment)["datasets"],
        title=experiment_title,
    log:
        "logs/table/{experiment}.log",
    conda:
        "../envs/report.yaml"
    script:
        "../workflow_scripts/table.py"
