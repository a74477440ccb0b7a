# Stage 11 - compress: a trained compressor applied to vector files, the `compress:` config section
# (on demand, not part of `all`): `snakemake --cores 2 results/compressed/<name>.<input's extension>`,
# or `snakemake --cores 2 compress_all` for every entry (and its FAISS index with `faiss: true`).
# An entry with `shards: N` > 1 runs as N row-range jobs (compress_part, float32 + each range's
# per-coordinate min/max), gathered in row order by rule compress into the bytes `dive-compress`
# writes; int8 (SQ8) ranges are the min/max over every part, i.e. over the whole input. The model
# may be a checkpoint of this workflow (then built when missing) or any checkpoint / export folder.
# An entry's `faiss_index` (a FAISS factory string) is recorded in the output by rule compress and
# built by rule compress_index from that record: trained on a seeded sample, filled chunk by chunk.
from dive_core.paths import (
    COMPRESSED,
    COMPRESSED_EXT,
    COMPRESSED_INDEX,
    COMPRESSED_NPY_EXTS,
    COMPRESSED_STEM,
    COMPRESS_PART,
    COMPRESS_SHARD,
)


rule compress_part:
    input:
        unpack(PLAN.compress_inputs),
    output:
        temp(directory(COMPRESS_PART)),
    log:
        LOGS["compress_part"],
    benchmark:
        bench_path(LOGS["compress_part"])
    wildcard_constraints:
        shard=COMPRESS_SHARD,
    conda:
        "../envs/embed-gpu.yaml"  # torch, pyarrow, h5py, safetensors
    threads: PLAN.setting("threads", "compress")
    resources:
        mem_mb=compress_resource("mem_mb"),
        runtime=compress_resource("runtime"),
    params:
        entry=PLAN.compress_entry,
    script:
        "../workflow_scripts/compress.py"


rule compress:
    input:
        unpack(PLAN.compress_inputs),
        parts=PLAN.compress_parts,
    output:
        COMPRESSED,
    log:
        LOGS["compress"],
    benchmark:
        bench_path(LOGS["compress"])
    wildcard_constraints:
        ext=COMPRESSED_EXT,
    conda:
        "../envs/embed-gpu.yaml"
    threads: PLAN.setting("threads", "compress")
    resources:
        mem_mb=compress_resource("mem_mb"),
        runtime=compress_resource("runtime"),
    params:
        entry=PLAN.compress_entry,
    script:
        "../workflow_scripts/compress.py"


use rule compress as compress_npy with:
    input:
        unpack(PLAN.compress_npy_inputs),
        parts=PLAN.compress_parts,
    output:
        multiext(COMPRESSED_STEM, *COMPRESSED_NPY_EXTS),
    log:
        LOGS["compress_npy"],
    benchmark:
        bench_path(LOGS["compress_npy"])


rule compress_index:
    input:
        PLAN.compress_outputs,
    output:
        COMPRESSED_INDEX,
    log:
        LOGS["compress_index"],
    conda:
        "../envs/train-gpu.yaml"  # faiss
    threads: PLAN.setting("threads", "compress")  # a faiss_index's training (the bytes do not depend on them)
    resources:
        mem_mb=compress_index_resource("mem_mb"),
        runtime=compress_index_resource("runtime"),
    script:
        "../workflow_scripts/compress.py"


rule compress_all:
    input:
        PLAN.compress_targets(),
