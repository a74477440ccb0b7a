"""Rule make_splits: staged dataset -> split manifest JSON."""
import _dive_path  # noqa: F401  (this checkout's dive_core on sys.path; keep first)
from pathlib import Path

from dive_core import data, records, runlog, splits

log = runlog.setup(snakemake.log[0])
ds = data.load_staged(Path(snakemake.input[0]).parent)
manifest = splits.make_manifest(ds, snakemake.wildcards.dataset, int(snakemake.params.seed),
                                tuple(snakemake.params.fractions), snakemake.params.queries_in_corpus)
records.write("splits", snakemake.output[0], manifest)
log.info("split %s: %s; seen/total per role: %s", snakemake.wildcards.dataset, manifest["counts"],
         {r: f"{v['n_seen']}/{v['n_queries']}" for r, v in manifest["document_overlap"].items()})
log.info("queries that are their own corpus document (%s): %d", manifest["identical_ids"]["rule"],
         manifest["identical_ids"]["n"])
