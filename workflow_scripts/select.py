"""Rule select: validation results of a selection study's candidates -> the pick (JSON)."""
import _dive_path  # noqa: F401  (this checkout's dive_core on sys.path; keep first)
from dive_core import runlog, studies
from dive_core.atomic import read_json, write_json
from dive_core.data import sha256_file

log = runlog.setup(snakemake.log[0])
p = snakemake.params
results = [read_json(path) for path in snakemake.input.results]
out = studies.select(snakemake.wildcards.study, p.candidates, results, p.datasets, int(p.seed),
                     groups=p.groups, reference=p.reference)
out["inputs"] = {path: sha256_file(path) for path in snakemake.input.results}
write_json(snakemake.output[0], out)
for base, entry in out["methods"].items():
    log.info("%s: %s picked (mean validation %s %.4f)", base, entry["pick"]["overrides"] or "fixed point",
             out["metric"], entry["pick"]["mean"])
