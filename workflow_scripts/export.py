"""Rule export: checkpoint + result JSON -> sentence-transformers folder / compressor + model card."""
import _dive_path  # noqa: F401  (this checkout's dive_core on sys.path; keep first)
from dive_core import records, runlog
from dive_core.export import export

log = runlog.setup(snakemake.log[0])
out = export(snakemake.input.checkpoint, snakemake.output[0], records.read("result", snakemake.input.result))
log.info("exported %s to %s", snakemake.input.checkpoint, out)
