"""Loss terms, one ``nn.Module`` each, with the equation in the docstring.

All vectors passed in are already L2-normalised unless stated otherwise; ``.`` is the dot
product. Each module returns a scalar (mean over its terms).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def triplet_margins(q: torch.Tensor, p: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """``Delta_i = q_i . p_i - q_i . n_i`` for each row."""
    return (q * p).sum(-1) - (q * n).sum(-1)


class HingeTripletLoss(nn.Module):
    """Self-limiting triplet loss (DIVE, on head 1)::

        L_trip = (1/B) sum_i max(0, m - Delta_i),   Delta_i = q_i . p_i - q_i . n_i

    A triplet with ``Delta_i >= m`` contributes exactly zero loss and zero gradient
    ("inactive"); ``active(q, p, n)`` gives the indicator ``Delta_i < m`` used for rho(t).
    """

    def __init__(self, margin: float = 0.7):
        super().__init__()
        self.margin = margin

    def active(self, q, p, n) -> torch.Tensor:
        return triplet_margins(q, p, n) < self.margin

    def forward(self, q, p, n) -> torch.Tensor:
        return F.relu(self.margin - triplet_margins(q, p, n)).mean()


class SoftplusTripletLoss(HingeTripletLoss):
    """Always-active ablation ("w/o self-limiting")::

        L = (1/B) sum_i softplus(m - Delta_i) = (1/B) sum_i log(1 + exp(m - Delta_i))

    Same margin as the hinge; satisfied triplets keep a non-zero gradient.
    """

    def forward(self, q, p, n) -> torch.Tensor:
        return F.softplus(self.margin - triplet_margins(q, p, n)).mean()


class MultiPositiveNTXent(nn.Module):
    """Head-wise multi-positive NT-Xent over one set of B samples with H heads each.

    With ``s(ih, jg) = z_i^[h] . z_j^[g]`` and ``A(i,h) = {(j,g) != (i,h)}``::

        l(i,h) = -(1/(H-1)) sum_{h' != h} log( exp(s(ih,ih')/tau) / sum_{(j,g) in A(i,h)} exp(s(ih,jg)/tau) )
        L_con  = (1/(B H)) sum_i sum_h l(i,h)

    Input: heads of shape (B, H, k), each row L2-normalised. Needs H >= 2.
    """

    def __init__(self, tau: float = 0.1):
        super().__init__()
        self.tau = tau

    def forward(self, heads: torch.Tensor) -> torch.Tensor:
        b, h, _ = heads.shape
        if h < 2:
            raise ValueError("NT-Xent over heads needs at least 2 heads")
        flat = heads.reshape(b * h, -1)
        sim = flat @ flat.T / self.tau
        eye = torch.eye(b * h, dtype=torch.bool, device=heads.device)
        log_prob = torch.log_softmax(sim.masked_fill(eye, float("-inf")), dim=1)
        sample = torch.arange(b, device=heads.device).repeat_interleave(h)
        positive = (sample[:, None] == sample[None, :]) & ~eye
        per_anchor = -(log_prob.masked_fill(~positive, 0.0).sum(1)) / (h - 1)
        return per_anchor.mean()


class GeometryDistillationLoss(nn.Module):
    """Match the student's off-diagonal Gram matrix to the frozen teacher's::

        L_geo = (1/|Omega|) sum_{(i,j) in Omega} SmoothL1((S S^T)_ij, (T T^T)_ij),  Omega = {i != j}

    ``S`` (n, k): normalised student vectors (DIVE head 1 of [Q; P; N]); ``T`` (n, d): the
    normalised frozen embeddings of the same items. SmoothL1 with beta = 1:
    ``0.5 x^2`` if ``|x| < 1`` else ``|x| - 0.5``.
    """

    def __init__(self, beta: float = 1.0):
        super().__init__()
        self.beta = beta

    def forward(self, student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
        n = student.shape[0]
        if n < 2:
            return student.sum() * 0.0
        off = ~torch.eye(n, dtype=torch.bool, device=student.device)
        gs, gt = student @ student.T, teacher @ teacher.T
        return F.smooth_l1_loss(gs[off], gt[off], beta=self.beta)
