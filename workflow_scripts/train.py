"""Rule train: frozen embeddings + split (+ triplets) -> checkpoint + per-epoch log TSV."""
import _dive_path  # noqa: F401  (this checkout's dive_core on sys.path; keep first)
from dive_core import job_server

# a torch job: runs as a fork of the run's job server where one serves it (one with sentence-transformers
# imported where the job encodes with it)
job_server.delegate(job_server.SENTENCE_TRANSFORMERS if snakemake.params.type == "csr" else ())
import time

from dive_core import provenance, records, runlog, splits
from dive_core.backbones import pick_device
from dive_core.compress import drift
from dive_core.data import sha256_file
from dive_core.embeddings import read_embeddings
from dive_core.methods import new_method
from dive_core.selection import apply_selection
from dive_core.training import TrainLog, fit_data, write_log_tsv

log = runlog.setup(snakemake.log[0], snakemake.threads)
w, p, inp = snakemake.wildcards, snakemake.params, snakemake.input
hp = p.hparams
selected = None
if "selection" in inp.keys():  # hyperparameters picked on validation queries (rule select)
    hp, over = apply_selection(hp, records.read("selection", inp.selection), p.selected, w.backbone)
    selected = {"from": p.selected, "overrides": over, "selection_sha256": sha256_file(inp.selection)}
    log.info("hyperparameters from %s: %s", inp.selection, over)
device = pick_device(p.device)
manifest = records.read("splits", inp.splits)
emb = read_embeddings(inp.embeddings, expected_source=manifest["source_fingerprint"], against=inp.splits)
train_qids = splits.train_queries(manifest, w.stage)
fingerprints = {}
fit_docs = None  # every document, but under the arrival protocol: the known ones only
if "arrival" in inp.keys():
    arrival = records.read("arrival", inp.arrival)
    splits.check_arrival(arrival, inp.arrival, inp.splits)
    fit_docs = splits.known_docs(emb.doc_ids, arrival)
    train_qids = splits.known_queries(train_qids, manifest, arrival)
    fingerprints = {"arrival_sha256": sha256_file(inp.arrival), "fit_docs_sha256": splits.ids_sha256(fit_docs)}
    log.info("arrival: the fit sees %d of %d documents", len(fit_docs), len(emb.doc_ids))
data = fit_data(emb, train_qids, inp.get("triplets"), device, doc_ids=fit_docs)
method = new_method(p.type, emb.dim, int(w.k), hp, int(w.seed), device, p.precision)
train_log = TrainLog(on_epoch=lambda r: log.info("epoch %s", {k: (round(v, 5) if isinstance(v, float) else v)
                                                              for k, v in r.items()}))
t0 = time.perf_counter()
method.fit(data, train_log)
train_seconds = time.perf_counter() - t0
method.meta["fit_statistics"] = drift.fit_statistics(method, data.docs)  # the drift guard's reference
meta = records.checkpoint_meta(
    dataset=w.dataset, backbone=w.backbone, method=w.method, method_type=p.type, stage=w.stage, k=int(w.k),
    seed=int(w.seed), device=device, precision=p.precision, negatives=p.negatives if "triplets" in inp.keys() else None,
    n_triplets=data.n_triplets, n_train_queries=len(train_qids), selected=selected, train_seconds=train_seconds,
    final_epoch=train_log.rows[-1] if train_log.rows else None,
    fingerprints={
        "source": manifest["source_fingerprint"],
        "splits_sha256": sha256_file(inp.splits),
        "embeddings_content_sha256": emb.attrs["content_sha256"],
        "triplets_sha256": sha256_file(inp.triplets) if "triplets" in inp.keys() else None,
        **fingerprints,
    },
    versions=provenance.versions(), runtime=provenance.runtime(snakemake.threads),
)
method.save(snakemake.output.checkpoint, meta)
write_log_tsv(snakemake.output.log, train_log)
log.info("trained %s (%s) k=%s seed=%s stage=%s in %.1fs", w.method, p.type, w.k, w.seed, w.stage, train_seconds)
