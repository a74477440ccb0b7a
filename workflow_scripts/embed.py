"""Rules embed and embed_part: staged dataset -> HDF5 of frozen corpus and judged-query
embeddings, in one job, or in parts (embed_part) that rule embed then gathers; a backbone of
family `vectors` ingests its vector files instead of encoding."""
import _dive_path  # noqa: F401  (this checkout's dive_core on sys.path; keep first)
from pathlib import Path

from dive_core import backbones, data, embeddings, provenance, runlog, splits, vectors

log = runlog.setup(snakemake.log[0], snakemake.threads)
if snakemake.rule == "embed" and snakemake.input.parts:
    embeddings.gather_embeddings(snakemake.input.parts, snakemake.output[0])
else:
    ds = data.load_staged(Path(snakemake.input[0]).parent)
    spec = snakemake.params.spec
    doc_ids = ds.doc_ids
    query_ids = splits.judged_queries(ds.relevant())
    attrs = {"dataset": snakemake.wildcards.dataset, "source_fingerprint": ds.fingerprint,
             "versions": provenance.versions(), "runtime": provenance.runtime(snakemake.threads)}
    if spec["family"] == "vectors":
        done = vectors.ingest(snakemake.wildcards.backbone, spec, snakemake.wildcards.dataset, doc_ids, query_ids,
                              set(ds.queries), snakemake.output[0], attrs)
        log.info("ingested %s in %.1fs from %s", snakemake.output[0], done["seconds"], done["sources"])
    else:
        bb = backbones.build_backbone(snakemake.wildcards.backbone, spec, snakemake.params.instruction,
                                      snakemake.params.device)
        texts = dict(doc_ids=doc_ids, doc_texts=[ds.doc_text(d) for d in doc_ids], query_ids=query_ids,
                     query_texts=[ds.queries[q] for q in query_ids])
        if snakemake.rule == "embed_part":
            embeddings.embed_part(bb, snakemake.wildcards.part, **texts, out_path=snakemake.output[0],
                                  batch_size=int(spec["batch_size"]), extra_attrs=attrs)
        else:
            embeddings.embed_dataset(bb, **texts, out_path=snakemake.output[0], batch_size=int(spec["batch_size"]),
                                     extra_attrs=attrs)
