"""The method interface and the spine's methods: frozen, truncate, PCA, DIVE."""

import numpy as np
import pytest
import torch

from dive_core.methods import Method, method_class, new_method, resolve_hparams
from dive_core.methods.specs import check_heads
from dive_core.training import TrainLog
from synthetic import FAST, make_problem

DIVE_HP = dict(margin=0.7, lambda_view=0.01, gamma_geo=10.0, tau=0.1, heads=4,
               triplet_loss="hinge", lr=3e-3, **FAST)


@pytest.fixture(scope="module")
def problem():
    torch.set_num_threads(1)
    return make_problem()


def fit(method, problem):
    log = TrainLog()
    method.fit(problem.train, log, progress=False)
    return log


def assert_unit_rows(x, k):
    assert x.shape[1] == k and x.dtype == np.float32
    assert np.allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)


def test_an_unknown_method_type_is_refused_naming_the_known_ones():
    known = r"\[.*'dive'.*'frozen'.*'pca'.*'truncate'.*\]"  # discovered from dive_core/methods/, sorted
    with pytest.raises(KeyError, match=rf"unknown method type 'nope'; known: {known}"):
        method_class("nope")
    with pytest.raises(KeyError, match=rf"unknown method type 'nope'; known: {known}"):
        new_method("nope", 32, 8, {}, 0)


def test_frozen_is_normalised_identity(problem):
    m = new_method("frozen", problem.d, problem.d, {}, 0)
    out = m.compress(problem.docs)
    assert np.allclose(out, problem.docs / np.linalg.norm(problem.docs, axis=1, keepdims=True), atol=1e-6)
    with pytest.raises(ValueError, match="uncompressed"):
        new_method("frozen", problem.d, 8, {}, 0)


def test_truncate_keeps_first_k_coordinates(problem):
    x = problem.docs[:5]
    out = new_method("truncate", problem.d, 8, {}, 0).compress(x)
    expected = x[:, :8] / np.linalg.norm(x[:, :8], axis=1, keepdims=True)
    assert np.allclose(out, expected, atol=1e-6)
    assert_unit_rows(out, 8)


def test_pca_fits_corpus_subspace(problem):
    m = new_method("pca", problem.d, problem.k, {}, 0)
    before = problem.score(m)
    log = fit(m, problem)
    assert problem.score(m) > before + 0.3  # recovers the 8-d signal subspace
    assert log.rows[0]["explained_variance"] > 0.5
    out = m.compress(problem.docs)
    assert_unit_rows(out, problem.k)
    # components orthonormal; the projection of the centred corpus matches numpy's SVD subspace
    c = m.components.double()
    assert torch.allclose(c.T @ c, torch.eye(problem.k, dtype=torch.float64), atol=1e-5)
    x = problem.docs.astype(np.float64)
    centred = x - x.mean(0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    v = vt[: problem.k].T  # the top-k right singular vectors
    np.testing.assert_allclose(m.mean.numpy(), x.mean(0), atol=1e-6)
    np.testing.assert_allclose(c.numpy() @ c.numpy().T, v @ v.T, atol=1e-4)  # the same subspace
    ref = centred @ v
    ref *= np.sign((ref * (centred @ c.numpy())).sum(0))  # each component's sign is arbitrary
    np.testing.assert_allclose(out, ref / np.linalg.norm(ref, axis=1, keepdims=True), atol=1e-4)


def test_dive_identity_at_init_equals_truncate(problem):
    dive = new_method("dive", problem.d, problem.k, DIVE_HP, 0)
    trunc = new_method("truncate", problem.d, problem.k, {}, 0)
    assert np.array_equal(dive.compress(problem.docs), trunc.compress(problem.docs))


def test_dive_training_improves_validation_and_logs_terms(problem):
    m = new_method("dive", problem.d, problem.k, DIVE_HP, 0)
    before = problem.score(m)
    log = fit(m, problem)
    after = problem.score(m)
    assert after > before + 0.3, (before, after)
    assert_unit_rows(m.compress(problem.val_queries), problem.k)
    cols = log.columns()
    for c in ("epoch", "triplet", "view", "geo", "rho", "total", "seconds"):
        assert c in cols
    assert [r["epoch"] for r in log.rows] == list(range(1, FAST["epochs"] + 1))
    first, last = log.rows[0], log.rows[-1]
    assert 0 <= last["rho"] < first["rho"] <= 1  # fewer active triplets as training proceeds
    for r in log.rows:  # total is the sum of the logged weighted terms
        assert r["total"] == pytest.approx(r["triplet"] + r["view"] + r["geo"], rel=1e-5)


def test_dive_loss_weights(problem):
    """batch_loss combines L_trip + lambda L_view + gamma L_geo with the configured weights."""
    m = new_method("dive", problem.d, problem.k, DIVE_HP, 0)
    idx = torch.arange(16)
    out = m.batch_loss(problem.train, idx)
    m2 = new_method("dive", problem.d, problem.k, {**DIVE_HP, "lambda_view": 0.02, "gamma_geo": 5.0}, 0)
    out2 = m2.batch_loss(problem.train, idx)
    assert out2["view"].item() == pytest.approx(2 * out["view"].item(), rel=1e-6)
    assert out2["geo"].item() == pytest.approx(0.5 * out["geo"].item(), rel=1e-6)
    assert out2["triplet"].item() == pytest.approx(out["triplet"].item(), rel=1e-6)


def _init_terms(problem, idx, hp):
    """DIVE's three loss terms at initialisation, by hand: the adapter is then the identity, so
    head h of an embedding x is normalise(x[(h-1)k : hk])."""
    import math

    from test_losses import ntxent_by_hand

    k, H = problem.k, int(hp["heads"])
    heads = [torch.nn.functional.normalize(x.double()[:, :k * H].reshape(len(x), H, k), dim=-1)
             for x in problem.train.triplet_batch(idx)[:3]]
    q1, p1, n1 = (h[:, 0] for h in heads)
    gap = hp["margin"] - ((q1 * p1).sum(-1) - (q1 * n1).sum(-1))
    trip = (torch.nn.functional.softplus(gap) if hp["triplet_loss"] == "softplus" else gap.clamp_min(0)).mean()
    view = sum(ntxent_by_hand(h.tolist(), hp["tau"]) for h in heads) / 3 if H > 1 else 0.0
    student, teacher = torch.cat([q1, p1, n1]), torch.cat(problem.train.triplet_batch(idx)[:3]).double()
    off = ~torch.eye(len(student), dtype=torch.bool)
    diff = (student @ student.T - teacher @ teacher.T)[off].abs()
    geo = torch.where(diff < 1, 0.5 * diff ** 2, diff - 0.5).mean()
    assert not math.isnan(float(view))
    return {"triplet": float(trip), "view": hp["lambda_view"] * float(view), "geo": hp["gamma_geo"] * float(geo)}


@pytest.mark.parametrize("variant", [{"triplet_loss": "softplus"}, {"lambda_view": 0.0},
                                     {"gamma_geo": 0.0}, {"heads": 2}],
                         ids=["softplus", "no-view", "no-geo", "heads2"])
def test_dive_ablations_train(problem, variant):
    """Each ablation changes exactly its own term: at initialisation every weighted term equals
    its hand computation (softplus instead of the hinge; no view or geometry term; NT-Xent over 2
    heads of k coordinates) and the others equal the full DIVE's; then it trains."""
    hp = {**DIVE_HP, **variant, "epochs": 2}
    m = new_method("dive", problem.d, problem.k, hp, 0)
    full = new_method("dive", problem.d, problem.k, {**DIVE_HP, "epochs": 2}, 0)
    idx = torch.arange(16)
    out, ref = m.batch_loss(problem.train, idx), full.batch_loss(problem.train, idx)
    want = _init_terms(problem, idx, hp)
    for term in ("triplet", "view", "geo"):
        assert out[term].item() == pytest.approx(want[term], rel=1e-5, abs=1e-9), term
    assert out["loss"].item() == pytest.approx(sum(want.values()), rel=1e-5)
    changed = {"triplet_loss": "triplet", "lambda_view": "view", "gamma_geo": "geo", "heads": "view"}[next(iter(variant))]
    for term in ("triplet", "view", "geo"):
        same = out[term].item() == pytest.approx(ref[term].item(), rel=1e-6)
        assert same == (term != changed), (term, out[term].item(), ref[term].item())
    if "triplet_loss" in variant:  # softplus(x) > max(0, x): the always-active loss is larger
        assert out["triplet"].item() > ref["triplet"].item()
    if "heads" in variant:  # 2 heads: only the first 2k coordinates enter the loss
        assert int(m.hp["heads"]) == 2 and 2 * problem.k <= problem.d
    log = fit(m, problem)
    assert [r["epoch"] for r in log.rows] == [1, 2]
    for r in log.rows:
        assert r["total"] == pytest.approx(r["triplet"] + r["view"] + r["geo"], rel=1e-5)
        assert (r["view"] == 0.0) == (variant.get("lambda_view") == 0.0)
        assert (r["geo"] == 0.0) == (variant.get("gamma_geo") == 0.0)
        assert 0.0 <= r["rho"] <= 1.0
    trunc = new_method("truncate", problem.d, problem.k, {}, 0)
    assert not np.allclose(m.compress(problem.docs), trunc.compress(problem.docs), atol=1e-4)  # it trained


def test_dive_rejects_too_many_heads(problem):
    with pytest.raises(ValueError, match=r"k\*H = 8\*8 = 64 exceeds the embedding dimension d = 32"):
        new_method("dive", problem.d, 8, {**DIVE_HP, "heads": 8}, 0)


@pytest.mark.parametrize("k,h,d", [(64, 8, 384), (100, 4, 384), (2049, 1, 2048)])
def test_heads_exceeding_dimension_are_rejected(k, h, d):
    with pytest.raises(ValueError, match=r"k\*H = .* exceeds the embedding dimension d"):
        check_heads(d, k, h)


def test_heads_fitting_exactly_are_accepted():
    check_heads(384, 96, 4)
    check_heads(4096, 128, 8)


def test_dive_is_deterministic_per_seed(problem):
    hp = {**DIVE_HP, "epochs": 2}
    runs = []
    for seed in (0, 0, 1):
        m = new_method("dive", problem.d, problem.k, hp, seed)
        log = fit(m, problem)
        runs.append((m.compress(problem.docs), [r["total"] for r in log.rows]))
    assert np.array_equal(runs[0][0], runs[1][0]) and runs[0][1] == runs[1][1]
    assert not np.array_equal(runs[0][0], runs[2][0])


@pytest.mark.parametrize("name,k", [("frozen", 32), ("truncate", 8), ("pca", 8), ("dive", 8)])
def test_checkpoint_round_trip(problem, tmp_path, name, k):
    hp = {**DIVE_HP, "epochs": 1} if name == "dive" else {}
    m = new_method(name, problem.d, k, hp, 3)
    fit(m, problem)
    path = tmp_path / "model.pt"
    m.save(path, meta={"note": "x"})
    loaded = Method.load(path)
    assert loaded.type == name and loaded.k == k and loaded.seed == 3 and loaded.meta == {"note": "x"}
    assert np.array_equal(loaded.compress(problem.docs), m.compress(problem.docs))


def test_checkpoint_rejects_foreign_file(tmp_path):
    p = tmp_path / "x.pt"
    torch.save({"weights": torch.zeros(2)}, p)
    with pytest.raises(ValueError, match=rf"{p}: checkpoint record of no format tag.*rule train"):
        Method.load(p)


def test_hparams_come_from_config_and_errors_name_the_key():
    training = {"epochs": 50, "batch_size": 128, "hidden": 2048, "weight_decay": 0.01}
    entry = {"type": "dive", "margin": 0.7, "lambda_view": 0.01, "gamma_geo": 10, "tau": 0.1,
             "heads": 4, "triplet_loss": "hinge", "lr": 2e-4}
    hp = resolve_hparams("dive", entry, training)
    assert hp["epochs"] == 50 and hp["margin"] == 0.7
    assert resolve_hparams("dive", {**entry, "epochs": 3}, training)["epochs"] == 3  # entry wins
    with pytest.raises(ValueError, match=r"methods\.dive: missing hyperparameter 'tau'"):
        resolve_hparams("dive", {k: v for k, v in entry.items() if k != "tau"}, training)
    with pytest.raises(ValueError, match=r"methods\.dive: unknown key\(s\) \['mragin'\]"):
        resolve_hparams("dive", {**entry, "mragin": 1}, training)


@pytest.mark.parametrize("key,value", [("margin", -0.1), ("tau", 0.0), ("heads", 2.5),
                                       ("triplet_loss", "hing"), ("lr", "fast")])
def test_dive_rejects_bad_values_naming_the_key(key, value):
    with pytest.raises(ValueError, match=f"method 'dive': hyperparameter '{key}' must be"):
        new_method("dive", 32, 8, {**DIVE_HP, key: value}, 0)


def test_state_sha256_identifies_weights(problem, tmp_path):
    hp = {**DIVE_HP, "epochs": 1}
    a, b, c = (new_method("dive", problem.d, problem.k, hp, s) for s in (0, 0, 1))
    for m in (a, b, c):
        fit(m, problem)
    assert a.state_sha256() == b.state_sha256() != c.state_sha256()
    a.save(tmp_path / "a.pt", meta={"train_seconds": 1.0})
    b.save(tmp_path / "b.pt", meta={"train_seconds": 2.0})  # different provenance, same weights
    assert Method.load(tmp_path / "a.pt").state_sha256() == Method.load(tmp_path / "b.pt").state_sha256()


def test_a_new_method_needs_a_spec_a_registered_class_and_a_config_entry(problem, tmp_path):
    """What a ninth method does: declare its spec (torch-free: the planner reads it), subclass,
    register; its config entry resolves, its values are checked, it trains through the shared
    loop and round-trips through a checkpoint. A class without a spec is refused."""
    from dive_core.methods import METHODS, SPECS, MethodSpec, add_spec, register
    from dive_core.methods.base import TorchMethod
    from dive_core.methods.specs import SHARED, as_float

    class Unspecified(TorchMethod):
        type = "ninth_for_test"

    with pytest.raises(TypeError, match="'ninth_for_test' has no MethodSpec"):
        register(Unspecified)
    add_spec(MethodSpec("ninth_for_test", True, ("scale", *SHARED), lambda d, k, hp: as_float("ninth", hp, "scale")))

    @register
    class Ninth(TorchMethod):
        type = "ninth_for_test"

        def build(self):
            self.net = torch.nn.ModuleDict({"proj": torch.nn.Linear(self.d, self.k, bias=False)})

        def batch_loss(self, data, idx):
            q, p, n, _, _ = data.triplet_batch(idx)
            f = lambda x: torch.nn.functional.normalize(self.net["proj"](x), dim=-1)  # noqa: E731
            loss = torch.relu(float(self.hp["scale"]) - ((f(q) * f(p)).sum(-1) - (f(q) * f(n)).sum(-1))).mean()
            return {"loss": loss, "hinge": loss.detach()}

        def transform(self, x):
            return self.net["proj"](x)

    try:
        assert Ninth.supervised and Ninth.hyperparameters == ("scale", *SHARED)
        hp = resolve_hparams("ninth", {"type": "ninth_for_test", "scale": 0.5, "lr": 1e-2},
                             {"epochs": 3, "batch_size": 32, "hidden": 8, "weight_decay": 0.0})
        with pytest.raises(ValueError, match="hyperparameter 'scale' must be a finite number >= 0, got -1"):
            new_method("ninth_for_test", problem.d, problem.k, {**hp, "scale": -1}, 0)
        m = new_method("ninth_for_test", problem.d, problem.k, hp, 0)
        log = fit(m, problem)
        assert [r["epoch"] for r in log.rows] == [1, 2, 3] and "hinge" in log.columns()
        m.save(tmp_path / "m.pt")
        assert np.array_equal(Method.load(tmp_path / "m.pt").compress(problem.docs), m.compress(problem.docs))
    finally:
        METHODS.pop("ninth_for_test", None)
        SPECS.pop("ninth_for_test", None)


def test_pca_covariance_in_chunks_equals_the_svd(problem):
    """The chunked float64 covariance gives the SVD's subspace (and, with the sign rule, the
    same components up to floating point), whatever the chunk size."""
    import torch

    from dive_core.methods.pca import covariance

    x = torch.as_tensor(problem.docs).double()
    _, _, vh = torch.linalg.svd(x - x.mean(0), full_matrices=False)
    for chunk in (7, 64, 100_000):
        mean, cov = covariance(torch.as_tensor(problem.docs), chunk=chunk)
        assert torch.allclose(mean, x.mean(0), atol=1e-12)
        assert torch.allclose(cov, torch.cov(x.T, correction=0), atol=1e-10)
    m = new_method("pca", problem.d, problem.k, {}, 0)
    m.fit(problem.train, TrainLog(), progress=False)
    ref = vh[: problem.k].T
    ref = ref * torch.sign(ref.gather(0, ref.abs().argmax(0, keepdim=True)))
    assert torch.allclose(m.components.double(), ref, atol=1e-4)


def test_pca_with_fewer_documents_than_dimensions_takes_the_svd_and_the_same_axes():
    """n <= d (a 4096d backbone on a small corpus, or the drift guard's half-size twin): the top k axes
    come from the SVD of the centred rows, and they equal the d x d eigendecomposition's top k (same
    signs) and its variances; the explained variance PCA logs is the same."""
    import torch

    from dive_core.methods import pca as P
    from dive_core.training import FitData

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(40, 64, generator=gen) * torch.linspace(3.0, 0.1, 64)  # distinct variances: axes well defined
    mean_e, var_e, axes_e = P.principal_axes(x)  # eigh: every axis
    calls = []
    real_svd = torch.linalg.svd
    torch.linalg.svd = lambda *a, **kw: calls.append(1) or real_svd(*a, **kw)
    try:
        mean_s, var_s, axes_s = P.principal_axes(x, 8)
    finally:
        torch.linalg.svd = real_svd
    assert calls == [1] and axes_s.shape == (64, 8)
    assert torch.allclose(mean_s, mean_e, atol=1e-12)
    assert torch.allclose(axes_s, axes_e[:, :8], atol=1e-8)
    assert torch.allclose(var_s[:8], var_e[:8], atol=1e-10) and torch.allclose(var_s.sum(), var_e.sum(), atol=1e-9)
    # more rows than dimensions, or k above the row count: the eigendecomposition as before
    assert torch.equal(P.principal_axes(x, 41)[2], axes_e)
    m = new_method("pca", 64, 8, {}, 0)
    m.fit(FitData.documents(x.numpy()), TrainLog(), progress=False)
    assert torch.allclose(m.components.double(), axes_e[:, :8], atol=1e-6)


@pytest.mark.parametrize("n, d, k", [(400, 64, None), (40, 64, 8)])  # the eigendecomposition; the SVD
def test_pca_axes_are_the_same_bytes_at_any_thread_count(n, d, k):
    """A job's thread count is a cost setting: PCA's axes (and so pca's and dive-pca's maps) must not
    depend on it. LAPACK's eigh gives other bytes on 1 and 2 threads without the one-thread block."""
    from dive_core.methods import pca as P

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, d, generator=gen) * torch.linspace(3.0, 0.1, d)
    before = torch.get_num_threads()
    try:
        axes = []
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            axes.append(P.principal_axes(x, k))
            assert torch.get_num_threads() == threads  # restored after the block
    finally:
        torch.set_num_threads(before)
    for other in axes[1:]:
        assert all(torch.equal(a, b) for a, b in zip(axes[0], other))


def test_compress_in_place_equals_a_new_matrix_and_evaluation_can_consume_the_corpus(problem):
    """k = d: compress(x, out=x) gives the bits of compress(x); evaluate_method(consume=True)
    then writes over the caller's corpus instead of a second corpus-sized matrix, with the same
    per-query scores."""
    from dive_core.embeddings import Embeddings
    from dive_core.evaluation import evaluate_method

    m = new_method("frozen", problem.d, problem.d, {}, 0)
    docs = np.ascontiguousarray(problem.docs * 3.0, dtype=np.float32)  # not unit rows: compress changes them
    fresh = m.compress(docs, batch_size=7)
    assert not np.array_equal(fresh, docs)
    buf = docs.copy()
    assert m.compress(buf, batch_size=7, out=buf) is buf and np.array_equal(buf, fresh)
    # rows already of unit norm (as read_embeddings gives them): re-normalising changes some bits,
    # and the in-place division changes exactly the same ones
    unit = fresh.copy()
    again = m.compress(unit)
    assert m.compress(unit, out=unit) is unit and np.array_equal(unit, again)
    assert np.array_equal(again, torch.nn.functional.normalize(torch.from_numpy(fresh), dim=-1).numpy())
    with pytest.raises(ValueError, match=r"out must be a float32 \(300, 8\) array"):
        new_method("truncate", problem.d, 8, {}, 0).compress(docs, out=docs)
    n_q = 12
    doc_ids = [f"d{i}" for i in range(len(docs))]
    qids = [f"q{i}" for i in range(n_q)]
    queries = np.ascontiguousarray(docs[:n_q] + 0.1, dtype=np.float32)
    qrels = {q: {doc_ids[i]: 1} for i, q in enumerate(qids)}
    manifest = {"ids": {"train": [], "validation": [], "test": qids},
                "qrels": {"train": {}, "validation": {}, "test": qrels},
                "stages": {"final": {"train_roles": ["train", "validation"], "eval_role": "test"}},
                "document_overlap": {"test": {"seen_ids": []}},
                "identical_ids": {"ids": [], "rule": "same id and same text"}}
    results = {}
    for consume in (False, True):
        emb = Embeddings(doc_ids, docs.copy(), qids, queries.copy(), {})
        before = emb.docs
        results[consume] = evaluate_method(m, emb, manifest, "final", top_k=5, consume=consume)[0]
        assert np.shares_memory(emb.docs, before)
        # consumed: the caller's matrix now holds the compressed vectors; otherwise it is untouched
        assert np.array_equal(emb.docs, fresh if consume else docs)
    assert results[True] == results[False]


def test_compress_batches_stay_within_their_memory_budget(monkeypatch):
    """By default a compress batch holds at most COMPRESS_BATCH_BYTES[device] of float32 intermediates
    (input, the adapter's hidden layer twice, output), so evaluating a large corpus adds a
    bounded amount of memory; the vectors equal one-batch compression."""
    from dive_core.methods import base, new_method

    rng = np.random.default_rng(0)
    docs = rng.standard_normal((1000, 32)).astype(np.float32)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    m = new_method("dive", 32, 8, {**DIVE_HP, "hidden": 64, "heads": 4}, 2027, "cpu")
    whole = m.compress(docs, batch_size=1000)
    seen = []
    real = m.transform
    monkeypatch.setattr(m, "transform", lambda xb: (seen.append(len(xb)), real(xb))[1])
    monkeypatch.setitem(base.COMPRESS_BATCH_BYTES, "cpu", 4 * (32 + 8 + 2 * 64) * 300)  # 300 rows' intermediates
    np.testing.assert_allclose(m.compress(docs), whole, rtol=0, atol=1e-6)
    assert seen == [300, 300, 300, 100]


def _dive_loss_by_the_equations(f, x, k, H, hp):
    """DIVE's objective written plainly from docs/methods.md#dive (full adapter output, boolean masks,
    three separate NT-Xent terms): the reference the method's fused batch_loss is held to."""
    import torch.nn.functional as F

    from test_losses import geometry_masked, ntxent_masked

    zt = x + f.down(F.relu(f.up(x)))
    h = F.normalize(zt[:, : k * H].reshape(-1, H, k), dim=-1)
    hq, hp_, hn = h.chunk(3)
    delta = (hq[:, 0] * hp_[:, 0]).sum(-1) - (hq[:, 0] * hn[:, 0]).sum(-1)
    trip = F.relu(hp["margin"] - delta).mean()
    view = sum(ntxent_masked(part, hp["tau"]) for part in (hq, hp_, hn)) / 3
    geo = geometry_masked(h[:, 0], x)
    return trip + hp["lambda_view"] * view + hp["gamma_geo"] * geo


def test_dive_batch_loss_equals_the_equations_in_value_and_gradient_at_configured_values():
    """d = 384, k = 64, H = 4, r = 2048, B = 128 (config/config.yaml), adapter away from the identity."""
    torch.set_num_threads(1)
    prob = make_problem(d=384, k=64, rank=32, n_docs=400, n_train=64, n_neg=2)
    hp = dict(DIVE_HP, hidden=2048, batch_size=128)
    m = new_method("dive", 384, 64, hp, 0)
    f = m.net["adapter"]
    torch.nn.init.normal_(f.down.weight, std=0.02)
    idx = torch.arange(128)
    out = m.batch_loss(prob.train, idx)
    out["loss"].backward()
    fast = {n: p.grad.clone() for n, p in f.named_parameters()}
    f.zero_grad()
    x = torch.cat(prob.train.triplet_batch(idx)[:3])
    ref = _dive_loss_by_the_equations(f, x, 64, 4, hp)
    ref.backward()
    assert out["loss"].item() == pytest.approx(ref.item(), rel=1e-5)
    for n, p in f.named_parameters():
        assert torch.allclose(fast[n], p.grad, rtol=1e-4, atol=1e-8), n


def test_dive_training_leaves_the_unread_down_projection_rows_at_zero(problem):
    """The loss reads only zt[:, :k*H]; rows k*H.. of W2 and b2 stay exactly zero, as they would
    with the full output computed (zero gradient, zero AdamW update, decay of zero)."""
    m = new_method("dive", problem.d, problem.k, dict(DIVE_HP, heads=2, epochs=2), 0)
    fit(m, problem)
    down = m.net["adapter"].down
    used = problem.k * 2
    assert torch.count_nonzero(down.weight[used:]) == 0 and torch.count_nonzero(down.bias[used:]) == 0
    assert torch.count_nonzero(down.weight[:used]) > 0


@pytest.mark.parametrize("type_name", ["dive", "dive_corpus"])
def test_dive_transform_computes_head_one_alone_with_the_whole_adapters_values(problem, type_name):
    """transform computes only the k kept rows of the down-projection (half the FLOPs at 768 -> 64,
    benchmarks/compress_speed.py); its values are the whole adapter's first k columns."""
    hp = {**DIVE_HP, "epochs": 2, **({"init": "pca", "corpus_docs": 0, "gamma_corpus": 0.0}
                                     if type_name == "dive_corpus" else {})}
    m = new_method(type_name, problem.d, problem.k, hp, 0)
    fit(m, problem)
    x = torch.as_tensor(problem.docs)
    with torch.no_grad():
        whole = m.adapted(x)
        assert whole.shape[1] == problem.d
        torch.testing.assert_close(m.transform(x), whole[:, : problem.k], rtol=0, atol=1e-6)
    calls = []
    down = m.net["adapter"].down
    handle = down.register_forward_hook(lambda *a: calls.append(1))
    with torch.no_grad():
        m.transform(x)
    handle.remove()
    assert calls == []  # the d-wide down-projection module never ran: only its first k rows did


# --------------------------------------------------------------------------- dive_corpus
CORPUS_HP = {**DIVE_HP, "init": "identity", "corpus_docs": 0, "gamma_corpus": 0.0}


def test_dive_corpus_at_its_neutral_values_trains_exactly_dive(problem):
    dive = new_method("dive", problem.d, problem.k, {**DIVE_HP, "epochs": 3}, 0)
    corpus = new_method("dive_corpus", problem.d, problem.k, {**CORPUS_HP, "epochs": 3}, 0)
    fit(dive, problem), fit(corpus, problem)
    adapter = {k.removeprefix("adapter."): v for k, v in corpus.state_dict().items() if k.startswith("adapter.")}
    assert adapter.keys() == dive.net["adapter"].state_dict().keys()
    assert all(torch.equal(adapter[k], dive.net["adapter"].state_dict()[k]) for k in adapter)
    assert np.array_equal(corpus.compress(problem.docs), dive.compress(problem.docs))


def test_dive_corpus_pca_init_starts_at_pca_and_keeps_the_frame_through_a_checkpoint(problem, tmp_path):
    """``init: pca``: before any step the compressor is PCA fitted on the same documents (the
    adapter is the identity in the principal frame); the frame is saved and loaded with it."""
    pca = new_method("pca", problem.d, problem.k, {}, 0)
    fit(pca, problem)
    m = new_method("dive_corpus", problem.d, problem.k, {**CORPUS_HP, "init": "pca", "epochs": 1}, 0)
    m.net["frame"].fit_pca(problem.train.docs)
    np.testing.assert_allclose(m.compress(problem.docs), pca.compress(problem.docs), atol=1e-5)
    fit(m, problem)
    m.save(tmp_path / "m.pt")
    loaded = Method.load(tmp_path / "m.pt")
    assert not loaded.net["frame"].identity
    assert np.array_equal(loaded.compress(problem.docs), m.compress(problem.docs))
    ident = new_method("dive_corpus", problem.d, problem.k, CORPUS_HP, 0)
    ident.save(tmp_path / "i.pt")
    assert Method.load(tmp_path / "i.pt").net["frame"].identity


def test_dive_corpus_stream_term_is_the_gram_loss_on_the_drawn_documents(problem):
    """``gamma_corpus * L_geo`` over ``corpus_docs`` documents drawn by the seeded stream, by hand:
    the adapter is the identity at initialisation, so the student is normalise(z[:, :k])."""
    from dive_core.methods.dive_corpus import CORPUS_STREAM_OFFSET

    hp = {**CORPUS_HP, "corpus_docs": 5, "gamma_corpus": 3.0}
    m = new_method("dive_corpus", problem.d, problem.k, hp, 11)
    m._stream = torch.Generator().manual_seed(11 + CORPUS_STREAM_OFFSET)
    idx = torch.arange(16)
    out = m.batch_loss(problem.train, idx)
    rows = torch.randint(len(problem.train.docs), (5,), generator=torch.Generator().manual_seed(11 + CORPUS_STREAM_OFFSET))
    z = problem.train.docs[rows].double()
    s = torch.nn.functional.normalize(z[:, :problem.k], dim=-1)
    off = ~torch.eye(5, dtype=torch.bool)
    diff = (s @ s.T - z @ z.T)[off].abs()
    want = 3.0 * float(torch.where(diff < 1, 0.5 * diff ** 2, diff - 0.5).mean())
    assert out["corpus_geo"].item() == pytest.approx(want, rel=1e-5)
    dive = new_method("dive", problem.d, problem.k, DIVE_HP, 11).batch_loss(problem.train, idx)
    assert out["loss"].item() == pytest.approx(dive["loss"].item() + want, rel=1e-5)


@pytest.mark.parametrize("over,match", [({"corpus_docs": 0, "gamma_corpus": 1.0}, "both 0"),
                                        ({"init": "random"}, "'init' must be one of"),
                                        ({"corpus_docs": -1, "gamma_corpus": 1.0}, "'corpus_docs'")])
def test_dive_corpus_rejects_bad_values_naming_the_key(problem, over, match):
    with pytest.raises(ValueError, match=match):
        new_method("dive_corpus", problem.d, problem.k, {**CORPUS_HP, **over}, 0)
