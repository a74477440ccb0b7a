"""Rules compress_part, compress, compress_npy and compress_index (rules/compress.smk): a trained
compressor applied to a `compress:` entry's vector file, in one job or in row-range parts gathered
in order (dive_core.compress: the bytes `dive-compress` writes), and the output's FAISS index."""
import _dive_path  # noqa: F401  (this checkout's dive_core on sys.path; keep first)
from dive_core import job_server

job_server.delegate()  # a torch job: runs as a fork of the run's job server where one serves it
from dive_core import compress, runlog

log = runlog.setup(snakemake.log[0], snakemake.threads)
if snakemake.rule == "compress_index":
    compress.write_faiss_index(snakemake.input[0], snakemake.output[0], progress=True)
    log.info("FAISS index of %s -> %s", snakemake.input[0], snakemake.output[0])
else:
    e = snakemake.params.entry
    method = compress.job_model(snakemake.input.model, snakemake.wildcards.name)
    log.info("%s", compress.describe(compress.provenance(method, e["side"])))
    kw = dict(group=e["group"], id_column=e["id_column"], vector_column=e["vector_column"], progress=True,
              side=e["side"], allow_zero_rows=e["allow_zero_rows"], allow_duplicate_ids=e["allow_duplicate_ids"])
    vectors = snakemake.input.vectors[0]
    # a factory index FAISS refuses, or cannot fill as a stream, is refused here, before any row is read
    index = compress.index_options(e["faiss_index"], e["faiss_train_size"], e["faiss_seed"], method.k,
                                   compress.open_sets(vectors, e["group"], e["id_column"], e["vector_column"]),
                                   compress.option_names(snakemake.wildcards.name))
    if snakemake.rule == "compress_part":
        compress.compress_part(method, vectors, snakemake.output[0], snakemake.wildcards.shard, **kw)
        log.info("rows %s of %s -> %s", snakemake.wildcards.shard, vectors, snakemake.output[0])
    elif snakemake.input.parts:
        compress.gather(method, vectors, snakemake.input.parts, snakemake.output[0], e["encoding"], faiss_index=index,
                        **kw)
        log.info("gathered %d parts of %s -> %s (%s)", len(snakemake.input.parts), vectors, snakemake.output[0],
                 e["encoding"])
    else:
        compress.compress_file(method, vectors, snakemake.output[0], e["encoding"], faiss_index=index, **kw)
        log.info("%s -> %s (%s)", vectors, snakemake.output[0], e["encoding"])
