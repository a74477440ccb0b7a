# Stage 9 - efficiency: what a compressed index saves (FAISS flat index: bytes, latency,
# throughput, against the measured memory-bandwidth bound), synthetic scaling, and the
# quality-per-byte frontier of every method under float32 / float16 / SQ8 / binary codes and the
# index quantizers (PQ, OPQ + PQ, RaBitQ, SQ4).


rule efficiency:
    input:
        unpack(PLAN.efficiency_inputs),
    output:
        EFFICIENCY,
    log:
        LOGS["efficiency"],
    benchmark:
        bench_path(LOGS["efficiency"])
    conda:
        "../envs/train-gpu.yaml"
    threads: PLAN.setting("threads", "evaluate")
    resources:
        gpu=gpu_resource("efficiency", "gpu", faiss_on_gpu),
        gpu_share=gpu_resource("efficiency", "gpu_share", faiss_on_gpu),
        mem_mb=job_resource("measure", "mem_mb"),
        runtime=job_resource("measure", "runtime"),
    params:
        record=records.FORMATS["efficiency"],  # a new record format reruns the job
        settings=PLAN.setting("efficiency"),
        dims=lambda wc: PLAN.efficiency_runs(wc.backbone),
        quantizers=PLAN.setting("quantizers"),
    script:
        "../workflow_scripts/efficiency.py"


rule efficiency_synthetic:
    output:
        SYNTHETIC,
    log:
        LOGS["efficiency_synthetic"],
    benchmark:
        bench_path(LOGS["efficiency_synthetic"])
    conda:
        "../envs/train-gpu.yaml"
    threads: PLAN.setting("threads", "evaluate")
    resources:
        gpu=gpu_resource("efficiency", "gpu", faiss_on_gpu),
        gpu_share=gpu_resource("efficiency", "gpu_share", faiss_on_gpu),
        mem_mb=job_resource("measure", "mem_mb", extra_mb=resources.synthetic_mb(PLAN.setting("efficiency"))),
        runtime=job_resource(
            "measure", "runtime", extra_mb=resources.synthetic_mb(PLAN.setting("efficiency"))
        ),
    params:
        record=records.FORMATS["efficiency_synthetic"],  # a new record format reruns the job
        settings=PLAN.setting("efficiency"),
        quantizers=PLAN.setting("quantizers"),
    script:
        "../workflow_scripts/efficiency_synthetic.py"


rule frontier:
    input:
        unpack(PLAN.frontier_inputs),
    output:
        FRONTIER,
    log:
        LOGS["frontier"],
    benchmark:
        bench_path(LOGS["frontier"])
    conda:
        "../envs/train-gpu.yaml"
    threads: PLAN.setting("threads", "evaluate")
    resources:
        mem_mb=job_resource("measure", "mem_mb"),
        runtime=job_resource("measure", "runtime"),
    params:
        record=records.FORMATS["frontier"],  # a new record format reruns the job
        stage="final",
        runs=lambda wc: PLAN.frontier_runs(wc.backbone),
        top_k=PLAN.setting("evaluation", "top_k"),
        quantizers=PLAN.setting("quantizers"),
        quantized=lambda wc: PLAN.frontier_quantized(wc.backbone),
    script:
        "../workflow_scripts/frontier.py"


# The frontier's rows of the methods that run again at another seed: experiments.frontier.method_seeds,
# and at a budget study's seeds the maps picked on validation queries (the same script, fewer runs).
rule frontier_seed:
    input:
        unpack(lambda wc: PLAN.frontier_seed_inputs(wc, picked_maps(wc))),
    output:
        FRONTIER_SEED,
    log:
        LOGS["frontier_seed"],
    benchmark:
        bench_path(LOGS["frontier_seed"])
    conda:
        "../envs/train-gpu.yaml"
    threads: PLAN.setting("threads", "evaluate")
    resources:
        mem_mb=job_resource("measure", "mem_mb"),
        runtime=job_resource("measure", "runtime"),
    params:
        record=records.FORMATS["frontier"],  # a new record format reruns the job
        stage="final",
        runs=lambda wc: PLAN.frontier_seed_runs(wc.backbone, int(wc.seed), picked_maps(wc)),
        top_k=PLAN.setting("evaluation", "top_k"),
        quantizers=PLAN.setting("quantizers"),
        # its own runs' share: another frontier method does not rerun it
        quantized=lambda wc: PLAN.frontier_seed_quantized(wc.backbone, int(wc.seed), picked_maps(wc)),
    script:
        "../workflow_scripts/frontier.py"


# Every frontier code on validation queries, the maps of the select stage (trained on the training
# queries alone) at the frontier's first seed: what the frontier's verdict and the budget study pick on.
# A checkpoint: the maps it picks are the ones that run again at a budget study's seeds (frontier_seed).
checkpoint frontier_validation:
    input:
        unpack(PLAN.frontier_validation_inputs),
    output:
        FRONTIER_VALIDATION,
    log:
        LOGS["frontier_validation"],
    benchmark:
        bench_path(LOGS["frontier_validation"])
    conda:
        "../envs/train-gpu.yaml"
    threads: PLAN.setting("threads", "evaluate")
    resources:
        mem_mb=job_resource("measure", "mem_mb"),
        runtime=job_resource("measure", "runtime"),
    params:
        record=records.FORMATS["frontier"],  # a new record format reruns the job
        stage="select",
        runs=lambda wc: PLAN.frontier_runs(wc.backbone),
        top_k=PLAN.setting("evaluation", "top_k"),
        quantizers=PLAN.setting("quantizers"),
        quantized=lambda wc: PLAN.frontier_quantized(wc.backbone),
        # a budget study's max_latency_ms: each code's one-query search timed on this many queries (else 0)
        latency_queries=PLAN.frontier_latency_queries(),
    script:
        "../workflow_scripts/frontier.py"


# A budget study's pick at one budget written out for use: the corpus through the picked map and the
# FAISS index of the picked code, made as `dive-compress CHECKPOINT embeddings.h5 corpus.h5 --group
# corpus --faiss index.faiss [--index FACTORY]` makes them, and a card with the pick's scores and tests.
rule budget_index:
    input:
        unpack(lambda wc: PLAN.budget_index_inputs(wc, budget_pick(wc))),
    output:
        vectors=BUDGET_VECTORS,
        index=BUDGET_INDEX,
        card=BUDGET_CARD,
    log:
        LOGS["budget_index"],
    conda:
        "../envs/train-gpu.yaml"
    threads: PLAN.setting("threads", "evaluate")
    resources:
        mem_mb=job_resource("measure", "mem_mb"),
        runtime=job_resource("measure", "runtime"),
    params:
        pick=budget_pick,
        top_k=PLAN.setting("evaluation", "top_k"),
        max_latency_ms=lambda wc: PLAN.experiment(wc.experiment)["max_latency_ms"],
    script:
        "../workflow_scripts/budget_index.py"


# An arrival study's vectors under the index quantizers, every codebook and rotation fitted on the
# documents known at training time (experiments.<name>.codes); the whole corpus is searched.
rule arrival_codes:
    input:
        unpack(PLAN.arrival_codes_inputs),
    output:
        ARRIVAL_CODES,
    log:
        LOGS["arrival_codes"],
    benchmark:
        bench_path(LOGS["arrival_codes"])
    conda:
        "../envs/train-gpu.yaml"
    threads: PLAN.setting("threads", "evaluate")
    resources:
        mem_mb=job_resource("measure", "mem_mb"),
        runtime=job_resource("measure", "runtime"),
    params:
        record=records.FORMATS["arrival_codes"],  # a new record format reruns the job
        stage="final",
        runs=lambda wc: PLAN.arrival_code_runs(wc.experiment, wc.backbone),
        seed=lambda wc: PLAN.experiment(wc.experiment)["seeds"][0],
        top_k=PLAN.setting("evaluation", "top_k"),
        quantizers=PLAN.setting("quantizers"),
    script:
        "../workflow_scripts/arrival_codes.py"


# The same codes of the select stage's arrival-fitted maps (trained on the training queries and the
# known documents) on the validation queries: what an arrival budget study picks on.
rule arrival_codes_validation:
    input:
        unpack(lambda wc: PLAN.arrival_codes_inputs(wc, "select")),
    output:
        ARRIVAL_CODES_VALIDATION,
    log:
        LOGS["arrival_codes_validation"],
    benchmark:
        bench_path(LOGS["arrival_codes_validation"])
    conda:
        "../envs/train-gpu.yaml"
    threads: PLAN.setting("threads", "evaluate")
    resources:
        mem_mb=job_resource("measure", "mem_mb"),
        runtime=job_resource("measure", "runtime"),
    params:
        record=records.FORMATS["arrival_codes"],  # a new record format reruns the job
        stage="select",
        runs=lambda wc: PLAN.arrival_code_runs(wc.experiment, wc.backbone),
        seed=lambda wc: PLAN.experiment(wc.experiment)["seeds"][0],
        top_k=PLAN.setting("evaluation", "top_k"),
        quantizers=PLAN.setting("quantizers"),
    script:
        "../workflow_scripts/arrival_codes.py"
