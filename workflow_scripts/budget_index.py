"""Rule budget_index: a budget study's pick at one budget -> the corpus through the picked map, the FAISS
index of the picked code (as dive-compress writes them) and a card: the pick, its validation and test
scores (the budget study's), the index's own search of the test queries, the command, the machine."""
import _dive_path  # noqa: F401  (this checkout's dive_core on sys.path; keep first)
from dive_core import job_server

job_server.delegate()  # a torch job: runs as a fork of the run's job server where one serves it
from dive_core import provenance, runlog
from dive_core.atomic import write_json
from dive_core.compress.cli import code_index
from dive_core.studies.budget import index_card

log = runlog.setup(snakemake.log[0], snakemake.threads)
w, inp, out, p = snakemake.wildcards, snakemake.input, snakemake.output, snakemake.params
made = code_index(inp.checkpoint, inp.embeddings, p.pick["encoding"], out.vectors, out.index,
                  threads=snakemake.threads)
card = index_card(w.experiment, int(w.budget), dict(p.pick), made, inp, out, int(p.top_k), p.max_latency_ms)
card.update(versions=provenance.versions(), runtime=provenance.runtime(snakemake.threads))
write_json(out.card, card)
log.info("%s at %s B: %s, test nDCG@10 %.4f through the index (the frontier's %.4f)", w.dataset, w.budget,
         card["code"], card["index_test"]["ndcg@10"], card["frontier_test"]["ndcg@10"])
