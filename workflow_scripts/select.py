"""Rule select: validation result records of a selection study's candidates -> its selection record."""
import _dive_path  # noqa: F401  (this checkout's dive_core on sys.path; keep first)
from dive_core import records, runlog
from dive_core.data import sha256_file
from dive_core.selection import select

log = runlog.setup(snakemake.log[0])
p = snakemake.params
results = [records.read("result", path) for path in snakemake.input.results]
w = snakemake.wildcards
out = select(w.study, p.candidates, results, p.datasets, int(p.seed), groups=p.groups, reference=p.reference,
             backbone=w.backbone)
out["inputs"] = {path: sha256_file(path) for path in snakemake.input.results}
records.write("selection", snakemake.output[0], out)
for base, entry in out["methods"].items():
    log.info("%s: %s picked (mean validation %s %.4f)", base, entry["pick"]["overrides"] or "fixed point",
             out["metric"], entry["pick"]["mean"])
