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
