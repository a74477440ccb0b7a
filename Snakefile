# DIVE pipeline: supervised compression of frozen text embeddings, reproduced against its
# baselines on BEIR. This file only loads and validates the configuration, includes the
# stages and defines `all`; see README.md for the artifact layout.
import os

from snakemake.utils import min_version, validate

min_version("9.0")


# Relative to this file, so that `--directory elsewhere` still finds the defaults; any
# --configfile / --config given on the command line is merged on top.
DEFAULT_CONFIG = os.path.join(workflow.basedir, "config", "config.yaml")


configfile: DEFAULT_CONFIG


validate(config, os.path.join(workflow.basedir, "config", "schema", "config.schema.yaml"))


report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/data.smk"
include: "rules/splits.smk"
include: "rules/embeddings.smk"
include: "rules/triplets.smk"
include: "rules/train.smk"
include: "rules/evaluate.smk"
include: "rules/select.smk"
include: "rules/efficiency.smk"
include: "rules/report.smk"
include: "rules/export.smk"


# Seconds of bookkeeping each: run them in the submitting process, never as cluster jobs.
localrules:
    all,
    table,
    headline_result,
    select,


rule all:
    default_target: True
    input:
        all_targets(),
