"""Rule select: validation result records of a selection study's candidates -> its selection record."""
import _dive_path  # noqa: F401  (this checkout's dive_core on sys.path; keep first)
from datetime import datetime, timezone

from dive_core import records, runlog
from dive_core.data import sha256_file
from dive_core.evaluation import read_per_query, stratum_means
from dive_core.selection import select, select_arrival

log = runlog.setup(snakemake.log[0])
p = snakemake.params
results = [records.read("result", path) for path in snakemake.input.results]
w = snakemake.wildcards
inputs = list(snakemake.input.results)
if w.study == "arrival_variants":  # scored on the strata of the arrival split's validation queries
    manifests = {m["dataset"]: (m, path) for m, path in
                 ((records.read("arrival", path), path) for path in snakemake.input.arrival)}
    strata = [stratum_means(read_per_query(pq), manifests[r["dataset"]][0]["strata"][r["role"]], "ndcg@10", pq,
                            f"{r['role']} queries of {manifests[r['dataset']][1]}")
              for r, pq in zip(results, snakemake.input.per_query, strict=True)]
    out = select_arrival(p.candidates, results, strata, p.datasets, int(p.seed), p.arrival["references"],
                         p.arrival["tolerance"], groups=p.groups, backbone=w.backbone)
    inputs += list(snakemake.input.per_query) + list(snakemake.input.arrival)
    # when the pick was frozen (the arrival table shows it before any test number); the other
    # selection records stay byte-reproducible
    out["created_utc"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
else:
    out = select(w.study, p.candidates, results, p.datasets, int(p.seed), groups=p.groups, reference=p.reference,
                 backbone=w.backbone)
out["inputs"] = {path: sha256_file(path) for path in inputs}
records.write("selection", snakemake.output[0], out)
for base, entry in out["methods"].items():
    log.info("%s: %s picked (mean validation %s %.4f)", base, entry["pick"]["overrides"] or "fixed point",
             out["metric"], entry["pick"]["mean"])
