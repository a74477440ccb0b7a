"""Rule download_beir: official BEIR zip -> data/beir/_zips/{zip}.zip, refused unless its
sha256 matches the registry."""
import _dive_path  # noqa: F401  (this checkout's dive_core on sys.path; keep first)
from dive_core import data, runlog

log = runlog.setup(snakemake.log[0])
sha = data.download_zip(snakemake.params.url, snakemake.output[0], snakemake.params.sha256)
log.info("downloaded %s (sha256 %s verified)", snakemake.params.url, sha)
