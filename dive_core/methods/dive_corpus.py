"""DIVE that also reads the corpus (the documents a fit may see): for compressors that must keep
their quality on documents that arrive after training (the arrival study). Two additions to DIVE,
each off at its neutral value, so that ``init: identity, corpus_docs: 0, gamma_corpus: 0`` trains
exactly DIVE (same weights, tested):

* ``init: pca`` - DIVE in the principal frame of the corpus. The adapter reads
  ``u = (z - mu) R`` instead of ``z``, where ``mu`` is the corpus mean and ``R`` (d x d, orthogonal)
  the covariance's eigenvectors in descending order (signs fixed as in :mod:`.pca`). DIVE's
  identity initialisation then starts at PCA (head 1 = the top-k principal coordinates: the
  label-free compressor that needs no label on any document) instead of at truncation, and the
  supervised stage moves away from it only as far as the triplets pull::

      zt = f(u) = u + W2 relu(W1 u + b1) + b2,   u = (z - mu) R,   inference: normalise(zt[:k])

* ``corpus_docs`` / ``gamma_corpus`` - geometry distillation over a stream of corpus documents:
  at every step ``corpus_docs`` documents drawn uniformly (a generator seeded by the run's seed)
  add ``gamma_corpus * L_geo(head 1 of f(u_c), z_c)``, DIVE's Gram loss on documents beyond the
  batch's triplet documents, so the compressed geometry is held on the corpus distribution and
  not only around the labelled pairs::

      L = L_DIVE + gamma_corpus * L_geo(S_c, T_c)      (logged as ``corpus_geo``)

Every corpus statistic is computed from ``data.docs``, which under the arrival protocol holds the
known documents only.
"""

import torch
from torch import nn

from ..losses import GeometryDistillationLoss
from .base import register
from .dive import DIVE
from .pca import principal_axes

CORPUS_STREAM_OFFSET = 7919  # the corpus stream's generator: seed + this (the batch order uses seed)


class Frame(nn.Module):
    """``u = (z - mean) @ rotation``: the identity until :meth:`fit_pca` sets the principal frame."""

    def __init__(self, d: int):
        super().__init__()
        self.register_buffer("mean", torch.zeros(d))  # cpu: the module moves to the device
        self.register_buffer("rotation", torch.eye(d))  # cpu: the module moves to the device
        self.identity = True

    def fit_pca(self, docs: torch.Tensor) -> None:
        mean, _, comps = principal_axes(docs)
        self.mean.copy_(mean.float())
        self.rotation.copy_(comps.float())
        self.identity = False

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return z if self.identity else (z - self.mean) @ self.rotation

    def _load_from_state_dict(self, state, prefix, *args, **kwargs):
        super()._load_from_state_dict(state, prefix, *args, **kwargs)
        self.identity = bool(torch.equal(self.mean, torch.zeros_like(self.mean))
                             and torch.equal(self.rotation, torch.eye(len(self.mean), device=self.mean.device)))


@register
class DIVECorpus(DIVE):
    type = "dive_corpus"

    def build(self) -> None:
        super().build()
        self.net["frame"] = Frame(self.d).to(self.device)
        self.corpus_geo = GeometryDistillationLoss()
        self._stream = None

    def fit(self, data, log, progress: bool = True) -> None:
        if self.hp["init"] == "pca":
            self.net["frame"].fit_pca(data.docs)
        self._stream = torch.Generator().manual_seed(int(self.seed) + CORPUS_STREAM_OFFSET)
        self.train_phase(data, log, self.hp["epochs"], self.hp["lr"], self.batch_loss,
                         self.net["adapter"].parameters(), progress=progress)

    def graph_capturable(self) -> bool:
        """The corpus stream draws its rows from a CPU generator at every step: not capturable."""
        return not (int(self.hp["corpus_docs"]) and float(self.hp["gamma_corpus"]))

    def adapted(self, z: torch.Tensor, width: int | None = None) -> torch.Tensor:
        return self.net["adapter"](self.net["frame"](z), width=width)

    def batch_loss(self, data, idx):
        out = self._dive_terms(data, idx)
        n, gam = int(self.hp["corpus_docs"]), float(self.hp["gamma_corpus"])
        if n and gam:
            # cpu: one stream on every device
            rows = torch.randint(int(data.docs.shape[0]), (n,), generator=self._stream).to(data.device)
            zc = data.docs[rows]
            sc = torch.nn.functional.normalize(self.adapted(zc, width=self.k), dim=-1)
            geo = gam * self.corpus_geo(sc, zc)
            out["loss"] = out["loss"] + geo
            out["corpus_geo"] = geo.detach()
        else:
            out["corpus_geo"] = out["loss"].new_zeros(())
        return out

    def transform(self, x):
        return self.adapted(x, width=self.k)  # head 1 alone

    def layers(self, side="document"):
        from ..layers import Affine, detached

        frame = self.net["frame"]  # u = (z - mean) R = R' z - mean R, before the adapter
        rotate = Affine(detached(frame.rotation.T), detached(-(frame.mean @ frame.rotation)))
        return [*([] if frame.identity else [rotate]), *super().layers(side)]
