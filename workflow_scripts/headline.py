"""Rule headline_result: copy the canonical held-out result to results/{dataset}/{method}/seed{seed}.json."""
import _dive_path  # noqa: F401  (this checkout's dive_core on sys.path; keep first)
import shutil

from dive_core import runlog
from dive_core.atomic import atomic_path

log = runlog.setup(snakemake.log[0])
with atomic_path(snakemake.output[0]) as tmp:
    shutil.copyfile(snakemake.input[0], tmp)
log.info("%s -> %s", snakemake.input[0], snakemake.output[0])
