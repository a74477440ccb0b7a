"""Rules embed and embed_part: staged dataset -> HDF5 of frozen corpus and judged-query
embeddings, in one job, or in parts (embed_part) that rule embed then gathers; a backbone of
family `vectors` ingests its vector files instead of encoding; an LLM2Vec backbone is embedded
in its own environment (dive_core.embed_job, dive_core.environments)."""
import _dive_path  # noqa: F401  (this checkout's dive_core on sys.path; keep first)
from dive_core import job_server

# a torch job: runs as a fork of the run's job server where one serves it (one with sentence-transformers
# imported where the job encodes with it)
job_server.delegate(job_server.SENTENCE_TRANSFORMERS if snakemake.params.spec["family"] == "sentence_transformers"
                    and not snakemake.input.get("parts") else ())

from dive_core import embed_job

embed_job.run_job({
    "rule": snakemake.rule, "wildcards": dict(snakemake.wildcards.items()), "source": snakemake.input[0],
    "parts": list(snakemake.input.get("parts", [])), "output": snakemake.output[0], "log": snakemake.log[0],
    "threads": snakemake.threads, "spec": snakemake.params.spec, "instruction": snakemake.params.instruction,
    "device": snakemake.params.device,
})
