"""A compressor's map as plain layers: affine maps, one-hidden-layer ReLU networks and L2
normalisations, what sentence-transformers' own ``Dense`` and ``Normalize`` modules compute
(:mod:`dive_core.export` turns them into those modules, so an export holds no code of ours).

Every method states its map (:meth:`dive_core.methods.base.Method.layers`) as a list of steps:

* :class:`Affine`: ``y = W x + b``, one ``Dense`` with the identity activation;
* :class:`ReluNet`: ``y = S x + s + V relu(U x + a) + c`` (the skip ``S x + s`` optional), two
  ``Dense``: the first maps x to ``[S x + s; -(S x + s); U x + a]`` with ReLU, the second applies
  ``[I, -I, V]`` and ``c`` with the identity (``relu(t) - relu(-t) = t`` exactly);
* :data:`NORMALIZE`: ``y = x / max(|x|, 1e-12)``, ``Normalize`` (F.normalize's epsilon).

The residual adapter truncated to k is a :class:`ReluNet` whose skip is the first k rows of the
identity; two maps of one input add (:func:`add`: the skips sum, the hidden layers stack).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, Union

import torch

NORMALIZE = "normalize"


@dataclass(frozen=True)
class Affine:
    """``y = weight x + bias``: weight (out, in), bias (out,) or None (zero)."""

    weight: torch.Tensor
    bias: torch.Tensor | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return int(self.weight.shape[0]), int(self.weight.shape[1])

    def full_bias(self) -> torch.Tensor:
        return self.bias if self.bias is not None else self.weight.new_zeros(self.weight.shape[0])

    def rows(self, index) -> "Affine":
        return Affine(self.weight[index], None if self.bias is None else self.bias[index])


@dataclass(frozen=True)
class ReluNet:
    """``y = skip(x) + down(relu(up(x)))``; ``skip`` an :class:`Affine` or None."""

    up: Affine
    down: Affine
    skip: Affine | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return self.down.shape[0], self.up.shape[1]

    def rows(self, index) -> "ReluNet":
        return ReluNet(self.up, self.down.rows(index), None if self.skip is None else self.skip.rows(index))


Step = Union[Affine, ReluNet, str]


def detached(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu", torch.float32).contiguous()


def linear(module: torch.nn.Linear) -> Affine:
    """An ``nn.Linear`` as an :class:`Affine`."""
    return Affine(detached(module.weight), None if module.bias is None else detached(module.bias))


def identity_rows(d: int, index=None) -> Affine:
    """The rows ``index`` (all for None) of the d x d identity: a truncation or a selection."""
    eye = torch.eye(d)
    return Affine(eye if index is None else eye[index].contiguous())


def residual(up: torch.nn.Linear, down: torch.nn.Linear, index=None) -> ReluNet:
    """``(x + W2 relu(W1 x + b1) + b2)[index]``: the residual adapter (all rows for None)."""
    net = ReluNet(linear(up), linear(down), identity_rows(int(up.in_features)))
    return net if index is None else net.rows(index)


def add(a: Affine | ReluNet, b: Affine | ReluNet) -> Affine | ReluNet:
    """The map ``x -> a(x) + b(x)`` (both on the same input, to the same output size)."""
    if a.shape != b.shape:
        raise ValueError(f"layers: cannot add maps of shapes {a.shape} and {b.shape} (out, in)")
    skips = [m for m in (a, b) if isinstance(m, Affine)] + [m.skip for m in (a, b)
                                                             if isinstance(m, ReluNet) and m.skip is not None]
    skip = None
    if skips:
        skip = Affine(sum(s.weight for s in skips), sum(s.full_bias() for s in skips))
    nets = [m for m in (a, b) if isinstance(m, ReluNet)]
    if not nets:
        return skip
    up = Affine(torch.cat([n.up.weight for n in nets]), torch.cat([n.up.full_bias() for n in nets]))
    down = Affine(torch.cat([n.down.weight for n in nets], dim=1), sum(n.down.full_bias() for n in nets))
    return ReluNet(up, down, skip)


def dense_parts(step: Affine | ReluNet) -> list[tuple[torch.Tensor, torch.Tensor, bool]]:
    """``(weight, bias, relu)`` of the ``Dense`` layers that compute ``step``."""
    if isinstance(step, Affine):
        return [(step.weight, step.full_bias(), False)]
    up_w, up_b = step.up.weight, step.up.full_bias()
    down_w, down_b = step.down.weight, step.down.full_bias()
    if step.skip is None:
        return [(up_w, up_b, True), (down_w, down_b, False)]
    s_w, s_b = step.skip.weight, step.skip.full_bias()
    k = s_w.shape[0]
    eye = torch.eye(k)
    return [(torch.cat([s_w, -s_w, up_w]), torch.cat([s_b, -s_b, up_b]), True),
            (torch.cat([eye, -eye, down_w], dim=1), down_b, False)]


def apply(steps: Sequence[Step], x: torch.Tensor) -> torch.Tensor:
    """The steps applied to rows ``x`` with plain torch (what the sentence-transformers modules compute)."""
    for step in steps:
        if step == NORMALIZE:
            x = torch.nn.functional.normalize(x, dim=-1)
            continue
        for w, b, relu in dense_parts(step):
            x = torch.nn.functional.linear(x, w, b)
            x = torch.relu(x) if relu else x
    return x
