"""Rule export: checkpoint + result JSON -> sentence-transformers folder / compressor + model card.
The backbone comes from the plan (params.backbone), the metrics of the model card from the result."""
import _dive_path  # noqa: F401  (this checkout's dive_core on sys.path; keep first)
from dive_core import job_server

# a torch job: runs as a fork of the run's job server where one serves it (one with sentence-transformers
# imported where the job encodes with it)
job_server.delegate(job_server.SENTENCE_TRANSFORMERS)
from dive_core import records, runlog
from dive_core.export import export

log = runlog.setup(snakemake.log[0])
out = export(snakemake.input.checkpoint, snakemake.output[0], records.read("result", snakemake.input.result),
             backbone_spec=snakemake.params.backbone)
log.info("exported %s to %s", snakemake.input.checkpoint, out)
