"""The embedding job of rules embed and embed_part, in whichever environment it must run.

:func:`run_job` takes the job's plain description; a backbone whose family needs an environment
of its own (:mod:`dive_core.environments`: LLM2Vec) is embedded by re-running the same
description with that environment's interpreter (``python -m dive_core.embed_job job.json``),
unless its libraries import here. The HDF5 store and the encoding loop are
:mod:`dive_core.embeddings`.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Mapping

from . import backbones, data, embeddings, environments, provenance, runlog, splits, vectors


def run_job(job: Mapping[str, Any]) -> None:
    """One embed / embed_part job from its plain description (what the rule passes: ``rule``,
    ``wildcards``, ``source`` (the staged source.json), ``parts``, ``output``, ``log``,
    ``threads``, ``spec``, ``instruction``, ``device``). A backbone whose family needs an
    environment of its own (:mod:`dive_core.environments`) is embedded by that environment's
    interpreter, on the same description, unless its libraries import here."""
    logger = runlog.setup(job["log"], job["threads"])
    spec, w = job["spec"], job["wildcards"]
    if job["rule"] == "embed" and job["parts"]:
        embeddings.gather_embeddings(job["parts"], job["output"])
        return
    env = environments.for_family(spec["family"])
    if env is not None and not environments.runs_here(env):
        if os.environ.get(environments.INSIDE) == env.name:
            raise RuntimeError(f"backbone {w['backbone']!r}: the {env.name} environment ({sys.executable}) cannot "
                               f"import {env.probe!r}; rebuild it: make venv-{env.name}")
        logger.info("backbone %s (family %s): embedding in the %s environment (%s)", w["backbone"], spec["family"],
                    env.name, env.python)
        environments.run_in(env, "dive_core.embed_job", job)
        return
    ds = data.load_staged(Path(job["source"]).parent)
    doc_ids = ds.doc_ids
    query_ids = splits.judged_queries(ds.relevant())
    attrs = {"dataset": w["dataset"], "source_fingerprint": ds.fingerprint,
             "versions": provenance.versions(), "runtime": provenance.runtime(job["threads"])}
    if spec["family"] == "vectors":
        done = vectors.ingest(w["backbone"], spec, w["dataset"], doc_ids, query_ids, set(ds.queries), job["output"],
                              attrs)
        logger.info("ingested %s in %.1fs from %s", job["output"], done["seconds"], done["sources"])
        return
    bb = backbones.build_backbone(w["backbone"], spec, job["instruction"], job["device"])
    texts = dict(doc_ids=doc_ids, doc_texts=[ds.doc_text(d) for d in doc_ids], query_ids=query_ids,
                 query_texts=[ds.queries[q] for q in query_ids])
    if job["rule"] == "embed_part":
        embeddings.embed_part(bb, w["part"], **texts, out_path=job["output"], batch_size=int(spec["batch_size"]),
                   extra_attrs=attrs)
    else:
        embeddings.embed_dataset(bb, **texts, out_path=job["output"], batch_size=int(spec["batch_size"]), extra_attrs=attrs)


if __name__ == "__main__":  # python -m dive_core.embed_job <job.json>: a job in another environment
    with open(sys.argv[1], encoding="utf-8") as _fh:
        run_job(json.load(_fh))
