"""Rule make_arrival: staged dataset + split manifest -> arrival manifest JSON (the documents that
arrive after training, and the stratum of every evaluated query)."""
import _dive_path  # noqa: F401  (this checkout's dive_core on sys.path; keep first)
from pathlib import Path

from dive_core import data, records, runlog, splits
from dive_core.data import sha256_file

log = runlog.setup(snakemake.log[0])
inp, a = snakemake.input, snakemake.params.arrival
manifest = records.read("splits", inp.splits)
ds = data.load_staged(Path(inp.source).parent)
data.check_same_source(manifest["source_fingerprint"], ds.fingerprint, inp.splits, inp.source,
                       remedy=f"delete {inp.splits} and rerun to split the staged data")
arrival = splits.make_arrival_manifest(ds, manifest, int(a["seed"]), float(a["fraction"]),
                                       float(a["new_query_share"]), splits_sha256=sha256_file(inp.splits))
records.write("arrival", snakemake.output[0], arrival)
log.info("arrival %s: %s", snakemake.wildcards.dataset, arrival["counts"])
