"""SMEC baseline (dive_core/methods/smec.py); its loss terms alone (dive_core/losses.py) are in test_losses.py."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dive_core.losses import SMECCrossBatchLoss
from dive_core.methods import new_method, resolve_hparams
from dive_core.methods.base import Method
from dive_core.methods.smec import (CrossBatchMemory, FrozenNeighbours, gumbel_topk_mask, split_epochs, stage_widths,
                                    topk_indices)
from dive_core.training import FitData, TrainLog
from synthetic import FAST, make_problem

SMEC_SPECIFIC = dict(queue_size=4096, queue_neighbors=10, gumbel_tau=1.0, xbm_weight=1.0, ads_lr=1e-2)
SMEC_HP = dict(SMEC_SPECIFIC, lr=1e-3, **FAST)  # FAST: 15 epochs -> stages of 8 and 7 epochs


# -- helpers: plain-Python references ---------------------------------------------------------
def _cos(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def _softplus(x):
    return math.log(1.0 + math.exp(x))


# -- ADS ------------------------------------------------------------------------------------
def test_gumbel_topk_is_exact_k_hot_with_gradient_to_scores():
    logits = torch.randn(12, generator=torch.Generator().manual_seed(1)).requires_grad_()
    gen = torch.Generator().manual_seed(7)
    state = gen.get_state()
    mask, idx = gumbel_topk_mask(logits, 5, tau=0.5, generator=gen)
    assert set(mask.detach().unique().tolist()) <= {0.0, 1.0}
    assert mask.detach().sum().item() == 5.0
    assert torch.nonzero(mask.detach()).flatten().tolist() == idx.tolist()
    assert idx.tolist() == sorted(idx.tolist())
    # gradients reach the importance scores, and they are those of softmax((logits + g) / tau)
    w = torch.randn(12, generator=torch.Generator().manual_seed(2))
    (mask * w).sum().backward()
    assert logits.grad is not None and torch.isfinite(logits.grad).all() and logits.grad.abs().sum() > 0
    u = torch.rand(12, generator=torch.Generator().set_state(state))
    g = -torch.log(-torch.log(u.clamp_min(1e-20)))
    ref_logits = logits.detach().clone().requires_grad_()
    pert = ref_logits + g
    (torch.softmax(pert / 0.5, dim=-1) * w).sum().backward()
    assert torch.allclose(logits.grad, ref_logits.grad, atol=1e-7)
    # the hard selection is the top-k of the perturbed scores
    assert idx.tolist() == sorted(torch.topk(pert.detach(), 5).indices.tolist())
    # same generator seed -> same draw
    _, idx2 = gumbel_topk_mask(logits, 5, tau=0.5, generator=torch.Generator().manual_seed(7))
    assert idx2.tolist() == idx.tolist()


def test_deterministic_topk_ties_go_to_lower_index():
    assert topk_indices(torch.zeros(8), 3).tolist() == [0, 1, 2]
    assert topk_indices(torch.tensor([0.0, 2.0, 1.0, 2.0, -1.0]), 3).tolist() == [1, 2, 3]


# -- S-XBM queue ----------------------------------------------------------------------------
def _ref_push(queue, batch, size):
    """List reference: a batch item keeps its last position, a queued item moves to the end."""
    last = {}
    for pos, key in enumerate(batch):
        last[key] = pos
    new = [key for pos, key in enumerate(batch) if last[key] == pos]
    return ([key for key in queue if key not in new] + new)[-size:]


@pytest.mark.parametrize("n_items", [None, 15])  # queue-ordered arrays / per-item tables
def test_fifo_queue_keeps_newest_items_in_order(n_items):
    q = CrossBatchMemory(size=5, dim=2, wide_dim=1, n_items=n_items)
    ref: list[int] = []
    latest: dict[int, float] = {}
    for step, batch in enumerate(([0, 1, 2], [3, 4, 5, 6], [4, 7, 7], [8], [2, 8, 3], [9, 10, 11, 12, 13, 14])):
        keys = torch.tensor(batch)
        wide = (100 * step + 10 * keys + torch.arange(len(batch))).float()[:, None]  # which push, which row
        q.push(keys, torch.stack([keys.float(), -keys.float()], 1), wide)
        for row, key in enumerate(batch):  # an item's wide vector is its last row in its last push
            latest[key] = float(wide[row, 0])
        ref = _ref_push(ref, batch, 5)
        assert q.keys.tolist() == ref
        assert q.emb[:, 0].tolist() == [float(k) for k in ref]  # embeddings travel with their keys
        assert q.emb[:, 1].tolist() == [-float(k) for k in ref]
        assert q.wide[:, 0].tolist() == [latest[k] for k in ref]
        at = torch.tensor([[len(ref) - 1, 0]])
        assert q.wide_at(at)[..., 0].tolist() == [[latest[ref[-1]], latest[ref[0]]]]
        if n_items is not None:
            assert q.position[q.keys].tolist() == list(range(len(ref)))
    assert q.keys.tolist() == [10, 11, 12, 13, 14] and len(q) == 5
    plain = CrossBatchMemory(size=4, dim=1)
    for start in range(0, 10, 3):  # distinct items: plain FIFO
        keys = torch.arange(start, min(start + 3, 10))
        plain.push(keys, keys[:, None].float())
    assert plain.keys.tolist() == [6, 7, 8, 9]


# -- stages ---------------------------------------------------------------------------------
def test_stage_widths_and_epoch_split():
    assert stage_widths(384, 64) == [384, 192, 96, 64]
    assert stage_widths(384, 96) == [384, 192, 96]
    assert stage_widths(32, 8) == [32, 16, 8]
    assert stage_widths(4096, 128) == [4096, 2048, 1024, 512, 256, 128]
    assert stage_widths(16, 16) == [16]
    assert split_epochs(50, 3) == [17, 17, 16]
    assert split_epochs(15, 2) == [8, 7]
    assert split_epochs(50, 0) == []
    with pytest.raises(ValueError, match="cannot be split"):
        split_epochs(2, 3)
    m = new_method("smec", 384, 64, dict(SMEC_HP, hidden=8), seed=0)
    assert [(s.width_in, s.width_out) for s in m.stages] == [(384, 192), (192, 96), (96, 64)]
    assert m.stage_epochs == [5, 5, 5]
    with pytest.raises(ValueError, match="cannot be split"):
        new_method("smec", 384, 64, dict(SMEC_HP, hidden=8, epochs=2), seed=0)


def test_bad_hyperparameters_are_rejected():
    for key, bad in (("gumbel_tau", 0.0), ("queue_size", 0), ("queue_neighbors", 1.5), ("xbm_weight", -1.0)):
        with pytest.raises(ValueError, match=key):
            new_method("smec", 32, 8, dict(SMEC_HP, **{key: bad}), seed=0)


def test_config_entry_resolves():
    entry = dict(type="smec", lr=5.0e-6, **SMEC_SPECIFIC)
    training = dict(epochs=50, batch_size=128, hidden=2048, weight_decay=0.01)
    hp = resolve_hparams("smec", entry, training)
    assert hp == dict(SMEC_SPECIFIC, lr=5.0e-6, **training)
    with pytest.raises(ValueError, match="unknown key"):
        resolve_hparams("smec", dict(entry, margin=0.7), training)


# -- training on the synthetic problem --------------------------------------------------------
@pytest.fixture(scope="module")
def problem():
    torch.set_num_threads(1)
    return make_problem()


def _snapshot(stage):
    return {k: v.detach().clone() for k, v in stage.state_dict().items()}


@pytest.fixture(scope="module")
def trained(problem):
    m = new_method("smec", problem.d, problem.k, SMEC_HP, seed=0)
    before = problem.score(m)
    untrained_docs = m.compress(problem.docs)
    snaps = []  # (phase, stage-1 state, stage-2 state) after every epoch
    log = TrainLog(on_epoch=lambda row: snaps.append((row["phase"], _snapshot(m.stages[0]),
                                                       _snapshot(m.stages[1]))))
    m.fit(problem.train, log, progress=False)
    return dict(method=m, before=before, after=problem.score(m), log=log, snaps=snaps,
                untrained_docs=untrained_docs)


def test_untrained_smec_is_truncate(problem, trained):
    tr = new_method("truncate", problem.d, problem.k, {}, 0)
    assert np.allclose(trained["untrained_docs"], tr.compress(problem.docs), atol=1e-6)
    assert trained["before"] == pytest.approx(problem.score(tr))


def test_training_improves_validation_ndcg(trained):
    print(f"synthetic nDCG@10: untrained {trained['before']:.4f} -> trained {trained['after']:.4f}")
    assert trained["after"] > trained["before"] + 0.05  # 0.215 -> 0.312 with seed 0


def test_log_has_one_phase_per_stage(trained):
    rows = trained["log"].rows
    assert [r["phase"] for r in rows] == ["stage1"] * 8 + ["stage2"] * 7
    assert [r["epoch"] for r in rows] == list(range(1, 16))
    assert {(r["width_in"], r["width_out"]) for r in rows if r["phase"] == "stage1"} == {(32.0, 16.0)}
    assert {(r["width_in"], r["width_out"]) for r in rows if r["phase"] == "stage2"} == {(16.0, 8.0)}
    for r in rows:
        parts = r["rank_wide"] + r["rank_narrow"] + r["xbm_wide"] + r["xbm_narrow"]
        assert r["total"] == pytest.approx(parts, rel=1e-5)
        assert 0 < r["neighbours"] <= 10


def test_earlier_stage_frozen_during_later_stage(trained):
    m, snaps = trained["method"], trained["snaps"]
    final1, final2 = _snapshot(m.stages[0]), _snapshot(m.stages[1])
    last_stage1 = [s1 for phase, s1, _ in snaps if phase == "stage1"][-1]
    for name, value in last_stage1.items():
        if name != "selected":  # the selection is fixed by freeze(), right after the last epoch
            assert torch.equal(value, final1[name]), name
    for phase, s1, s2 in snaps:
        if phase == "stage2":
            assert all(torch.equal(v, final1[k]) for k, v in s1.items())
    # ... while stage 2 did train, and stage 1 did learn something in its own phase
    first_stage2 = [s2 for phase, _, s2 in snaps if phase == "stage2"][0]
    assert not torch.equal(first_stage2["adapter.up.weight"], final2["adapter.up.weight"])
    assert not torch.equal(final1["adapter.down.weight"], torch.zeros_like(final1["adapter.down.weight"]))
    assert not any(p.requires_grad for p in m.net.parameters())
    # the frozen selection is the deterministic top-k of the learned importance scores
    for st in m.stages:
        assert st.selected.tolist() == topk_indices(st.importance, st.width_out).tolist()


def test_compress_is_normalised_width_k(problem, trained):
    out = trained["method"].compress(problem.docs)
    assert out.shape == (len(problem.docs), problem.k) and out.dtype == np.float32
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)


def test_save_load_round_trip(tmp_path, problem, trained):
    m = trained["method"]
    path = tmp_path / "smec.pt"
    m.save(path)
    loaded = Method.load(path)
    assert loaded.type == "smec" and [s.selected.tolist() for s in loaded.stages] == \
        [s.selected.tolist() for s in m.stages]
    assert "stages.0.selected" in loaded.state_dict() and "stages.1.selected" in loaded.state_dict()
    assert any(s.selected.tolist() != list(range(s.width_out)) for s in m.stages)  # learned, not prefix
    assert np.array_equal(loaded.compress(problem.docs), m.compress(problem.docs))
    assert np.array_equal(loaded.compress(problem.val_queries), m.compress(problem.val_queries))


def test_same_seed_is_deterministic(problem, trained):
    again = new_method("smec", problem.d, problem.k, SMEC_HP, seed=0)
    log = TrainLog()
    again.fit(problem.train, log, progress=False)
    assert np.array_equal(again.compress(problem.docs), trained["method"].compress(problem.docs))
    assert [r["total"] for r in log.rows] == [r["total"] for r in trained["log"].rows]


def test_first_step_objective_by_hand(problem):
    """Step 1 of stage 1: identity adapter, empty queue, so the objective is
    1/2 R(z) + 1/2 R(z[:, I]) with I the step's Gumbel selection and no S-XBM term; the queue
    then holds the step's distinct items, whose stored vectors step 2 reads."""
    m = new_method("smec", problem.d, problem.k, dict(SMEC_HP, epochs=2), seed=3)
    calls = []
    original = m._stage_loss

    def spy(data, idx):
        t = int(m._t)  # the step's row of the epoch's schedule (SMEC._schedule)
        row = {k: v[t].clone() for k, v in m._sched.items()}
        adapter_down = m.stages[0].adapter.down.weight.detach().clone()
        table, occupant = m._wide.clone(), m._occupant.clone()  # vectors per queue slot, each slot's item
        out = original(data, idx)
        calls.append(dict(idx=idx.clone(), row=row, table=table, occupant=occupant, adapter_down=adapter_down, z=m._z,
                          items=torch.cat([m._tq[idx], m._tp[idx], m._tn[idx]]),
                          out={k: v.detach() for k, v in out.items()}))
        if len(calls) == 2:
            raise StopIteration  # enough
        return out

    m._stage_loss = spy
    with pytest.raises(StopIteration):
        m.fit(problem.train, TrainLog(), progress=False)
    first, second = calls
    data = problem.train
    idx = first["idx"].tolist()
    _, sel = gumbel_topk_mask(torch.zeros(problem.d), problem.d // 2, 1.0, noise=first["row"]["noise"])
    sel = sel.tolist()
    q, p, n = (data.queries.numpy(), data.docs.numpy(), data.docs.numpy())
    terms_wide, terms_narrow = [], []
    for i in idx:
        qi, pi, ni = q[data.t_q[i]], p[data.t_p[i]], n[data.t_n[i]]
        w = float(data.y_p[i] - data.y_n[i])
        terms_wide.append(w * _softplus(_cos(qi, ni) - _cos(qi, pi)))
        pick = lambda v: [float(v[c]) for c in sel]  # noqa: E731
        terms_narrow.append(w * _softplus(_cos(pick(qi), pick(ni)) - _cos(pick(qi), pick(pi))))
    out = first["out"]
    # the step's anchors: its distinct items, padded to 3B rows of weight 0
    distinct = torch.unique(first["items"])
    assert first["row"]["anchors"].shape == (3 * SMEC_HP["batch_size"],)
    assert torch.equal(first["row"]["anchors"][first["row"]["weight"] > 0], distinct)
    assert not first["row"]["valid"].any() and out["neighbours"].item() == 0.0  # empty queue
    assert out["xbm_wide"].item() == 0.0 and out["xbm_narrow"].item() == 0.0
    assert out["rank_wide"].item() == pytest.approx(0.5 * sum(terms_wide) / len(idx), rel=1e-5)
    assert out["rank_narrow"].item() == pytest.approx(0.5 * sum(terms_narrow) / len(idx), rel=1e-5)
    assert out["loss"].item() == pytest.approx(out["rank_wide"].item() + out["rank_narrow"].item(), rel=1e-6)
    assert second["out"]["neighbours"].item() == 10.0
    # step 2's neighbours are items step 1 pushed, and the memory holds each entry's stage vector
    # from the step that enqueued it: step 1 ran the identity adapter, so the stored vectors are
    # exactly the frozen inputs z, although the adapter has moved since (f(z) != z)
    valid = second["row"]["valid"] & (second["row"]["weight"] > 0)[:, None]
    slots = second["row"]["nb"][valid]  # rows of the table: queue slots (the queue never evicts here)
    nb = second["occupant"][slots]
    assert set(nb.tolist()) <= set(distinct.tolist())
    assert torch.equal(second["table"][slots], second["z"][nb])
    assert second["adapter_down"].abs().sum() > 0


def test_requires_triplets(problem):
    empty = torch.zeros(0, dtype=torch.long)
    data = FitData(problem.train.docs, problem.train.queries, empty, empty, empty,
                   empty.float(), empty.float())
    with pytest.raises(ValueError, match="triplets"):
        new_method("smec", problem.d, problem.k, SMEC_HP, seed=0).fit(data, TrainLog(), progress=False)


def test_k_equal_d_is_identity(problem):
    m = new_method("smec", problem.d, problem.d, SMEC_HP, seed=0)
    assert len(m.stages) == 0
    log = TrainLog()
    m.fit(problem.train, log, progress=False)
    assert log.rows == []
    assert np.allclose(m.compress(problem.docs), problem.docs, atol=1e-6)


# -- ADS at the configured setting ------------------------------------------------------------
def _offprefix_problem(seed=0, d=32, n_docs=300, n_train=150, n_neg=4):
    """Retrieval signal only in coordinates d/2..d-1: stage 1 (32 -> 16) must move its selection
    off the prefix; the first d/2 coordinates are noise shared by nothing."""
    rng = np.random.default_rng(seed)
    sig = slice(d // 2, d)

    def norm(x):
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)

    docs = 0.5 * rng.standard_normal((n_docs, d))
    docs[:, sig] = rng.standard_normal((n_docs, d // 2))
    docs = norm(docs)
    pos = rng.integers(0, n_docs, size=n_train)
    q = 0.5 * rng.standard_normal((n_train, d))
    q[:, sig] = 3 * docs[pos][:, sig] + 0.3 * rng.standard_normal((n_train, d // 2))
    t_q, t_p = np.repeat(np.arange(n_train), n_neg), np.repeat(pos, n_neg)
    t_n = rng.integers(0, n_docs, size=n_train * n_neg)
    t_n = np.where(t_n == t_p, (t_n + 1) % n_docs, t_n)
    ones = np.ones(len(t_q), np.float32)
    return FitData.from_arrays(docs, norm(q), t_q, t_p, t_n, ones, 0 * ones)


def test_ads_learns_at_the_configured_learning_rates():
    """With the config's own SMEC entry (lr 5e-6 and the ADS learning rate), the importance
    scores must outgrow the Gumbel noise, so that training masks follow them, and select the
    informative coordinates. Before the audit the scores trained at lr 5e-6 like the adapter:
    their spread stayed below 0.001 of the noise std and every training mask was random."""
    from pathlib import Path

    from dive_core import config as dcfg
    from dive_core import plan
    from dive_core.methods.smec import ads_summary

    torch.set_num_threads(1)
    cfg = dcfg.load_yaml(Path(__file__).resolve().parent.parent / "config" / "config.yaml")
    hp = plan.method_hparams(cfg, "smec")
    assert hp["lr"] == 5e-6  # the configured (paper) value, not a convenient one
    hp.update(epochs=30, batch_size=16, hidden=64)  # small problem: more, smaller steps
    m = new_method("smec", 32, 8, hp, seed=0)
    log = TrainLog()
    m.fit(_offprefix_problem(), log, progress=False)
    st1 = ads_summary(m.stages[0])
    assert m.stages[0].selected.tolist() == list(range(16, 32))  # all signal, none of the prefix
    assert st1["prefix_overlap"] == 0.0
    assert st1["spread"] > 0.5, st1  # scores at least half the noise std: masks follow them
    assert m.meta["ads"][0] == st1  # what ADS learned is recorded with the checkpoint
    last = [r for r in log.rows if r["phase"] == "stage1"][-1]
    assert last["ads_prefix_overlap"] == 0.0 and last["ads_spread"] > 0.5


@pytest.mark.parametrize("queue_size", [7, 150, 400])
def test_precomputed_neighbours_equal_the_exact_search(queue_size):
    """The once-per-fit neighbour lists give the same S-XBM neighbours, targets and validity as
    the exact per-step search, while the queue fills and when it holds few of an anchor's
    candidates (exact fallback), with the anchor itself queued or not."""
    gen = torch.Generator().manual_seed(0)
    n, d, m = 200, 16, 10
    z = torch.randn(n, d, generator=gen)
    nbrs = FrozenNeighbours(F.normalize(z, dim=-1), m, queue_size)
    assert nbrs.M == min(n - 1, max(m, -(-4 * m * n // queue_size)))
    queue = CrossBatchMemory(queue_size, d, 1, n_items=n)
    fallbacks = 0
    for step in range(12):
        if len(queue):
            anchors = torch.unique(torch.randint(0, n, (30,), generator=gen))
            exclude = anchors[:, None] == queue.keys[None, :]
            want = SMECCrossBatchLoss.neighbours(z[anchors], queue.emb, m, exclude)
            got = nbrs.lookup(anchors, queue, z)
            assert torch.equal(got[2], want[2])
            assert torch.equal(got[0][want[2]], want[0][want[2]])
            assert torch.allclose(got[1][want[2]], want[1][want[2]], atol=1e-6)
            cand_queued = (queue.position[nbrs.idx[anchors]] >= 0).sum(1)
            fallbacks += int((cand_queued < want[2].sum(1)).sum())
        keys = torch.randint(0, n, (25,), generator=gen)
        queue.push(keys, z[keys])
        assert queue.position[queue.keys].tolist() == list(range(len(queue)))
    if queue_size == 7:
        assert fallbacks == 0  # M = n - 1: every queued item is a candidate
    if queue_size == 150:
        assert fallbacks > 0  # M = 54 of 199: some anchors need the exact search


def test_neighbour_search_cost_model():
    assert FrozenNeighbours.worthwhile(6000, 10, 4096, steps=4000, anchors_per_step=384)
    assert not FrozenNeighbours.worthwhile(1_000_000, 10, 4096, steps=4000, anchors_per_step=384)


def test_sxbm_with_a_mask_scale_equals_gathering_the_selected_columns():
    """The narrow-width S-XBM term computed at the wide width with the k-hot ADS mask as a scale
    (no per-neighbour column gather) equals the term on the gathered columns: value, and the
    gradients that reach the adapter output and the importance scores (A = 40, m = 10, w = 384)."""
    g = torch.Generator().manual_seed(3)
    wide = torch.randn(40, 384, generator=g, dtype=torch.float64, requires_grad=True)
    logits = torch.randn(384, generator=g, dtype=torch.float64, requires_grad=True)
    nb = torch.randn(40, 10, 384, generator=g, dtype=torch.float64)
    target = torch.rand(40, 10, generator=g, dtype=torch.float64)
    valid = torch.rand(40, 10, generator=g) > 0.2
    loss = SMECCrossBatchLoss()

    def grads(scaled: bool):
        wide.grad = logits.grad = None
        mask, sel = gumbel_topk_mask(logits, 192, 1.0, torch.Generator().manual_seed(0))
        if scaled:
            value = loss(wide, nb, target, valid, mask)
        else:
            value = loss(wide[:, sel] * mask[sel], nb[..., sel] * mask[sel], target, valid)
        value.backward()
        return value.item(), wide.grad.clone(), logits.grad.clone()

    v1, gw1, gl1 = grads(True)
    v0, gw0, gl0 = grads(False)
    assert v1 == pytest.approx(v0, rel=1e-12)
    assert torch.allclose(gw1, gw0, rtol=0, atol=1e-14) and torch.count_nonzero(gw0) > 0
    assert torch.allclose(gl1, gl0, rtol=0, atol=1e-14) and torch.count_nonzero(gl0) > 0
