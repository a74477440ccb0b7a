"""Rule embed: staged dataset -> HDF5 of frozen corpus and judged-query embeddings."""
import _dive_path  # noqa: F401  (this checkout's dive_core on sys.path; keep first)
from pathlib import Path

from dive_core import backbones, data, embeddings, provenance, runlog, splits

log = runlog.setup(snakemake.log[0], snakemake.threads)
ds = data.load_staged(Path(snakemake.input[0]).parent)
spec = snakemake.params.spec
bb = backbones.build_backbone(snakemake.wildcards.backbone, spec, snakemake.params.instruction,
                              snakemake.params.device)
doc_ids = ds.doc_ids
query_ids = splits.judged_queries(ds.relevant())
embeddings.embed_dataset(
    bb, doc_ids, [ds.doc_text(d) for d in doc_ids], query_ids, [ds.queries[q] for q in query_ids],
    snakemake.output[0], int(spec["batch_size"]),
    extra_attrs={"dataset": snakemake.wildcards.dataset, "source_fingerprint": ds.fingerprint,
                 "versions": provenance.versions(), "runtime": provenance.runtime(snakemake.threads)},
)
