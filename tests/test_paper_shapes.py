"""The paper's dimensions through the whole workflow: generated 4096d vectors of the generated test
collection (the shape of LLM2Vec-Mistral's embeddings) given as a ``family: vectors`` backbone, then
splits, triplets, every trained method at k = 128 and k = 256, DIVE with H up to 32 (k*H <= d),
evaluation and the tables, as `snakemake all` runs them (config/test.yaml's epochs)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from dive_core import generated

pytestmark = pytest.mark.workflow

REPO = Path(__file__).resolve().parent.parent
D = 4096
METHODS = ("frozen", "truncate", "pca", "autoencoder", "mrl", "search_adaptor", "smec", "dive")


def write_vectors(beir_root: Path, out: Path, d: int = D, seed: int = 0) -> dict[str, Path]:
    """Vectors for every document and query of generated-tiny: each topic a random direction,
    a document its topic's direction plus noise, a judged query the mean of its relevant documents
    plus noise (so that retrieval has something to find). Written as Parquet, documents in reverse
    order (ingesting puts them in the staged order)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dive_core.data import load_beir

    ds = load_beir(beir_root / generated.SUBDIR)
    rng = np.random.default_rng(seed)
    doc_ids = list(ds.corpus)[::-1]
    topics = rng.standard_normal((25, d)).astype(np.float32)
    docs = {i: topics[n % 25] + 0.8 * rng.standard_normal(d).astype(np.float32) for n, i in enumerate(doc_ids)}
    qrels = ds.qrels["test"]
    queries = {}
    for q in ds.queries:
        rel = [docs[x] for x, s in qrels.get(q, {}).items() if s > 0]
        base = np.mean(rel, axis=0) if rel else rng.standard_normal(d).astype(np.float32)
        queries[q] = base + 0.5 * rng.standard_normal(d).astype(np.float32)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for role, table in (("corpus", docs), ("queries", queries)):
        mat = np.stack(list(table.values())).astype(np.float32)
        vec = pa.FixedSizeListArray.from_arrays(pa.array(mat.reshape(-1)), d)
        paths[role] = out / f"{role}.parquet"
        pq.write_table(pa.table({"id": list(table), "embedding": vec}), paths[role])
    return paths


def test_the_papers_4096d_shapes_run_every_method_study_and_table(generated_beir, tmp_path):
    vec = write_vectors(generated_beir, tmp_path / "vectors" / generated.NAME)
    config = {
        "backbone": "llm4096",
        "backbones": {"llm4096": {"family": "vectors", "dim": D, "dims": {"primary": 128, "secondary": 256},
                                  "corpus": str(tmp_path / "vectors" / "{dataset}" / "corpus.parquet"),
                                  "queries": str(tmp_path / "vectors" / "{dataset}" / "queries.parquet")}},
        # the studies that cover every trained method (main at k = 128, secondary at k = 256) and every
        # H (heads); the other studies add only more runs of the same methods at these shapes
        "experiments": {"heads": {"heads": [2, 4, 8, 16, 32]},
                        # csr, arrival_csr: CSR's 4 x 4096 = 16,384 latents (a 67M-weight encoder) and the
                        # learning-rate audit behind csr-tuned would add most of this test's time
                        **{name: {"enabled": False} for name in ("lr_audit", "tuned", "ablation", "unsupervised",
                                                                 "doc_disjoint", "efficiency", "frontier",
                                                                 "arrival", "arrival_codes", "csr", "arrival_csr",
                                                                 "budget", "budget_arrival")}},
        # SMEC needs one epoch for each of its 5 stages at 4096 -> 128 (plan.check refuses 3)
        "methods": {"smec": {"epochs": 5}},
    }
    (tmp_path / "llm4096.yaml").write_text(yaml.safe_dump(config))
    work = tmp_path / "wf"
    work.mkdir()
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(work),
           "--cores", "2", "all", "--configfile", str(REPO / "config" / "test.yaml"),
           str(tmp_path / "llm4096.yaml")]
    proc = subprocess.run(cmd, cwd=work, env={**os.environ, "BEIR_DATA_DIR": str(generated_beir)},
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]

    import h5py

    with h5py.File(work / "results" / generated.NAME / "llm4096" / "embeddings.h5") as f:
        assert f["corpus/emb"].shape == (500, D) and f.attrs["family"] == "vectors"
        sources = json.loads(f.attrs["sources"])
    assert sources["corpus"]["sha256"] == __import__("dive_core.vectors", fromlist=["x"]).sha256_file(vec["corpus"])

    def runs(name):
        with open(work / "results" / "tables" / f"{name}_runs.tsv", encoding="utf-8", newline="") as fh:
            return list(csv.DictReader(fh, delimiter="\t"))

    main = runs("main")
    assert {(r["method"], int(r["k"])) for r in main} == {(m, D if m == "frozen" else 128)
                                                          for m in (*METHODS, "dive-pca")}  # main adds DIVE in PCA's frame
    assert {r["backbone"] for r in main} == {"llm4096"}
    assert {(r["method"], int(r["k"])) for r in runs("secondary")} >= {(m, 256) for m in METHODS if m != "frozen"}
    heads = {r["method"]: r for r in runs("heads")}
    assert set(heads) == {"dive-h2", "dive", "dive-h8", "dive-h16", "dive-h32"}
    ckpt = work / "results" / generated.NAME / "llm4096" / "dive-h32" / "k128" / "select" / "seed2027" / "model.pt"
    from dive_core.methods import Method

    m = Method.load(ckpt)
    assert (m.d, m.k, m.hp["heads"]) == (D, 128, 32)
    # the supervised methods found the planted structure: far above chance on the test queries
    ndcg = {r["method"]: float(r["ndcg@10"]) for r in main}
    assert ndcg["frozen"] > 0.5 and ndcg["dive"] > 0.3, ndcg
    for name in ("main", "secondary", "heads", "dynamics"):
        assert (work / "results" / "tables" / f"{name}.md").stat().st_size > 0
