"""Baselines: autoencoder, Matryoshka-Adaptor (`mrl`), Search-Adaptor (`search_adaptor`).

The methods are trained on the synthetic problem of ``tests/synthetic.py``; their loss terms
(dive_core/losses.py) are checked against explicit Python loops in test_losses.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dive_core.methods import Method, new_method, resolve_hparams
from dive_core.methods.mrl import distinct_items, matryoshka_prefixes
from dive_core.training import FitData, TrainLog

from synthetic import FAST, make_problem

torch.set_num_threads(1)

# Learning rates that train in FAST's 15 epochs on the synthetic problem. MRL uses beta = 0.1
# here: with the default beta = 1 (docs/methods.md#matryoshka-adaptor) the L1 reconstruction term (a sum over d coordinates)
# pins the adapter to the identity and MRL scores exactly like truncation (see the report).
HP = {
    "autoencoder": {**FAST, "lr": 5e-3},
    "mrl": {**FAST, "lr": 5e-3, "alpha": 1.0, "beta": 0.1, "gamma_rank": 1.0, "min_prefix": 16, "l1_reduction": "sum",
            "topk_neighbors": 10, "schedule": "joint"},
    "search_adaptor": {**FAST, "lr": 1e-3, "alpha": 0.1, "beta": 0.01, "predictor_hidden": 32,
                       "l1_reduction": "sum", "prediction_stop_gradient": False},
}
TYPES = sorted(HP)
LOGGED = {
    "autoencoder": ["reconstruction"],
    "mrl": ["topk", "pair", "reconstruction", "rank"],
    "search_adaptor": ["rank", "reconstruction", "prediction"],
}


# --------------------------------------------------------------------------- MRL helpers
def test_matryoshka_prefixes():
    assert matryoshka_prefixes(384, 64, 16) == [16, 32, 64, 128, 256, 384]
    assert matryoshka_prefixes(384, 96, 16) == [16, 32, 64, 96, 128, 256, 384]
    assert matryoshka_prefixes(4096, 128, 16) == [16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
    assert matryoshka_prefixes(32, 8, 16) == [8, 16, 32]
    assert matryoshka_prefixes(32, 8, 64) == [8, 32]


def test_distinct_items_dedupes_and_maps_back():
    data = FitData.from_arrays(
        docs=np.arange(5 * 3, dtype=np.float32).reshape(5, 3), queries=-np.arange(4 * 3).reshape(4, 3),
        t_q=[0, 0, 2, 2], t_p=[1, 1, 3, 4], t_n=[4, 2, 1, 1], y_p=[1, 1, 1, 1], y_n=[0, 0, 0, 0])
    idx = torch.arange(4)
    z, w, iq, ip, in_ = distinct_items(data, idx)
    assert z.shape[0] == 3 * 4 and w.tolist() == [1, 1, 0, 0] + [1, 1, 1, 1, 0, 0, 0, 0]  # fixed size, padded
    real = z[w > 0]
    assert torch.equal(real, torch.cat([data.queries[[0, 2]], data.docs[[1, 2, 3, 4]]]))  # queries {0, 2}, docs {1, 2, 3, 4}
    q, p, n, _, _ = data.triplet_batch(idx)
    assert torch.equal(z[iq], q) and torch.equal(z[ip], p) and torch.equal(z[in_], n)


def test_distinct_rows_is_unique_at_a_fixed_size():
    from dive_core.methods.mrl import distinct_rows

    g = torch.Generator().manual_seed(0)
    for n, high in ((1, 3), (7, 3), (50, 20), (128, 1000), (64, 1)):
        rows = torch.randint(0, high, (n,), generator=g)
        uniq, inverse, weight = distinct_rows(rows)
        want, want_inv = torch.unique(rows, return_inverse=True)
        u = want.shape[0]
        assert uniq.shape == inverse.shape == weight.shape == (n,)
        assert torch.equal(uniq[:u], want) and torch.equal(inverse, want_inv)
        assert weight.tolist() == [1.0] * u + [0.0] * (n - u)


# --------------------------------------------------------------------------- methods
@pytest.fixture(scope="module")
def problem():
    return make_problem()


def train(problem, type_name, seed=0, **overrides):
    m = new_method(type_name, problem.d, problem.k, {**HP[type_name], **overrides}, seed)
    log = TrainLog()
    m.fit(problem.train, log, progress=False)
    return m, log


@pytest.fixture(scope="module")
def trained(problem):
    """One FAST training run per method, with the untrained score measured first."""
    out = {}
    for t in TYPES:
        m0 = new_method(t, problem.d, problem.k, HP[t], 0)
        before = problem.score(m0)
        m, log = train(problem, t)
        out[t] = (before, problem.score(m), m, log)
    return out


@pytest.mark.parametrize("type_name", TYPES)
def test_training_improves_validation_ndcg(trained, type_name, ci_log):
    before, after, _, _ = trained[type_name]
    ci_log(f"  {type_name}: validation nDCG@10 {before:.4f} -> {after:.4f}")
    assert after > before + 0.1


@pytest.mark.parametrize("type_name", TYPES)
def test_logs_each_weighted_term(trained, type_name):
    _, _, _, log = trained[type_name]
    assert len(log.rows) == FAST["epochs"]
    for row in log.rows:
        for col in LOGGED[type_name]:
            assert np.isfinite(row[col])
        assert row["total"] == pytest.approx(sum(row[c] for c in LOGGED[type_name]), rel=1e-5)
    assert log.rows[-1]["total"] < log.rows[0]["total"]


@pytest.mark.parametrize("type_name", TYPES)
def test_compress_normalised_width_k(trained, problem, type_name):
    _, _, m, _ = trained[type_name]
    out = m.compress(problem.docs)
    assert out.shape == (problem.docs.shape[0], problem.k) and out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    with pytest.raises(ValueError, match="expected"):
        m.compress(problem.docs[:, :5])


@pytest.mark.parametrize("type_name", TYPES)
def test_save_load_round_trip(trained, problem, type_name, tmp_path):
    _, _, m, _ = trained[type_name]
    path = tmp_path / f"{type_name}.pt"
    m.save(path, meta={"note": "test"})
    # a different global RNG state at load time must not matter (e.g. Search-Adaptor's predictor)
    torch.manual_seed(12345)
    loaded = Method.load(path)
    assert type(loaded) is type(m) and loaded.hp == m.hp and loaded.meta == {"note": "test"}
    for x in (problem.docs, problem.val_queries):
        np.testing.assert_array_equal(loaded.compress(x), m.compress(x))


def test_search_adaptor_checkpoint_holds_only_the_adapter(trained):
    _, _, m, _ = trained["search_adaptor"]
    keys = set(m.state_dict())
    assert keys and all(k.startswith("adapter.") for k in keys)
    # the predictor did train (it is in the optimiser), it is just not saved
    assert m.predictor.down.weight.abs().sum() > 0


@pytest.mark.parametrize("type_name", ["mrl", "search_adaptor"])
def test_identity_at_init(problem, type_name):
    m = new_method(type_name, problem.d, problem.k, HP[type_name], 7)
    trunc = new_method("truncate", problem.d, problem.k, {}, 7)
    for x in (problem.docs, problem.val_queries):
        np.testing.assert_array_equal(m.compress(x), trunc.compress(x))


def _short_run(problem, type_name, seed):
    m, log = train(problem, type_name, seed=seed, epochs=2)
    rows = [{k: v for k, v in r.items() if k != "seconds"} for r in log.rows]
    return m.compress(problem.docs), rows


@pytest.mark.parametrize("type_name", TYPES)
def test_deterministic_given_seed(problem, type_name):
    a, log_a = _short_run(problem, type_name, 2027)
    b, log_b = _short_run(problem, type_name, 2027)
    np.testing.assert_array_equal(a, b)
    assert log_a == log_b
    c, _ = _short_run(problem, type_name, 2028)
    assert not np.array_equal(a, c)


def test_autoencoder_seed_changes_initialisation(problem):
    a = new_method("autoencoder", problem.d, problem.k, HP["autoencoder"], 1).compress(problem.docs)
    b = new_method("autoencoder", problem.d, problem.k, HP["autoencoder"], 2).compress(problem.docs)
    assert not np.array_equal(a, b)


def test_autoencoder_trains_on_corpus_without_triplets(problem):
    empty = np.zeros(0, dtype=np.int64)
    data = FitData.from_arrays(problem.docs, problem.val_queries[:0], empty, empty, empty, empty, empty)
    m = new_method("autoencoder", problem.d, problem.k, {**HP["autoencoder"], "epochs": 1}, 0)
    assert m.n_items(data) == problem.docs.shape[0]
    log = TrainLog()
    m.fit(data, log, progress=False)
    assert len(log.rows) == 1 and log.rows[0]["reconstruction"] > 0


# --------------------------------------------------------------------------- configuration errors
@pytest.mark.parametrize("type_name", TYPES)
def test_missing_and_unknown_hyperparameters(type_name):
    hp = dict(HP[type_name])
    del hp["lr"]
    with pytest.raises(ValueError, match="missing hyperparameters \\['lr'\\]"):
        new_method(type_name, 32, 8, hp, 0)
    with pytest.raises(ValueError, match="unknown \\['margin'\\]"):
        new_method(type_name, 32, 8, {**HP[type_name], "margin": 0.7}, 0)
    with pytest.raises(ValueError, match="output dimension k=40"):
        new_method(type_name, 32, 40, HP[type_name], 0)


@pytest.mark.parametrize("type_name,key,value", [
    ("autoencoder", "lr", -1e-3),
    ("autoencoder", "lr", "fast"),
    ("autoencoder", "hidden", 0),
    ("autoencoder", "epochs", 2.5),
    ("autoencoder", "batch_size", True),
    ("autoencoder", "weight_decay", float("nan")),
    ("mrl", "alpha", -1.0),
    ("mrl", "min_prefix", "16x"),
    ("mrl", "topk_neighbors", 0),
    ("mrl", "gamma_rank", None),
    ("search_adaptor", "beta", -0.01),
    ("search_adaptor", "predictor_hidden", 1.5),
    ("search_adaptor", "alpha", [0.1]),
    ("search_adaptor", "l1_reduction", "max"),
    ("mrl", "l1_reduction", None),
])
def test_wrong_hyperparameter_values(type_name, key, value):
    with pytest.raises(ValueError, match=f"method '{type_name}': hyperparameter '{key}' must be"):
        new_method(type_name, 32, 8, {**HP[type_name], key: value}, 0)


def test_numeric_strings_accepted_for_real_values(problem):
    # YAML 1.1 reads `1e-3` as a string; like DIVE's float(), accept it.
    m = new_method("mrl", problem.d, problem.k, {**HP["mrl"], "lr": "1e-3", "hidden": 64.0}, 0)
    assert m.net["adapter"].hidden == 64


def test_resolve_hparams_from_config_entries():
    training = {"epochs": 50, "batch_size": 128, "hidden": 2048, "weight_decay": 0.01}
    entry = {"type": "mrl", "alpha": 1.0, "beta": 1.0, "gamma_rank": 1.0, "min_prefix": 16,
             "topk_neighbors": 10, "l1_reduction": "mean", "schedule": "joint", "lr": 2.0e-4}
    hp = resolve_hparams("mrl", entry, training)
    assert hp["hidden"] == 2048 and hp["lr"] == 2.0e-4
    with pytest.raises(ValueError, match="missing hyperparameter 'predictor_hidden'"):
        resolve_hparams("search_adaptor", {"type": "search_adaptor", "alpha": 0.1, "beta": 0.01,
                                           "lr": 2.0e-4}, training)
    with pytest.raises(ValueError, match="unknown key"):
        resolve_hparams("autoencoder", {"type": "autoencoder", "lr": 1.0e-3, "alpha": 1}, training)


@pytest.mark.parametrize("stop_gradient", [False, True])
def test_search_adaptor_prediction_target_gradient(problem, stop_gradient):
    """L_pred = mean_i |f(q_i) - P(f(p_i))|_1; with prediction_stop_gradient the target f(q) is
    a constant, so no gradient of L_pred reaches the queries (only documents move toward the
    predicted query); without it the queries are pulled toward the predicted documents.
    Rank term switched off (equal grades), reconstruction off (alpha = 0)."""
    hp = dict(HP["search_adaptor"], alpha=0.0, beta=1.0, prediction_stop_gradient=stop_gradient)
    m = new_method("search_adaptor", problem.d, problem.k, hp, 0)
    tr = problem.train
    queries = tr.queries.clone().requires_grad_()
    docs = tr.docs.clone().requires_grad_()
    data = FitData(docs, queries, tr.t_q, tr.t_p, tr.t_n, tr.y_p * 0 + 1, tr.y_n * 0 + 1)
    idx = torch.arange(6)
    out = m.batch_loss(data, idx)
    # identity adapter and predictor at init: L_pred = mean_i sum_c |q_ic - p_ic|
    q, p = tr.queries[tr.t_q[:6]].tolist(), tr.docs[tr.t_p[:6]].tolist()
    by_hand = sum(sum(abs(a - b) for a, b in zip(q[i], p[i])) for i in range(6)) / 6
    assert out["prediction"].item() == pytest.approx(by_hand, rel=1e-5)
    out["loss"].backward()
    assert docs.grad.abs().sum() > 0
    assert (queries.grad.abs().sum() == 0) == stop_gradient


def test_mrl_two_stage_schedule(problem):
    """two_stage: the first ceil(E/2) epochs are unsupervised over the corpus (no rank term),
    the rest supervised over the triplets; joint: every epoch supervised."""
    m, log = train(problem, "mrl", epochs=5, schedule="two_stage")
    assert [r["phase"] for r in log.rows] == ["unsupervised"] * 3 + ["supervised"] * 2
    assert all(r["rank"] == 0.0 for r in log.rows[:3]) and all(r["rank"] > 0 for r in log.rows[3:])
    _, joint = train(problem, "mrl", epochs=2)
    assert [r["phase"] for r in joint.rows] == ["train"] * 2
    with pytest.raises(ValueError, match="two_stage"):
        new_method("mrl", problem.d, problem.k, dict(HP["mrl"], epochs=1, schedule="two_stage"), 0)


def test_a_checkpoint_of_an_older_format_is_refused_with_what_to_rerun(problem, tmp_path):
    """Checkpoints written before the records had versions (format dive-pipeline-checkpoint/1,
    some without hyperparameters added later) are refused, never filled in: the message names
    the file and the rule that rebuilds it."""
    from dive_core.records import RecordError

    m = new_method("mrl", problem.d, problem.k, HP["mrl"], 0)
    path = tmp_path / "old.pt"
    m.save(path)
    obj = torch.load(path, weights_only=True)
    obj["format"] = "dive-pipeline-checkpoint/1"
    del obj["hparams"]["schedule"]
    torch.save(obj, path)
    with pytest.raises(RecordError, match=rf"{path}: checkpoint record of format 'dive-pipeline-checkpoint/1'.*"
                                          rf"rerun `snakemake {path}` \(rule train\)"):
        Method.load(path)
