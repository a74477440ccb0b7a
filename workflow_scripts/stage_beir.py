"""Rule stage_beir: local BEIR copy or verified zip -> data/beir/{dataset}/ + source.json.

The local directory is read from the config (beir_data_dir) or $BEIR_DATA_DIR here rather
than passed as a rule parameter, so that moving byte-identical data elsewhere does not
invalidate every downstream artifact; the fingerprints in source.json guard the content."""
import _dive_path  # noqa: F401  (this checkout's dive_core on sys.path; keep first)
from pathlib import Path

from dive_core import config as dcfg
from dive_core import data, runlog

log = runlog.setup(snakemake.log[0])
entry = snakemake.params.entry
dest = Path(snakemake.output[0]).parent
local = dcfg.local_beir_dir(snakemake.config)
if snakemake.input:
    manifest = data.stage_dataset(snakemake.wildcards.dataset, entry, dest, zip_path=snakemake.input[0],
                                  on_missing=snakemake.params.on_missing)
elif local:
    manifest = data.stage_dataset(snakemake.wildcards.dataset, entry, dest, local_dir=local,
                                  mode=snakemake.params.mode, on_missing=snakemake.params.on_missing)
else:
    raise data.DataError(
        f"dataset {snakemake.wildcards.dataset!r} is local-only: set beir_data_dir in the config "
        f"or {dcfg.ENV_BEIR} to the BEIR directory that contains {entry['subdir']}")
log.info("staged %s: %s", snakemake.wildcards.dataset, manifest["counts"])
