# Stage 7 - report: aggregate tables and figures over the experiments' result JSONs.


def main_results(wildcards):
    exp = dcfg.experiment(config, "main")
    return expand(HEADLINE, dataset=exp["datasets"], method=exp["methods"], seed=exp["seeds"])


rule table_main:
    input:
        main_results,
    output:
        md="results/tables/main.md",
        tsv="results/tables/main.tsv",
        runs="results/tables/main_runs.tsv",
        ndcg_png="results/figures/main_ndcg10.png",
        recall_png="results/figures/main_recall10.png",
    params:
        methods=lambda wc: dcfg.experiment(config, "main")["methods"],
        datasets=lambda wc: dcfg.experiment(config, "main")["datasets"],
        backbone=config["backbone"],
    log:
        "logs/table_main/main.log",
    conda:
        "../envs/report.yaml"
    script:
        "../workflow_scripts/table_main.py"
