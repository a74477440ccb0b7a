# Stage 8 - report: one table (Markdown + TSV), a per-run TSV and one figure per study, from the
# files its rule declares (table_inputs) and nothing else. Figure captions: report/figure.rst.


rule table:
    input:
        unpack(PLAN.table_inputs),
    output:
        md=TABLE,
        tsv=shown(TABLE_TSV, "table", "summary table"),
        runs=shown(RUNS_TSV, "runs", "per-run table"),
        png=shown(FIGURE, "figure", "figure"),
    log:
        LOGS["table"],
    conda:
        "../envs/report.yaml"
    resources:
        mem_mb=job_resource("small", "mem_mb"),
        runtime=job_resource("small", "runtime"),
    params:
        study=lambda wc: PLAN.experiment(wc.experiment)["study"],
        methods=lambda wc: PLAN.experiment(wc.experiment)["methods"],
        datasets=lambda wc: PLAN.experiment(wc.experiment)["datasets"],
        backbones=lambda wc: PLAN.experiment(wc.experiment)["backbones"],
        groups=lambda wc: PLAN.groups(PLAN.experiment(wc.experiment)["datasets"]),
        note=lambda wc: PLAN.experiment(wc.experiment).get("heads_note") or "",
        highlight=lambda wc: PLAN.experiment(wc.experiment).get("base", "dive"),
        versus=lambda wc: PLAN.experiment(wc.experiment).get("versus") or [],
        budgets=lambda wc: PLAN.experiment(wc.experiment).get("budgets") or [],
        arrival=lambda wc: PLAN.experiment(wc.experiment).get("arrival") or "",
        stratum=lambda wc: PLAN.experiment(wc.experiment).get("stratum") or "all",
        max_latency_ms=lambda wc: PLAN.experiment(wc.experiment).get("max_latency_ms"),
        title=lambda wc: PLAN.title(wc.experiment),
    script:
        "../workflow_scripts/table.py"
