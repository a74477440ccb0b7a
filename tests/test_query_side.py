"""query_side: a label-free document map and a supervised query map into its space
(dive_core/methods/query_side.py, docs/methods.md#query-side)."""

from pathlib import Path

import numpy as np
import pytest
import torch

from dive_core import config as dcfg
from dive_core import plan
from dive_core.losses import GeometryDistillationLoss, QuerySoftmaxLoss
from dive_core.methods import Method, new_method
from dive_core.methods.query_side import procrustes, refit_query_side
from dive_core.training import TrainLog
from synthetic import make_problem

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ("qside-linear", "qside-mlp", "qside-procrustes", "qside-ae", "qside-known")


def configured(name: str, **over) -> dict:
    """The hyperparameters of ``methods.<name>`` in config/config.yaml (training shortened by ``over``)."""
    cfg = dcfg.load_yaml(ROOT / "config" / "config.yaml")
    return {**plan.method_hparams(cfg, name), **over}


def make(name: str, problem, seed: int = 2027, **over):
    """A fresh method of config entry ``name`` (its type) at its configured values and ``over``."""
    cfg = dcfg.load_yaml(ROOT / "config" / "config.yaml")
    return new_method(cfg["methods"][name]["type"], problem.d, problem.k, configured(name, **over), seed)


@pytest.fixture(scope="module")
def problem():
    torch.set_num_threads(1)
    return make_problem()


SHORT = dict(epochs=2, doc_epochs=2, hidden=32, batch_size=32)


@pytest.mark.parametrize("name", VARIANTS)
def test_the_untrained_query_map_is_the_document_map_bit_for_bit(problem, name):
    """At every configured variant: fresh, and with the document map fitted but the query side
    not yet trained, queries and documents go through the same map, exactly."""
    m = make(name, problem, **SHORT)
    q = problem.val_queries
    assert np.array_equal(m.compress(q, side="query"), m.compress(q, side="document"))
    m.fit_document_map(problem.train, TrainLog(), progress=False)
    assert np.array_equal(m.compress(q, side="query"), m.compress(q, side="document"))
    m.fit_query_map(problem.train, TrainLog(), progress=False)
    assert not np.array_equal(m.compress(q, side="query"), m.compress(q, side="document"))


@pytest.mark.parametrize("doc_map,standalone,hp", [
    ("pca", "pca", {}),
    ("truncate", "truncate", {}),
    ("autoencoder", "autoencoder", {"lr": 1e-3, "epochs": 2, "batch_size": 32, "hidden": 32, "weight_decay": 0.01}),
])
def test_the_document_codes_are_the_label_free_methods_own(problem, doc_map, standalone, hp):
    """The corpus side equals the standalone label-free method at the same seed (the autoencoder
    at doc_lr / doc_epochs), byte for byte, whatever the query side learns."""
    qs = new_method("query_side", problem.d, problem.k,
                    configured("qside", doc_map=doc_map, doc_lr=1e-3, doc_epochs=2, epochs=2, batch_size=32,
                               hidden=32, weight_decay=0.01), 2027)
    qs.fit(problem.train, TrainLog(), progress=False)
    ref = new_method(standalone, problem.d, problem.k, hp, 2027)
    ref.fit(problem.train, TrainLog(), progress=False)
    assert np.array_equal(qs.compress(problem.docs), ref.compress(problem.docs))
    assert qs.meta["document_map"]["state_sha256"] == ref.state_sha256()


def test_procrustes_recovers_a_known_rotation_and_the_anchor_shrinks_it_to_the_identity():
    """Hand-built: p_i = q_i R (R a 2-d rotation by 30 degrees); R = polar(Q'P/n) recovers it; a
    large anchor gives the identity; the rotation is orthogonal at any anchor."""
    c, s = np.cos(np.pi / 6), np.sin(np.pi / 6)
    rot = torch.tensor([[c, s], [-s, c]], dtype=torch.float32)
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    p = q @ rot
    assert torch.allclose(procrustes(q, p), rot, atol=1e-6)
    assert torch.allclose(procrustes(q, p, anchor=1e6), torch.eye(2), atol=1e-5)
    mid = procrustes(q, p, anchor=0.5)
    assert torch.allclose(mid @ mid.T, torch.eye(2), atol=1e-6)
    angle = float(torch.atan2(mid[0, 1], mid[0, 0]))
    assert 0 < angle < np.pi / 6  # between the identity and the rotation


def test_query_softmax_loss_equals_a_hand_computed_value():
    """q = (1, 0); codes (1, 0), (0, 1); positive 0; tau 0.5: -log(e^2 / (e^2 + e^0))."""
    q = torch.tensor([[1.0, 0.0]])
    docs = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    want = -np.log(np.exp(2.0) / (np.exp(2.0) + 1.0))
    assert QuerySoftmaxLoss(0.5)(q, docs, torch.tensor([0])).item() == pytest.approx(want, rel=1e-6)
    assert QuerySoftmaxLoss(0.5)(q, docs, torch.tensor([1])).item() == pytest.approx(want + 2.0, rel=1e-6)


@pytest.mark.parametrize("loss", ["hinge", "softmax"])
def test_batch_loss_equals_the_equations_at_configured_values(problem, loss):
    """hinge (or softmax) on the frozen document codes + gamma_geo * Gram distillation of the
    queries + anchor * mean |u(z) - D(z)|^2, with a linear query map away from zero."""
    hp = configured("qside-linear", loss=loss, **SHORT)
    m = new_method("query_side", problem.d, problem.k, hp, 2027)
    data = problem.train
    m.fit_document_map(data, TrainLog(), progress=False)
    torch.nn.init.normal_(m.net["query"].a.weight, std=0.1)
    m._doc_codes = torch.nn.functional.normalize(m.doc.transform(data.docs), dim=-1)
    m._query_base = m.doc.transform(data.queries)
    idx = torch.arange(16)
    out = m.batch_loss(data, idx)
    # by the equations, from the PCA state alone
    mean, comps, a = m.doc.mean, m.doc.components, m.net["query"].a.weight.detach()
    z = data.queries[data.t_q[idx]]
    base = (z - mean) @ comps
    u = base + z @ a.T
    qn = u / u.norm(dim=1, keepdim=True)
    codes = (data.docs - mean) @ comps
    codes = codes / codes.norm(dim=1, keepdim=True)
    if loss == "hinge":
        delta = (qn * codes[data.t_p[idx]]).sum(1) - (qn * codes[data.t_n[idx]]).sum(1)
        main = torch.clamp(hp["margin"] - delta, min=0).mean()
    else:
        logits = qn @ codes.T / hp["tau"]
        main = (torch.logsumexp(logits, 1) - logits[torch.arange(16), data.t_p[idx]]).mean()
    gram = qn @ qn.T
    off = ~torch.eye(16, dtype=torch.bool)
    diff = (gram - z @ z.T)[off].abs()
    geo = torch.where(diff < 1, 0.5 * diff ** 2, diff - 0.5).mean()
    anchor = (u - base).pow(2).sum(1).mean()
    want = main + hp["gamma_geo"] * geo + hp["anchor"] * anchor
    assert out["loss"].item() == pytest.approx(want.item(), rel=1e-5)
    assert out["geo"].item() == pytest.approx(hp["gamma_geo"] * geo.item(), rel=1e-5)
    assert out["anchor"].item() == pytest.approx(hp["anchor"] * anchor.item(), rel=1e-5)
    assert GeometryDistillationLoss()(qn, z).item() == pytest.approx(geo.item(), rel=1e-5)


def test_training_the_query_side_moves_queries_only_and_helps_them(problem):
    """Over truncation (which keeps noise coordinates), the trained query side finds the positives better."""
    m = new_method("query_side", problem.d, problem.k, configured("qside-linear", doc_map="truncate", anchor=0.1,
                                                                  epochs=30, batch_size=32), 2027)
    m.fit_document_map(problem.train, TrainLog(), progress=False)
    before = problem.score(_Sided(m))
    docs = m.compress(problem.docs)
    log = TrainLog()
    m.fit_query_map(problem.train, log, progress=False)
    assert np.array_equal(m.compress(problem.docs), docs)
    assert problem.score(_Sided(m)) > before
    assert [r["phase"] for r in log.rows] == ["query"] * 30
    assert log.rows[-1]["query"] < log.rows[0]["query"]


class _Sided:
    """``problem.score`` compresses queries and documents alike; this routes queries to the query map."""

    def __init__(self, m):
        self.m = m

    def compress(self, x):
        side = "document" if x.shape[0] == 300 else "query"
        return self.m.compress(x, side=side)


def test_a_checkpoint_round_trips_and_refuses_maps_of_different_fits(problem, tmp_path):
    hp = configured("qside-linear", **SHORT)
    a = new_method("query_side", problem.d, problem.k, hp, 2027)
    a.fit(problem.train, TrainLog(), progress=False)
    a.save(tmp_path / "a.pt")
    back = Method.load(tmp_path / "a.pt")
    for side in ("document", "query"):
        assert np.array_equal(back.compress(problem.val_queries, side=side), a.compress(problem.val_queries, side=side))
    # the query side of a, the document map of a fit on other documents
    other = new_method("query_side", problem.d, problem.k, hp, 2027)
    other.fit_document_map(type(problem.train)(problem.train.docs[:100], *list(vars(problem.train).values())[1:]),
                           TrainLog(), progress=False)
    obj = torch.load(tmp_path / "a.pt", weights_only=True)
    obj["state"].update({n: t for n, t in other.state_dict().items() if n.startswith("doc.")})
    a.load_state_dict(obj["state"])
    obj["state_sha256"] = a.state_sha256()
    torch.save(obj, tmp_path / "mixed.pt")
    with pytest.raises(ValueError, match=r"mixed.pt: the document map .* is not the one its query side was fitted "
                                         r"to .*different fits"):
        Method.load(tmp_path / "mixed.pt")


def test_refitting_the_query_side_keeps_the_document_map_and_its_record(problem):
    hp = configured("qside-linear", **SHORT)
    a = new_method("query_side", problem.d, problem.k, hp, 2027)
    a.fit(problem.train, TrainLog(), progress=False)
    b = refit_query_side(a, problem.train, TrainLog(), seed=2028, hparams={"epochs": 5}, progress=False)
    assert np.array_equal(a.compress(problem.docs), b.compress(problem.docs))
    assert a.meta["document_map"] == b.meta["document_map"]
    assert not np.array_equal(a.compress(problem.val_queries, side="query"),
                              b.compress(problem.val_queries, side="query"))
    with pytest.raises(ValueError, match=r"\['doc_map'\] cannot change"):
        refit_query_side(a, problem.train, TrainLog(), hparams={"doc_map": "truncate"}, progress=False)


@pytest.mark.parametrize("key,value,match", [
    ("doc_map", "svd", r"'doc_map' must be one of \['pca', 'autoencoder', 'truncate'\]"),
    ("query_map", "deep", r"'query_map' must be one of"),
    ("loss", "mse", r"'loss' must be one of \['hinge', 'softmax'\]"),
    ("anchor", -1.0, r"'anchor' must be a finite number >= 0"),
    ("tau", 0.0, r"'tau' must be a finite number > 0"),
])
def test_bad_values_are_refused_naming_the_key(key, value, match):
    with pytest.raises(ValueError, match=match):
        new_method("query_side", 32, 8, configured("qside", **{key: value}), 0)


def test_compress_refuses_an_unknown_side(problem):
    m = new_method("pca", problem.d, problem.k, {}, 0)
    with pytest.raises(ValueError, match=r"side must be one of \['document', 'query'\], got 'doc'"):
        m.compress(problem.docs, side="doc")


# --------------------------------------------------------------------------- the artifacts carry both maps
def _fitted_pair(problem, tmp_path):
    """A query_side checkpoint saved by a workflow run, and one whose query side was refitted from it
    (loaded, seed 2028, more epochs) as docs/compressors.md's recipe does, saved without a run record."""
    hp = configured("qside-linear", **SHORT)
    first = new_method("query_side", problem.d, problem.k, hp, 2027)
    first.fit(problem.train, TrainLog(), progress=False)
    run = {"dataset": "scifact", "backbone": "minilm", "method": "qside-linear", "stage": "final"}
    first.save(tmp_path / "a.pt", run)
    a = Method.load(tmp_path / "a.pt")
    b = refit_query_side(a, problem.train, TrainLog(), seed=2028, hparams={"epochs": 6}, progress=False)
    b.save(tmp_path / "b.pt")  # the refit keeps a's record of the run that fitted the document map
    return a, b


@pytest.mark.parametrize("encoding", ["float32", "int8"])
def test_a_query_side_refit_leaves_the_compressed_corpus_and_its_faiss_index_byte_identical(problem, tmp_path,
                                                                                             encoding):
    """dive-compress of the corpus with the first fit and with the refitted one: the same bytes
    (vectors, record, FAISS index); the query side (--side query) differs."""
    from dive_core import compress as C
    from dive_core.embeddings import l2_normalize
    from dive_core.vectors import VectorWriter

    a, b = _fitted_pair(problem, tmp_path)
    ids = [f"d{i}" for i in range(len(problem.docs))]
    src = tmp_path / "corpus.npy"
    with VectorWriter(src, len(ids), problem.d) as w:
        w.write(ids, problem.docs)
    out = {}
    for name in ("a", "b"):
        rc = C.main([str(tmp_path / f"{name}.pt"), str(src), str(tmp_path / f"{name}.npy"), "--encoding", encoding,
                     "--faiss", str(tmp_path / f"{name}.faiss"), "--quiet"])
        assert rc == 0
        out[name] = [(tmp_path / f"{name}{ext}").read_bytes() for ext in (".npy", ".ids.txt", ".meta.json", ".faiss")]
    assert out["a"] == out["b"]
    rec = C.read_metadata(tmp_path / "a.npy")["compressor"]
    assert rec["side"] == "document" and rec["document_map"] == "pca"
    assert rec["weights_sha256"] == a.meta["document_map"]["state_sha256"] != a.state_sha256()
    for name, m in (("a", a), ("b", b)):
        assert C.main([str(tmp_path / f"{name}.pt"), str(src), str(tmp_path / f"{name}-q.npy"), "--side", "query",
                       "--quiet"]) == 0
        want = m.compress(l2_normalize(problem.docs), side="query")  # dive-compress normalises its input rows
        assert np.array_equal(C.decode(tmp_path / f"{name}-q.npy")[1], want)
        assert C.read_metadata(tmp_path / f"{name}-q.npy")["compressor"]["weights_sha256"] == m.state_sha256()
    assert not np.array_equal(C.decode(tmp_path / "a-q.npy")[1], C.decode(tmp_path / "b-q.npy")[1])


def test_exports_encode_queries_and_documents_by_their_own_maps(problem, tmp_path):
    """The exported compressor folder keeps both maps and their pairing; the sentence-transformers
    Router of an export takes encode_query's task to the query map and everything else to the
    document map."""
    from dive_core.export import compressor_modules, load_compressor, save_compressor

    a, _ = _fitted_pair(problem, tmp_path)
    save_compressor(a, tmp_path / "comp", {"dataset": "scifact"})
    back = load_compressor(tmp_path / "comp")
    x = problem.val_queries
    for side in ("document", "query"):
        assert np.array_equal(back.compress(x, side=side), a.compress(x, side=side))
    (router,) = compressor_modules(back)
    feats = lambda: {"sentence_embedding": torch.from_numpy(x.copy())}  # noqa: E731
    with torch.no_grad():  # (Dense layers and a normalised input: equal to float32 rounding)
        assert np.allclose(router(feats(), task="query")["sentence_embedding"].numpy(), a.compress(x, side="query"),
                           atol=1e-6)
        for task in ("document", None):
            assert np.allclose(router(feats(), task=task)["sentence_embedding"].numpy(), a.compress(x), atol=1e-6)
    assert not np.allclose(a.compress(x), a.compress(x, side="query"), atol=1e-3)
    # a document map swapped in from another fit is refused on load
    import json

    cfg = json.loads((tmp_path / "comp" / "config.json").read_text())
    cfg["provenance"]["document_map"]["state_sha256"] = "0" * 64
    (tmp_path / "comp" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"comp: the document map .* different fits"):
        load_compressor(tmp_path / "comp")


# --------------------------------------------------------------------------- the plan
def test_the_arrival_selection_covers_the_variants_an_enabled_study_uses():
    """config/paper.yaml alone: the record covers the dive_corpus and the query-side variants; with
    config/arrival_qside.yaml on top (arrival and arrival_mpnet disabled), the query-side ones only,
    so the dive_corpus candidates are not retrained; a run of an uncovered variant still reads the record."""
    import copy

    from snakemake.utils import update_config  # what --configfile does

    reg = dcfg.load_registry(ROOT / "config" / "datasets.yaml")
    base = dcfg.load_yaml(ROOT / "config" / "config.yaml")
    paper = copy.deepcopy(base)
    update_config(paper, dcfg.load_yaml(ROOT / "config" / "paper.yaml"))
    both = plan.resolve(paper, reg, defaults=base)
    assert sorted(both.selection_candidates("arrival_variants")) == sorted(
        ["dive-pcainit", "dive-corpusgeo", "dive-pcacorpus", *VARIANTS])
    update_config(paper, dcfg.load_yaml(ROOT / "config" / "arrival_qside.yaml"))
    alone = plan.resolve(paper, reg, defaults=base)
    cands = alone.selection_candidates("arrival_variants")
    assert sorted(cands) == sorted(VARIANTS)
    assert [n for n, _ in cands["qside-procrustes"]] == [
        "qside-procrustes-anchor0-arrival", "qside-procrustes-anchor0.5-arrival", "qside-procrustes-anchor2-arrival"]
    assert len(cands["qside-linear"]) == 6
    runs = alone.selection_runs("arrival_variants", "mpnet")
    assert {r["method"] for r in runs} == {n for c in cands.values() for n, _ in c} | {"dive-arrival", "mrl-arrival"}
    assert plan.selection_study(alone.config, "dive-pcainit-arrival") == "arrival_variants"


# --------------------------------------------------------------------------- query_side_known
def test_known_documents_keep_a_trained_offset_and_arriving_ones_the_label_free_code(problem, tmp_path):
    """Fitted on the first 200 documents: after training, those 200 get codes away from the document
    map's; the 100 others get the document map's code exactly; a checkpoint round-trips and
    refuses offsets of another fit."""
    from dive_core.training import FitData

    tr = problem.train
    keep = tr.t_p < 200
    keep &= tr.t_n < 200
    data = FitData(tr.docs[:200], tr.queries, tr.t_q[keep], tr.t_p[keep], tr.t_n[keep], tr.y_p[keep], tr.y_n[keep])
    m = make("qside-known", problem, epochs=5, offset_anchor=0.01, batch_size=32, hidden=32)
    m.fit(data, TrainLog(), progress=False)
    label_free = m.doc.compress(problem.docs)
    codes = m.compress(problem.docs)
    assert np.array_equal(codes[200:], label_free[200:])
    moved = np.abs(codes[:200] - label_free[:200]).max(1) > 1e-4
    assert moved.mean() > 0.5  # the triplets' documents moved (a document no triplet names keeps a zero offset)
    m.save(tmp_path / "k.pt")
    back = Method.load(tmp_path / "k.pt")
    assert np.array_equal(back.compress(problem.docs), codes)
    obj = torch.load(tmp_path / "k.pt", weights_only=True)
    obj["state"]["query.known.offsets"] = obj["state"]["query.known.offsets"] * 2
    back.load_state_dict(obj["state"])
    obj["state_sha256"] = back.state_sha256()
    torch.save(obj, tmp_path / "other.pt")
    with pytest.raises(ValueError, match=r"other.pt: the document map and known-document codes are not the ones"):
        Method.load(tmp_path / "other.pt")
