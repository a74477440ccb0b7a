"""DIVE's loss terms against hand-computed examples."""

import math

import pytest
import torch

from dive_core.losses import (
    GeometryDistillationLoss,
    HingeTripletLoss,
    MultiPositiveNTXent,
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
    """Literal transcription of SPEC's l(i,h) with Python loops."""
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
