"""The residual MLP adapter shared by every supervised method, and DIVE's head slicing."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .methods.specs import check_heads  # torch-free: the planner checks k*H <= d too


class ResidualMLP(nn.Module):
    """``f(z) = z + W2 relu(W1 z + b1) + b2`` with ``W1: d -> r``, ``W2: r -> d``.

    ``W2`` and ``b2`` start at zero, so ``f`` is exactly the identity at initialisation.
    ``W1``/``b1`` keep PyTorch's default Linear initialisation (drawn from the global RNG,
    so seed it first).
    """

    def __init__(self, dim: int, hidden: int = 2048):
        super().__init__()
        self.dim, self.hidden = dim, hidden
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)
        nn.init.zeros_(self.down.weight)
        nn.init.zeros_(self.down.bias)

    def forward(self, z: torch.Tensor, width: int | None = None) -> torch.Tensor:
        """``f(z)``, or only its first ``width`` coordinates ``f(z)[:, :width]``: a loss that
        reads no further (DIVE's heads) skips the rest of the down-projection, forward and
        backward. The output is the same; the skipped rows of ``W2``/``b2`` get no gradient,
        exactly as when their outputs are computed and unused."""
        hidden = F.relu(self.up(z))
        if width is None or width >= self.dim:
            return z + self.down(hidden)
        return z[..., :width] + F.linear(hidden, self.down.weight[:width], self.down.bias[:width])

    def layers(self, index=None):
        """``f(z)[:, index]`` (all of it for None) as plain layers (:func:`dive_core.layers.residual`)."""
        from .layers import residual

        return residual(self.up, self.down, index)


def split_heads(z: torch.Tensor, k: int, heads: int) -> torch.Tensor:
    """Blocks ``z[:, (h-1)k : hk]`` for h = 1..H, each L2-normalised: shape (B, H, k)."""
    check_heads(z.shape[-1], k, heads)
    blocks = z[..., : k * heads].reshape(*z.shape[:-1], heads, k)
    return F.normalize(blocks, dim=-1)


def first_head(z: torch.Tensor, k: int) -> torch.Tensor:
    """The deployed representation: ``normalise(z[:, :k])``."""
    return F.normalize(z[..., :k], dim=-1)
