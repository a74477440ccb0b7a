"""DIVE: identity-initialised residual adapter, self-limiting hinge on head 1, head-wise
multi-positive NT-Xent over H coordinate blocks, Gram geometry distillation (docs/methods.md#dive).

    zt = f(z) = z + W2 relu(W1 z + b1) + b2          (W2, b2 = 0 at init)
    heads z^[h] = normalise(zt[(h-1)k : hk]),  h = 1..H   (requires k*H <= d)
    L = L_trip + lambda * L_view + gamma * L_geo
      L_trip = mean_i max(0, m - (q1.p1 - q1.n1))             (softplus in the ablation)
      L_view = (L_con(Q) + L_con(P) + L_con(N)) / 3            (MultiPositiveNTXent)
      L_geo  = mean_{i!=j} SmoothL1((S S^T)_ij, (T T^T)_ij)    S = head 1 of [Q;P;N], T = frozen
    inference: normalise(zt[:k]) (head 1 only)

Logged per epoch: ``triplet``, ``view`` (= lambda * L_view), ``geo`` (= gamma * L_geo), the
total, and ``rho`` = fraction of the epoch's triplets with Delta < m (measured in the forward
pass that trains on them).
"""

import torch
from torch import nn

from ..adapters import ResidualMLP, split_heads
from ..losses import GeometryDistillationLoss, HingeTripletLoss, MultiPositiveNTXent, SoftplusTripletLoss
from .base import TorchMethod, register


@register
class DIVE(TorchMethod):
    type = "dive"
    cuda_graph = True  # batch_loss: fixed shapes, no host synchronisation
    stackable = True  # seeds may train together (TorchMethod.fit_together)
    def build(self) -> None:
        self.net = nn.ModuleDict({"adapter": ResidualMLP(self.d, int(self.hp["hidden"]))}).to(self.device)
        loss_cls = HingeTripletLoss if self.hp["triplet_loss"] == "hinge" else SoftplusTripletLoss
        self.triplet_loss = loss_cls(float(self.hp["margin"]))
        self.view_loss = MultiPositiveNTXent(float(self.hp["tau"]))
        self.geo_loss = GeometryDistillationLoss()

    def adapted(self, z: torch.Tensor, width: int | None = None) -> torch.Tensor:
        """``f(z)`` (or its first ``width`` coordinates): the adapter on normalised frozen vectors."""
        return self.net["adapter"](z, width=width)

    def batch_loss(self, data, idx):
        return self._dive_terms(data, idx)

    def _dive_terms(self, data, idx):
        q, p, n, _, _ = data.triplet_batch(idx)
        H, k = int(self.hp["heads"]), self.k
        lam, gam = float(self.hp["lambda_view"]), float(self.hp["gamma_geo"])
        x = torch.cat([q, p, n])
        # one adapter pass over [Q; P; N], computing only the k*H coordinates the heads read
        heads = split_heads(self.adapted(x, width=k * H), k, H)  # (3B, H, k)
        first = heads[:, 0]
        q1, p1, n1 = first.chunk(3)
        trip = self.triplet_loss(q1, p1, n1)
        zero = trip.new_zeros(())
        # the three sets' NT-Xent in one batched pass: (3, B, H, k) -> mean of the three losses
        view = self.view_loss(heads.reshape(3, -1, H, k)) if lam and H > 1 else zero
        geo = self.geo_loss(first, x) if gam else zero
        with torch.no_grad():
            rho = self.triplet_loss.active(q1, p1, n1).float().mean()
        return {"loss": trip + lam * view + gam * geo, "triplet": trip.detach(),
                "view": (lam * view).detach(), "geo": (gam * geo).detach(), "rho": rho}

    def transform(self, x):
        return self.adapted(x, width=self.k)  # head 1 alone (compress() normalises it)

    def layers(self, side="document"):
        return [self.net["adapter"].layers(slice(0, self.k))]
