# Stage 7 - report: one table (Markdown + TSV) and two bar charts per experiment.


def experiment_files(pattern):
    def files(wildcards):
        return [pattern.format(**run) for run in dcfg.experiment_runs(config, wildcards.experiment)]

    return files


def experiment_title(wildcards):
    exp = dcfg.experiment(config, wildcards.experiment)
    role = "held-out test queries" if exp["stage"] == "final" else "validation queries"
    return (f"{wildcards.experiment}: {role}, backbone {config['backbone']}, {exp['dim']} dimension"
            + (f" - {exp['description']}" if exp.get("description") else ""))


def shown(path, caption, content):
    """An output that `snakemake --report` shows, grouped by experiment, with the caption
    report/{caption}.rst."""
    return report(path, caption=f"../report/{caption}.rst", category="{experiment}",
                  labels={"experiment": "{experiment}", "content": content})


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
