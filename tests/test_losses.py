"""The loss terms of dive_core/losses.py (DIVE's, the baselines' and SMEC's) against hand-computed
examples and explicit Python loops, not the vectorised code under test."""

import math

import pytest
import torch

from dive_core.losses import (
    GeometryDistillationLoss,
    HingeTripletLoss,
    L1ReconstructionLoss,
    MatryoshkaPairSimilarityLoss,
    MatryoshkaRankLoss,
    MatryoshkaTopKSimilarityLoss,
    MultiPositiveNTXent,
    PairwiseSoftplusRankLoss,
    QueryPredictionLoss,
    ReconstructionMSELoss,
    SMECCrossBatchLoss,
    SoftplusTripletLoss,
    triplet_margins,
)


def t(*rows):
    return torch.tensor(rows, dtype=torch.float64)


# ---------------------------------------------------------------- triplet losses
# Triplet 1: q=(1,0), p=(0.8,0.6), n=(0.6,0.8): Delta = 0.8 - 0.6 = 0.2  -> active (< 0.7)
# Triplet 2: q=(1,0), p=(1,0),     n=(0,1):     Delta = 1 - 0 = 1.0      -> satisfied
Q, P, N = t([1, 0], [1, 0]), t([0.8, 0.6], [1, 0]), t([0.6, 0.8], [0, 1])


def test_margins():
    assert torch.allclose(triplet_margins(Q, P, N), t(0.2, 1.0).squeeze())


def test_hinge_value():
    # (max(0, 0.7 - 0.2) + max(0, 0.7 - 1.0)) / 2 = (0.5 + 0) / 2
    assert HingeTripletLoss(0.7)(Q, P, N).item() == pytest.approx(0.25, abs=1e-12)
    assert HingeTripletLoss(0.7).active(Q, P, N).tolist() == [True, False]


def test_hinge_zero_gradient_for_satisfied_triplet():
    q, p, n = (x.clone().requires_grad_(True) for x in (Q, P, N))
    HingeTripletLoss(0.7)(q, p, n).backward()
    for g in (q.grad, p.grad, n.grad):
        assert torch.equal(g[1], torch.zeros(2, dtype=g.dtype))  # exactly zero, not just small
        assert g[0].abs().sum() > 0  # the active triplet does get a gradient
    # d/dq of (m - q.p + q.n)/B = (n - p)/B for the active triplet
    assert torch.allclose(q.grad[0], (N[0] - P[0]) / 2)


def test_all_satisfied_batch_gives_exactly_zero_gradient():
    q, p, n = t([1, 0]), t([1, 0]), t([-1, 0])
    q.requires_grad_(True)
    loss = HingeTripletLoss(0.7)(q, p, n)
    loss.backward()
    assert loss.item() == 0.0 and torch.count_nonzero(q.grad) == 0


def test_softplus_value_and_gradient_never_zero():
    expected = (math.log1p(math.exp(0.5)) + math.log1p(math.exp(-0.3))) / 2
    q = Q.clone().requires_grad_(True)
    loss = SoftplusTripletLoss(0.7)(q, P, N)
    assert loss.item() == pytest.approx(expected, abs=1e-12)
    loss.backward()
    assert q.grad[1].abs().sum() > 0  # satisfied triplet still pushes (the ablation's point)


# ---------------------------------------------------------------- NT-Xent over heads
def ntxent_by_hand(heads, tau):
    """Literal transcription of l(i,h) (docs/methods.md#dive) with Python loops."""
    b, h = len(heads), len(heads[0])
    dot = lambda u, v: sum(x * y for x, y in zip(u, v))  # noqa: E731
    total = 0.0
    for i in range(b):
        for a in range(h):
            denom = sum(math.exp(dot(heads[i][a], heads[j][g]) / tau)
                        for j in range(b) for g in range(h) if (j, g) != (i, a))
            li = 0.0
            for a2 in range(h):
                if a2 != a:
                    li += math.log(math.exp(dot(heads[i][a], heads[i][a2]) / tau) / denom)
            total += -li / (h - 1)
    return total / (b * h)


def test_ntxent_single_sample_two_heads_is_zero():
    # one sample, H=2: the only other element is the positive -> log(1) = 0
    heads = t([[1, 0], [0, 1]])  # shape (B=1, H=2, k=2)
    assert MultiPositiveNTXent(0.1)(heads).item() == pytest.approx(0.0, abs=1e-12)


def test_ntxent_identical_vectors_is_log3():
    # B=2, H=2, all heads equal: each anchor has 3 others with the same similarity, 1 positive
    heads = torch.ones(2, 2, 2, dtype=torch.float64) / math.sqrt(2)
    assert MultiPositiveNTXent(1.0)(heads).item() == pytest.approx(math.log(3), abs=1e-12)


def test_ntxent_matches_hand_computation():
    g = torch.Generator().manual_seed(0)
    heads = torch.nn.functional.normalize(torch.randn(3, 4, 5, generator=g, dtype=torch.float64), dim=-1)
    expected = ntxent_by_hand(heads.tolist(), 0.1)
    assert MultiPositiveNTXent(0.1)(heads).item() == pytest.approx(expected, rel=1e-10)


def test_ntxent_needs_two_heads():
    with pytest.raises(ValueError):
        MultiPositiveNTXent(0.1)(torch.ones(3, 1, 4))


# ---------------------------------------------------------------- geometry distillation
def test_geometry_quadratic_region():
    # S S^T off-diagonal = 0, T T^T off-diagonal = 0.6 -> SmoothL1 = 0.5 * 0.6^2 = 0.18
    s, tt = t([1, 0], [0, 1]), t([1, 0, 0], [0.6, 0.8, 0])
    assert GeometryDistillationLoss()(s, tt).item() == pytest.approx(0.18, abs=1e-12)


def test_geometry_linear_region_and_diagonal_ignored():
    # S sim = -1, T sim = 0.6: |diff| = 1.6 >= 1 -> 1.6 - 0.5 = 1.1; the diagonal (1 vs 1) is excluded
    s, tt = t([1, 0], [-1, 0]), t([1, 0, 0], [0.6, 0.8, 0])
    assert GeometryDistillationLoss()(s, tt).item() == pytest.approx(1.1, abs=1e-12)


def test_geometry_three_items_mean_over_off_diagonal():
    # pairs (0,1): S 0 vs T 0.6 -> 0.18 ; (0,2): S 1 vs T 1 -> 0 ; (1,2): S 0 vs T 0.6 -> 0.18
    s = t([1, 0], [0, 1], [1, 0])
    tt = t([1, 0, 0], [0.6, 0.8, 0], [1, 0, 0])
    assert GeometryDistillationLoss()(s, tt).item() == pytest.approx((0.18 * 2 * 2 + 0 * 2) / 6, abs=1e-12)


def test_geometry_zero_when_student_preserves_gram():
    tt = torch.nn.functional.normalize(torch.randn(6, 8, dtype=torch.float64), dim=-1)
    assert GeometryDistillationLoss()(tt, tt).item() == 0.0


# ---------------------------------------------------------------- the fast forms against the masked ones
# The loss modules compute NT-Xent as LSE minus the positive sum and the geometry term as the full
# SmoothL1 sum minus the diagonal's. These references are the plain masked forms of the same
# equations; value and gradient must agree at the configured values (B = 128, H = 4, k = 64,
# tau = 0.1; student 3B x k, teacher 3B x 384).
def ntxent_masked(heads, tau):
    b, h, _ = heads.shape
    flat = heads.reshape(b * h, -1)
    eye = torch.eye(b * h, dtype=torch.bool)
    logp = torch.log_softmax((flat @ flat.T / tau).masked_fill(eye, float("-inf")), dim=1)
    owner = torch.arange(b).repeat_interleave(h)
    pos = (owner[:, None] == owner[None, :]) & ~eye
    return (-(logp.masked_fill(~pos, 0.0).sum(1)) / (h - 1)).mean()


def geometry_masked(s, tt):
    off = ~torch.eye(s.shape[0], dtype=torch.bool)
    return torch.nn.functional.smooth_l1_loss((s @ s.T)[off], (tt @ tt.T)[off])


def _unit(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.nn.functional.normalize(torch.randn(*shape, generator=g, dtype=torch.float64), dim=-1)


def test_ntxent_equals_masked_form_value_and_gradient_at_configured_values():
    sets = _unit(3, 128, 4, 64).requires_grad_(True)
    fast = MultiPositiveNTXent(0.1)(sets)  # the three sets at once: the mean of their losses
    fast.backward()
    ref_sets = sets.detach().clone().requires_grad_(True)
    ref = sum(ntxent_masked(ref_sets[i], 0.1) for i in range(3)) / 3
    ref.backward()
    assert fast.item() == pytest.approx(ref.item(), rel=1e-12)
    assert torch.allclose(sets.grad, ref_sets.grad, rtol=0, atol=1e-15)
    one = MultiPositiveNTXent(0.1)(sets.detach()[1])  # a single (B, H, k) set
    assert one.item() == pytest.approx(ntxent_masked(sets.detach()[1], 0.1).item(), rel=1e-12)


def test_geometry_equals_masked_form_value_and_gradient_at_configured_values():
    s = _unit(384, 64, seed=1).requires_grad_(True)
    tt = _unit(384, 384, seed=2)
    fast = GeometryDistillationLoss()(s, tt)
    fast.backward()
    s_ref = s.detach().clone().requires_grad_(True)
    ref = geometry_masked(s_ref, tt)
    ref.backward()
    assert fast.item() == pytest.approx(ref.item(), rel=1e-12)
    assert torch.allclose(s.grad, s_ref.grad, rtol=0, atol=1e-15)
    # the linear region too: a student far from the teacher
    s2 = (-tt[:, :64]).clone()
    s2[:, 0] += 3.0
    assert GeometryDistillationLoss()(s2, tt).item() == pytest.approx(geometry_masked(s2, tt).item(), rel=1e-12)


# ---------------------------------------------------------------- loop references of the baselines' and SMEC's terms
def cos(a, b):
    a, b = [float(x) for x in a], [float(x) for x in b]
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def softplus(x):
    return math.log(1.0 + math.exp(x))


def rows(t):
    return t.tolist()


def rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# ---------------------------------------------------------------- autoencoder, Matryoshka-Adaptor, Search-Adaptor
def test_reconstruction_mse_by_hand():
    xhat = torch.tensor([[1.0, 2.0], [0.0, -1.0]])
    x = torch.tensor([[0.0, 0.0], [1.0, 1.0]])
    # squared errors 1, 4, 1, 4 -> mean over 4 entries = 2.5
    assert ReconstructionMSELoss()(xhat, x).item() == pytest.approx(2.5)
    a, b = rand(5, 3), rand(5, 3, seed=1)
    loop = sum((a[i, c].item() - b[i, c].item()) ** 2 for i in range(5) for c in range(3)) / 15
    assert ReconstructionMSELoss()(a, b).item() == pytest.approx(loop)


def test_l1_reconstruction_and_prediction_by_hand():
    e = torch.tensor([[1.0, -2.0, 0.5], [0.0, 0.0, 0.0]])
    z = torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, -1.0]])
    # item 1: 1 + 2 + 0.5 = 3.5; item 2: 3 -> mean 3.25
    assert L1ReconstructionLoss()(e, z).item() == pytest.approx(3.25)
    assert QueryPredictionLoss()(e, z).item() == pytest.approx(3.25)
    a, b = rand(4, 6), rand(4, 6, seed=2)
    loop = sum(sum(abs(x - y) for x, y in zip(ra, rb)) for ra, rb in zip(rows(a), rows(b))) / 4
    assert L1ReconstructionLoss()(a, b).item() == pytest.approx(loop)
    assert QueryPredictionLoss()(a, b).item() == pytest.approx(loop)
    # "mean": per-coordinate mean absolute error, (3.5 + 3) / 6 entries
    assert L1ReconstructionLoss("mean")(e, z).item() == pytest.approx(6.5 / 6)
    assert QueryPredictionLoss("mean")(a, b).item() == pytest.approx(loop / 6)
    with pytest.raises(ValueError, match="'sum' or 'mean'"):
        L1ReconstructionLoss("max")


def test_pairwise_softplus_rank_by_hand():
    # s_p = cos((1,0),(2,0)) = 1, s_n = cos((1,0),(0,3)) = 0 -> (1 - 0) * softplus(-1) = log(1 + e^-1)
    q, p, n = torch.tensor([[1.0, 0.0]]), torch.tensor([[2.0, 0.0]]), torch.tensor([[0.0, 3.0]])
    got = PairwiseSoftplusRankLoss()(q, p, n, torch.tensor([1.0]), torch.tensor([0.0]))
    assert got.item() == pytest.approx(math.log(1 + math.exp(-1)))  # 0.313262
    q, p, n = rand(6, 5), rand(6, 5, seed=1), rand(6, 5, seed=2)
    yp = torch.tensor([2.0, 1.0, 1.0, 2.0, 1.0, 1.0], dtype=torch.float64)
    yn = torch.tensor([0.0, 0.0, 1.0, 1.0, 0.0, 0.0], dtype=torch.float64)
    loop = sum((yp[i].item() - yn[i].item()) * softplus(cos(n[i], q[i]) - cos(q[i], p[i])) for i in range(6)) / 6
    assert PairwiseSoftplusRankLoss()(q, p, n, yp, yn).item() == pytest.approx(loop)


def test_matryoshka_rank_by_hand():
    q, p, n = rand(5, 8), rand(5, 8, seed=1), rand(5, 8, seed=2)
    yp = torch.tensor([1.0, 2.0, 1.0, 1.0, 2.0], dtype=torch.float64)
    yn = torch.zeros(5, dtype=torch.float64)
    prefixes = [2, 4, 8]
    terms = [(yp[i].item() - yn[i].item()) * softplus(cos(q[i][:m], n[i][:m]) - cos(q[i][:m], p[i][:m]))
             for i in range(5) for m in prefixes]
    assert MatryoshkaRankLoss(prefixes)(q, p, n, yp, yn).item() == pytest.approx(sum(terms) / len(terms))
    # one prefix equal to the full width = the plain pairwise loss
    assert MatryoshkaRankLoss([8])(q, p, n, yp, yn).item() == pytest.approx(
        PairwiseSoftplusRankLoss()(q, p, n, yp, yn).item())


def test_matryoshka_pair_by_hand():
    # 3 items in 2-d, one prefix m = 1: cos of 1-d prefixes is the sign product.
    z = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    e = torch.tensor([[1.0, 0.0], [1.0, 1.0], [-1.0, 1.0]])
    # frozen cos: (0,1)=0, (0,2)=(1,2)=1/sqrt2; prefix-1 cos of e: (0,1)=1, (0,2)=-1, (1,2)=-1
    # |diffs| over ordered pairs: 1, 1+1/sqrt2, 1+1/sqrt2 (each twice) -> mean = 1 + sqrt2/3
    got = MatryoshkaPairSimilarityLoss([1])(e, z).item()
    assert got == pytest.approx(1 + math.sqrt(2) / 3)
    z, e = rand(6, 8), rand(6, 8, seed=3)
    prefixes = [2, 5, 8]
    terms = [abs(cos(z[i], z[j]) - cos(e[i][:m], e[j][:m]))
             for i in range(6) for j in range(6) if i != j for m in prefixes]
    assert MatryoshkaPairSimilarityLoss(prefixes)(e, z).item() == pytest.approx(sum(terms) / len(terms))
    # identity adapter and full-width prefix only: zero loss
    assert MatryoshkaPairSimilarityLoss([8])(z, z).item() == pytest.approx(0.0, abs=1e-12)
    # a single item has no pairs
    assert MatryoshkaPairSimilarityLoss([2])(e[:1], z[:1]).item() == 0.0


def test_matryoshka_topk_by_hand():
    n, K, prefixes = 7, 2, [3, 6]
    z, e = rand(n, 6), rand(n, 6, seed=4)
    terms = []
    for i in range(n):
        others = sorted((j for j in range(n) if j != i), key=lambda j: -cos(z[i], z[j]))
        for j in others[:K]:
            for m in prefixes:
                terms.append(abs(cos(z[i], z[j]) - cos(e[i][:m], e[j][:m])))
    got = MatryoshkaTopKSimilarityLoss(prefixes, K)(e, z).item()
    assert got == pytest.approx(sum(terms) / len(terms))
    # K >= n - 1: every other item is a neighbour, i.e. L_pair
    assert MatryoshkaTopKSimilarityLoss(prefixes, 50)(e, z).item() == pytest.approx(
        MatryoshkaPairSimilarityLoss(prefixes)(e, z).item())
    # neighbours come from the frozen space, not the adapted one
    assert MatryoshkaTopKSimilarityLoss(prefixes, K)(e, z).item() != pytest.approx(
        MatryoshkaTopKSimilarityLoss(prefixes, K)(e, e).item())
    with pytest.raises(ValueError, match="topk"):
        MatryoshkaTopKSimilarityLoss(prefixes, 0)


def test_losses_have_gradients():
    z = rand(5, 8).float()
    e = (z + 0.1 * rand(5, 8, seed=1).float()).requires_grad_()
    loss = (MatryoshkaTopKSimilarityLoss([4, 8], 2)(e, z) + MatryoshkaPairSimilarityLoss([4])(e, z)
            + L1ReconstructionLoss()(e, z) + MatryoshkaRankLoss([4, 8])(e[:2], e[2:4], e[[4, 0]],
                                                                         torch.ones(2), torch.zeros(2)))
    loss.backward()
    assert e.grad is not None and torch.isfinite(e.grad).all() and e.grad.abs().sum() > 0


# ---------------------------------------------------------------- SMEC (rank term and S-XBM cross-batch term)
def test_rank_loss_matches_loop():
    q = [[1.0, 0.0, 2.0], [0.5, -1.0, 0.0]]
    p = [[1.0, 1.0, 1.0], [0.0, -2.0, 1.0]]
    n = [[-1.0, 0.0, 0.5], [1.0, 1.0, 1.0]]
    y_p, y_n = [2.0, 1.0], [0.0, 0.0]
    expected = sum((y_p[i] - y_n[i]) * softplus(cos(q[i], n[i]) - cos(q[i], p[i])) for i in range(2)) / 2
    got = PairwiseSoftplusRankLoss()(t(*q), t(*p), t(*n), t(*y_p), t(*y_n))
    assert got.item() == pytest.approx(expected, abs=1e-12)
    # equal grades contribute nothing
    assert PairwiseSoftplusRankLoss()(t(*q), t(*p), t(*n), t(1.0, 1.0), t(1.0, 1.0)).item() == 0.0


def test_cross_batch_neighbours_match_loop():
    anchors = [[1.0, 0.0, 0.0], [0.0, 1.0, 1.0]]
    queue = [[1.0, 0.1, 0.0], [0.9, 0.0, 0.3], [0.0, 1.0, 0.9], [-1.0, 0.2, 0.0], [0.2, 0.5, 0.5]]
    exclude = [[False, True, False, False, False], [False, False, False, False, False]]
    m = 2
    idx, target, valid = SMECCrossBatchLoss.neighbours(t(*anchors), t(*queue), m, torch.tensor(exclude))
    for i, a in enumerate(anchors):
        sims = [(cos(a, e), j) for j, e in enumerate(queue) if not exclude[i][j]]
        best = sorted(sims, reverse=True)[:m]
        assert idx[i].tolist() == [j for _, j in best]
        assert target[i].tolist() == pytest.approx([s for s, _ in best], abs=1e-12)
        assert valid[i].tolist() == [True] * m
    # fewer admissible entries than m: the empty slots are invalid
    idx, target, valid = SMECCrossBatchLoss.neighbours(t(*anchors[:1]), t(*queue[:2]), 10,
                                                       torch.tensor([[False, True]]))
    assert idx.shape == (1, 2) and valid.tolist() == [[True, False]] and idx[0, 0].item() == 0


def test_cross_batch_loss_matches_loop():
    anchor = [[1.0, 2.0], [0.0, 1.0]]
    nbrs = [[[1.0, 0.0], [2.0, 2.0], [0.0, -1.0]], [[1.0, 1.0], [3.0, 0.5], [0.0, 0.0]]]
    target = [[0.9, 0.1, -0.2], [0.5, 0.3, 0.0]]
    valid = [[True, True, True], [True, False, False]]
    terms = [abs(cos(anchor[i], nbrs[i][j]) - target[i][j])
             for i in range(2) for j in range(3) if valid[i][j]]
    got = SMECCrossBatchLoss()(t(*anchor), t(*nbrs), t(*target), torch.tensor(valid))
    assert got.item() == pytest.approx(sum(terms) / len(terms), abs=1e-12)
    # no admissible pair: zero, still differentiable
    a = t(*anchor).requires_grad_()
    zero = SMECCrossBatchLoss()(a, t(*nbrs), t(*target), torch.zeros(2, 3, dtype=torch.bool))
    zero.backward()
    assert zero.item() == 0.0 and a.grad is not None
