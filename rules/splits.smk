# Stage 2 - splits: query-disjoint train/validation/test by the SHA-256 rank rule.


rule make_splits:
    input:
        SOURCE,
    output:
        SPLITS,
    params:
        seed=config["split"]["seed"],
        fractions=config["split"]["fractions"],
    log:
        "logs/make_splits/{dataset}.log",
    benchmark:
        "logs/make_splits/{dataset}.bench.tsv"
    conda:
        "../envs/data.yaml"
    script:
        "../workflow_scripts/make_splits.py"
