"""CSR (dive_core/methods/csr.py): the code and the loss equal sentence-transformers' own
SparseAutoEncoder / CSRLoss on the same weights and batches, step after step; k-sparse codes through
Method.compress and the evaluation; exact search over sparse codes (dive_core/sparse.py), ties included;
the bytes of a stored code; the export (compressor alone)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from dive_core.methods import new_method
from dive_core.methods.specs import SPECS
from dive_core.training import TrainLog
from synthetic import make_problem

D, H, TOPK = 32, 128, 4
HP = dict(expansion=H // D, topk=TOPK, k_aux=16, dead_threshold=2, beta=0.1, gamma=1.0, lr=1e-2, epochs=8,
          batch_size=32, weight_decay=0.0)
FREE = {k: v for k, v in HP.items() if k != "gamma"}
TERMS = {"reconstruction_loss_k": "reconstruction", "reconstruction_loss_4k": "reconstruction_4k",
         "reconstruction_loss_aux": "aux", "base_loss": "contrastive"}


@pytest.fixture(scope="module")
def problem():
    torch.set_num_threads(1)
    return make_problem(d=D)


def hparams(mtype, **over):
    return {**(HP if mtype == "csr" else FREE), **over}


def library_model(hp):
    """sentence-transformers' SparseEncoder around its SparseAutoEncoder, configured from ``hp``."""
    from sentence_transformers.sparse_encoder import SparseEncoder
    from sentence_transformers.sparse_encoder.modules import SparseAutoEncoder

    width = hp["expansion"] * D
    sae = SparseAutoEncoder(input_dim=D, hidden_dim=width, k=hp["topk"], k_aux=min(hp["k_aux"], width),
                            dead_threshold=hp["dead_threshold"])
    return SparseEncoder(modules=[sae], device="cpu")


def against_library(problem, mtype, ours, theirs, steps=6):
    """Train ours (``batch_loss``) and the library's objects (``CSRLoss``; for csr_free the
    reconstruction part it sums, ``CSRReconstructionLoss``) side by side from the same weights on the
    same batches; every loss term, the weights and the dead-latent counters after the steps, and the
    codes must be equal. Returns whether some step had dead latents (the auxiliary term's mask)."""
    from sentence_transformers.sparse_encoder.losses import CSRLoss, CSRReconstructionLoss

    m = new_method(mtype, D, H, ours, seed=3)
    lib = library_model(theirs)
    lib[0].load_state_dict(m.net.state_dict())
    loss = (CSRLoss(lib, beta=theirs["beta"], gamma=theirs["gamma"]) if mtype == "csr"
            else CSRReconstructionLoss(lib, beta=theirs["beta"]))
    opts = [torch.optim.AdamW(net.parameters(), lr=1e-2, weight_decay=0.0) for net in (m.net, lib)]
    m.net.train(), lib.train()
    data, g, dead = problem.train, torch.Generator().manual_seed(0), False
    n = data.n_triplets if mtype == "csr" else len(data.docs)
    for _ in range(steps):
        idx = torch.randperm(n, generator=g)[:32]
        got = m.batch_loss(data, idx)
        if mtype == "csr":
            q, p, neg, _, _ = data.triplet_batch(idx)
            ref = loss([{"sentence_embedding": x} for x in (q, p, neg)])
        else:
            ref = loss.compute_loss_from_embeddings([lib({"sentence_embedding": data.docs[idx]})])
        assert {TERMS[key] for key in ref} | {"loss", "dead"} == set(got)
        for key, value in ref.items():
            assert_close(got[TERMS[key]], value.detach(), msg=lambda e, key=key: f"{mtype}: {key}: {e}")
        total = sum(ref.values())
        assert_close(got["loss"].detach(), total.detach())
        dead |= bool(got["dead"] > 0)
        for opt, value in zip(opts, (got["loss"], total)):
            opt.zero_grad()
            value.backward()
            opt.step()
    ref_state = lib[0].state_dict()
    for name, value in m.state_dict().items():
        assert_close(value, ref_state[name], msg=lambda e, name=name: f"{name}: {e}")
    m.net.eval(), lib.eval()
    x = torch.as_tensor(problem.docs)
    with torch.inference_mode():
        code = lib({"sentence_embedding": x.clone()})["sentence_embedding"]
    assert_close(m.transform(x).detach(), code)
    assert_close(torch.as_tensor(m.compress(problem.docs)), torch.nn.functional.normalize(code, dim=-1))
    return dead


@pytest.mark.parametrize("mtype", ["csr", "csr_free"])
def test_code_and_loss_equal_the_librarys_step_after_step(problem, mtype):
    assert against_library(problem, mtype, hparams(mtype), hparams(mtype))  # dead latents were exercised


# one setting changed on our side only: the comparison must fail
BREAKS = [("csr", "topk", 5), ("csr", "gamma", 0.5), ("csr", "beta", 0.2), ("csr", "k_aux", 2),
          ("csr_free", "topk", 5), ("csr_free", "beta", 0.2), ("csr_free", "dead_threshold", 4)]


@pytest.mark.parametrize("mtype,key,value", BREAKS)
def test_the_library_comparison_fails_when_one_setting_differs(problem, mtype, key, value):
    with pytest.raises(AssertionError):
        against_library(problem, mtype, hparams(mtype, **{key: value}), hparams(mtype))


def test_spec_output_dimension_and_refusals():
    s = SPECS["csr"]
    assert s.supervised and not SPECS["csr_free"].supervised
    assert s.dimension(384, 64, {**HP, "expansion": 4}) == 1536  # whatever k an experiment asks for
    with pytest.raises(ValueError, match="output dimension k=64 must be its own, 128"):
        new_method("csr", D, 64, HP, 0)
    with pytest.raises(ValueError, match="'topk' must be at most H/4 = 32"):
        new_method("csr", D, H, {**HP, "topk": 33}, 0)
    with pytest.raises(ValueError, match="missing hyperparameters \\['gamma'\\]"):
        new_method("csr", D, H, FREE, 0)


def test_config_entries_resolve_with_their_own_width():
    from pathlib import Path

    from dive_core import config as dcfg
    from dive_core import plan

    cfg = dcfg.load_yaml(Path(__file__).resolve().parent.parent / "config" / "config.yaml")
    assert cfg["methods"]["csr"]["type"] == "csr" and cfg["methods"]["csr-free"]["type"] == "csr_free"
    for name in ("csr", "csr-free"):
        assert plan.method_k(cfg, "minilm", name) == plan.method_k(cfg, "minilm", name, "secondary") == 4 * 384
        assert plan.needs_triplets(cfg, name) == (name == "csr")
    assert plan.method_k(cfg, "minilm", "csr-k16") == 4 * 384
    # at the configured values: the main code stores the bytes of a primary-dimension float32 vector,
    # the frontier's the smaller budgets; csr's learning rate is audited like every supervised baseline
    hp = {n: plan.method_hparams(cfg, n) for n in ("csr", "csr-free", "csr-k8", "csr-k16", "csr-k32", "csr-tuned")}
    primary = cfg["backbones"]["minilm"]["dims"]["primary"]
    assert SPECS["csr"].active(hp["csr"]) == SPECS["csr_free"].active(hp["csr-free"]) == primary
    assert [hp[n]["topk"] for n in ("csr-k8", "csr-k16", "csr-k32")] == [8, 16, 32]
    assert len(cfg["selection"]["lr_audit"]["csr"]) == 3 and cfg["methods"]["csr-tuned"]["selected"] == "lr_audit/csr"
    exps = cfg["experiments"]
    assert {"csr", "csr-free", "csr-tuned"} <= set(exps["csr"]["methods"])
    assert set(exps["csr"]["versus"]) == {"dive", "dive-pca", "mrl-tuned"} <= set(exps["csr"]["methods"])
    assert {"csr", "csr-free"} <= set(exps["arrival_csr"]["methods"]) and exps["arrival_csr"]["study"] == "arrival"
    assert {"csr-k8", "csr-k16", "csr-k32", "csr", "csr-free"} <= set(exps["frontier"]["methods"])
    assert cfg["efficiency"]["sparse_method"] == "csr"
    assert plan.efficiency_runs(cfg, "minilm")[-1] == ("csr", 4 * 384)


def test_config_refuses_a_versus_outside_the_study_and_a_dense_sparse_method():
    import copy
    from pathlib import Path

    from dive_core import plan
    from dive_core import config as dcfg
    from dive_core.config import ConfigError
    from dive_core.plan.checks import check

    raw = dcfg.load_yaml(Path(__file__).resolve().parent.parent / "config" / "config.yaml")
    registry = dcfg.load_registry(Path(__file__).resolve().parent.parent / "config" / "datasets.yaml")
    check(plan.expand(copy.deepcopy(raw)), registry)
    bad = copy.deepcopy(raw)
    bad["experiments"]["csr"]["versus"] = ["smec"]
    with pytest.raises(ConfigError, match=r"experiments.csr.versus\[0\] = 'smec' is not one of the experiment's"):
        check(plan.expand(bad), registry)
    bad = copy.deepcopy(raw)
    bad["experiments"]["heads"]["versus"] = ["dive"]
    with pytest.raises(ConfigError, match="experiments.heads.versus: only a main or tuned study draws its paired"):
        check(plan.expand(bad), registry)
    bad = copy.deepcopy(raw)
    bad["efficiency"]["sparse_method"] = "dive"
    with pytest.raises(ConfigError, match="efficiency.sparse_method = 'dive' is of type 'dive', whose vectors are dense"):
        check(plan.expand(bad), registry)


@pytest.mark.parametrize("mtype", ["csr", "csr_free"])
def test_fit_and_evaluation_on_k_sparse_codes(problem, mtype, monkeypatch):
    """Training improves retrieval; compress gives unit (n, H) rows with at most topk non-zeros;
    evaluate_method searches them as stored (fp16 values) sparse codes with the per-query metrics of
    the dense search over the same stored values."""
    fit_and_evaluate(problem, mtype, monkeypatch)


def fit_and_evaluate(problem, mtype, monkeypatch):
    from dive_core import retrieval
    from dive_core.embeddings import Embeddings
    from dive_core.evaluation import evaluate_method, evaluate_vectors
    from dive_core.sparse import SparseCorpus

    m = new_method(mtype, D, H, hparams(mtype, lr=3e-3), seed=0)
    before = problem.score(m)
    log = TrainLog()
    m.fit(problem.train, log, progress=False)
    assert problem.score(m) > before + 0.03 and len(log.rows) == HP["epochs"]
    out = m.compress(problem.docs)
    assert out.shape == (len(problem.docs), H) and (out != 0).sum(1).max() <= TOPK
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    assert m.bytes_per_vector() == 4 * TOPK and m.sparse_codes
    qids = problem.val_ids
    manifest = {"ids": {"train": [], "validation": [], "test": qids},
                "qrels": {"train": {}, "validation": {}, "test": problem.val_qrels},
                "stages": {"final": {"train_roles": ["train", "validation"], "eval_role": "test"}},
                "document_overlap": {"test": {"seen_ids": []}},
                "identical_ids": {"ids": [], "rule": "same id and same text"}}
    emb = Embeddings(problem.doc_ids, problem.docs.copy(), qids, problem.val_queries.copy(), {})
    searched = []
    monkeypatch.setattr(retrieval, "SparseCorpus", lambda docs: searched.append(docs.shape) or SparseCorpus(docs))
    per_query, summary = evaluate_method(m, emb, manifest, "final", top_k=10)
    assert searched == [(len(problem.docs), H)]  # the sparse search, not the dense one
    assert summary["dim"] == H and summary["metrics"]["ndcg@10"] > 0
    assert summary["encoding"] == "sparse"  # the corpus as stored: (index, fp16 value) pairs
    dense_q = m.compress(problem.val_queries, side="query")
    stored = out.astype(np.float16).astype(np.float32)
    assert not np.array_equal(stored, out)
    dense, _ = evaluate_vectors(stored, problem.doc_ids, dense_q, manifest, "final", top_k=10, use_gpu=False)
    tied = (dense_q @ out.T > 0).sum(1) < 10  # queries whose top 10 reaches zero scores (ties)
    assert tied.mean() < 0.5
    assert all(per_query[q] == dense[q] for q, t in zip(qids, tied) if not t)
    return m, manifest, out, dense_q, summary


@pytest.mark.parametrize("mtype", ["csr", "csr_free"])
def test_stored_bytes_frontier_row_and_timed_search_of_a_code(problem, mtype, monkeypatch):
    """A code of topk latents is stored in 4 x topk bytes (uint16 index, fp16 value), whatever its
    width; a dense vector in 4 x k. The frontier gives a code one row, its stored form, with the
    evaluation's quality; the efficiency study times it over SparseCorpus with those bytes."""
    from dive_core import efficiency
    from dive_core.methods.specs import stored_bytes

    assert stored_bytes(mtype, 1536, {"topk": 64}) == 256 == stored_bytes("dive", 64, {})
    assert stored_bytes(mtype, 70000, {"topk": 16}) == 96  # uint32 indices past 65,536 latents
    m, manifest, out, queries, summary = fit_and_evaluate(problem, mtype, monkeypatch)
    assert m.active == TOPK and m.sparse_codes and m.bytes_per_vector() == 4 * TOPK
    dense = new_method("pca", D, 8, {}, 0)
    assert dense.active is None and not dense.sparse_codes and dense.bytes_per_vector() == 32
    (row,) = efficiency.frontier_rows(mtype, H, out, queries, problem.doc_ids, manifest, "final", 10, active=TOPK)
    assert row["encoding"] == "sparse" and row["bytes_per_vector"] == 4 * TOPK and row["active"] == TOPK
    assert row["ndcg@10"] == summary["metrics"]["ndcg@10"] and row["dim"] == H
    scores = row["per_query"]["ndcg@10"]  # per query, for the frontier's paired tests
    (timed,) = efficiency.frontier_rows(mtype, H, out, queries, problem.doc_ids, manifest, "final", 10, active=TOPK,
                                        latency_queries=3)  # a latency limit times the exact sparse search too
    assert timed.pop("latency_ms") > 0 and timed == row
    assert len(scores) == summary["n_queries"] and sum(scores) / len(scores) == pytest.approx(row["ndcg@10"])
    dense_rows = efficiency.frontier_rows(mtype, H, out, queries, problem.doc_ids, manifest, "final", 10)
    assert [r["encoding"] for r in dense_rows][0] == "float32" and dense_rows[0]["bytes_per_vector"] == 4 * H
    rows = efficiency.measure([("frozen", D, problem.docs, problem.val_queries),
                               (mtype, H, out, queries, TOPK)], 10.0, n_single=5, repeats=1, warmup=1)
    assert [r["active"] for r in rows] == [None, TOPK]
    assert rows[1]["bytes_per_vector"] == 4 * TOPK and rows[1]["index_bytes"] == len(out) * 4 * TOPK
    assert rows[1]["memory_ratio_to_full"] == 4 * D / (4 * TOPK) and rows[1]["latency_ms_median"] > 0
    # the bound reads what the search holds: FAISS the stored vectors, scipy float32 values and int32 indices
    assert rows[0]["searched_bytes"] == rows[0]["index_bytes"]
    nnz = int((out.astype(np.float16) != 0).sum())  # the non-zeros as stored
    assert rows[1]["searched_bytes"] == 8 * nnz + 4 * (H + 1) > rows[1]["index_bytes"] >= 4 * nnz


# --------------------------------------------------------------------------- sparse search
def random_codes(rng, n, width, active, levels=None):
    x = np.zeros((n, width), np.float32)
    for row in x:
        cols = rng.choice(width, active, replace=False)
        row[cols] = rng.choice(levels, active) if levels is not None else rng.random(active) + 0.01
    return x


def reference_top(docs, queries, k):
    """Scores in float64 (exact for dyadic values), best first, lower row first among ties."""
    s = queries.astype(np.float64) @ docs.astype(np.float64).T
    rows = np.stack([np.lexsort((np.arange(len(docs)), -r))[:k] for r in s])
    return np.take_along_axis(s, rows, 1), rows


def test_sparse_search_equals_dense_search_without_ties():
    from dive_core.retrieval import FlatCorpus, search
    from dive_core.sparse import SparseCorpus, sparse_rows

    rng = np.random.default_rng(0)
    docs, queries = random_codes(rng, 300, 32, 16), random_codes(rng, 40, 32, 16)  # every pair shares latents
    s_dense, r_dense = FlatCorpus(docs).search(queries, 10)
    s_sparse, r_sparse = SparseCorpus(sparse_rows(docs)).search(sparse_rows(queries), 10)
    assert np.array_equal(r_sparse, r_dense)
    assert_close(s_sparse, s_dense)
    ids, qids = [f"d{i}" for i in range(300)], [f"q{i}" for i in range(40)]
    a = search(docs, ids, queries, qids, top_k=10, use_gpu=False)
    b = search(sparse_rows(docs), ids, sparse_rows(queries), qids, top_k=10)
    assert [list(a[q]) for q in qids] == [list(b[q]) for q in qids]


def test_sparse_search_breaks_ties_by_the_lower_row_as_the_gpu_search():
    """Codes with few distinct values and repeated rows: many equal scores, at the cut too (zero
    scores included). The sparse search keeps and orders tied rows lower row first, as the dense
    PyTorch search (TorchCorpus, here on the CPU) and an exact float64 reference do; FAISS's CPU
    kernel returns the same scores."""
    from dive_core.retrieval import TIE_MARGIN, FlatCorpus, TorchCorpus, search
    from dive_core.sparse import SparseCorpus, sparse_rows, top_rows

    rng = np.random.default_rng(1)
    base = random_codes(rng, 12, 64, 4, levels=[0.25, 0.5, 1.0])
    docs = base[rng.integers(0, 12, 90)]
    queries = random_codes(rng, 30, 64, 4, levels=[0.5, 1.0])
    s_ref, r_ref = reference_top(docs, queries, 10)
    s, r = SparseCorpus(docs).search(sparse_rows(queries), 10)
    assert (np.diff(s_ref, axis=1) == 0).any() and (s_ref[:, -1] == 0).any()  # ties, some at zero at the cut
    assert np.array_equal(r, r_ref) and np.array_equal(s, s_ref.astype(np.float32))
    scores = queries @ docs.T  # queries whose tie group at the cut lies within TorchCorpus's margin
    few = queries[(scores >= np.sort(scores, axis=1)[:, -10:-9]).sum(1) <= 10 + TIE_MARGIN]
    top11 = -np.sort(-(few @ docs.T), axis=1)[:, 9:11]
    assert (top11[:, 0] == top11[:, 1]).sum() >= 3  # ties across the cut among them too
    s_t, r_t = TorchCorpus(docs, device="cpu").search(few, 10)
    s_f, _ = FlatCorpus(docs).search(few, 10)
    s_s, r_s = SparseCorpus(docs).search(few, 10)
    assert len(few) > 5 and np.array_equal(r_s, r_t) and np.array_equal(s_s, s_t) and np.array_equal(s_s, s_f)
    assert np.array_equal(top_rows(np.array([[1.0, 2.0, 2.0, 0.0, 2.0]], np.float32), 2)[1], [[1, 2]])
    ids, qids = [f"d{i}" for i in range(90)], [f"q{i}" for i in range(30)]
    run = search(sparse_rows(docs), ids, queries, qids, top_k=10)
    assert [list(run[q]) for q in qids] == [[ids[i] for i in row] for row in r_ref]
    with pytest.raises(ValueError, match="searched as they are"):
        search(sparse_rows(docs), ids, queries, qids, top_k=10, encoding="sq8")


def test_code_bytes():
    from dive_core.sparse import code_bytes

    assert code_bytes(16, 1536) == 64 and code_bytes(32, 65536) == 128  # uint16 index + fp16 value
    assert code_bytes(16, 65537) == 96  # a uint32 index beyond 65,536 latents
    with pytest.raises(ValueError, match="1 to width"):
        code_bytes(0, 128)


def test_export_is_a_sparse_encoder_folder_whose_codes_equal_the_workflows(tmp_path):
    """A csr checkpoint exported with MiniLM is a SparseEncoder folder of sentence-transformers'
    own modules (the trained SparseAutoEncoder among them): loaded in an interpreter without
    dive_core and without trust_remote_code, its codes of texts equal Method.compress of their
    MiniLM vectors on both sides; in this process ``encode`` returns sparse tensors of topk
    non-zeros; load_compressor reads the folder's exact record."""
    import json

    from sentence_transformers import SparseEncoder
    from test_export import MINILM, TEXTS, isolated_encode

    from dive_core.embeddings import l2_normalize
    from dive_core.export import BeirDenseModel, _backbone_model, export, load_compressor

    wide = make_problem(d=384, k=16, n_docs=120, n_train=40, n_val=20)  # MiniLM's width
    m = new_method("csr", 384, 4 * 384, hparams("csr", expansion=4, topk=8, epochs=2, lr=3e-3), seed=0)
    m.fit(wide.train, TrainLog(), progress=False)
    with pytest.raises(NotImplementedError, match="top 8 of 1536 latents"):
        m.layers()
    m.save(tmp_path / "model.pt", {})
    out = export(tmp_path / "model.pt", tmp_path / "export", backbone_spec=MINILM)
    types = [e["type"] for e in json.loads((out / "modules.json").read_text())]
    assert "sentence_transformers.sparse_encoder.modules.sparse_auto_encoder.SparseAutoEncoder" in types
    assert all(t.startswith("sentence_transformers.") for t in types), types
    assert "SparseEncoder('path/to/this/folder')" in (out / "README.md").read_text()
    raw = _backbone_model(MINILM).encode(TEXTS, convert_to_numpy=True)
    ref = m.compress(l2_normalize(raw))
    assert (ref != 0).sum(1).max() == 8
    got = isolated_encode([out], TEXTS, tmp_path, cls="SparseEncoder")[out]
    for key in ("document", "query", "plain"):
        assert got[key].shape == ref.shape and np.abs(got[key] - ref).max() < 1e-5, (key, np.abs(got[key] - ref).max())
        assert np.array_equal(got[key] != 0, ref != 0), key  # the same latents kept
    codes = SparseEncoder(str(out), device="cpu").encode(TEXTS)
    assert codes.is_sparse and codes.shape == ref.shape and codes.coalesce().indices().shape[1] == 8 * len(TEXTS)
    back = load_compressor(out)
    assert back.state_sha256() == m.state_sha256()
    assert np.array_equal(back.compress(l2_normalize(raw)), ref)
    beir = BeirDenseModel(out)  # BEIR's dense exact search over the codes as dense rows
    assert beir.sparse and np.abs(beir.encode_queries(TEXTS) - ref).max() < 1e-5


def test_dive_compress_writes_the_codes_and_they_read_back_as_the_workflows(problem, tmp_path, capsys):
    """dive-compress with a csr checkpoint writes each row's code as (uint16 index, fp16 value)
    pairs by default, 4 x topk bytes a row in the file's columns; read_codes returns the workflow's
    codes (Method.compress of the normalised rows, fp16-rounded) as a sparse matrix that searches as
    the evaluation does. A dense compressor is refused the sparse encoding; so is --faiss."""
    import pyarrow.parquet as pq
    from test_compress import cli, make_model, raw_vectors, write_vectors

    from dive_core.embeddings import l2_normalize
    from dive_core.sparse import SparseCorpus, read_codes

    m = new_method("csr", D, H, hparams("csr", epochs=2), seed=0)
    m.fit(problem.train, TrainLog(), progress=False)
    m.save(tmp_path / "model.pt", {"dataset": "synthetic"})
    ids, x = raw_vectors(n=301, d=D)
    src = write_vectors(tmp_path / "in.parquet", ids, x)
    rc, out, err = cli([tmp_path / "model.pt", src, tmp_path / "codes.parquet"], capsys)
    assert rc == 0, err
    assert "sparse" in out
    table = pq.read_table(tmp_path / "codes.parquet")
    assert table.column_names == ["id", "indices", "values"]
    import pyarrow as pa

    assert table.schema.field("indices").type == pa.list_(pa.uint16(), TOPK)
    assert table.schema.field("values").type == pa.list_(pa.float16(), TOPK)
    back_ids, codes = read_codes(tmp_path / "codes.parquet")
    ref = m.compress(l2_normalize(x))
    assert back_ids == ids and codes.shape == (len(ids), H)
    assert np.array_equal(codes.toarray(), ref.astype(np.float16).astype(np.float32))
    s, r = SparseCorpus(codes).search(ref[:20], 10)
    assert np.array_equal(r[:, 0], np.arange(20))  # each row finds itself first
    rc, _, err = cli([tmp_path / "model.pt", src, tmp_path / "codes.h5"], capsys)
    assert rc == 2 and "sparse codes are written to one Parquet file" in err and not (tmp_path / "codes.h5").exists()
    rc, _, err = cli([tmp_path / "model.pt", src, tmp_path / "c2.parquet", "--faiss", tmp_path / "i.faiss"], capsys)
    assert rc == 2 and "FAISS holds dense vectors" in err
    dense = make_model(tmp_path / "dense.pt")
    rc, _, err = cli([dense, write_vectors(tmp_path / "d.parquet", ids, x), tmp_path / "d.out.parquet",
                      "--encoding", "sparse"], capsys)
    assert rc == 2 and "(dive) writes dense vectors; sparse is for k-sparse codes" in err
    rc, _, err = cli([tmp_path / "model.pt", src, tmp_path / "dense.parquet", "--encoding", "float32"], capsys)
    assert rc == 0 and (tmp_path / "dense.parquet").is_file()  # the codes as dense rows, asked for
    from dive_core import compress

    with pytest.raises(compress.CompressError, match="compress.corpus: .* is a k-sparse compressor .csr: 4 of 128 "
                                                      "latents.; the compress: jobs write dense vector files"):
        compress.job_model(tmp_path / "model.pt", "corpus")
    assert compress.job_model(dense, "corpus").type == "dive"
