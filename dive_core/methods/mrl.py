"""Matryoshka-Adaptor (Yoon et al., EMNLP 2024), supervised form (SPEC section 3).

    e = f(z) = z + W2 relu(W1 z + b1) + b2      (shared ResidualMLP; identity at init)
    M = {powers of two m with min_prefix <= m <= d} | {k, d}
    L = L_topk + alpha L_pair + beta L_rec + gamma_rank L_rank
      L_pair = mean_{i!=j, m in M} |cos(z_i, z_j) - cos(e_i[:m], e_j[:m])|     (MatryoshkaPairSimilarityLoss)
      L_topk = the same over j in NN_K(i), K = topk_neighbors, frozen space    (MatryoshkaTopKSimilarityLoss)
      L_rec  = mean_i |e_i - z_i|_1                                            (L1ReconstructionLoss)
      L_rank = mean_{triplets, m in M} (y_p - y_n) softplus(s_n[:m] - s_p[:m]) (MatryoshkaRankLoss)
    inference: normalise(e[:k])

Decisions (SPEC open):
- "The batch's embeddings" for L_pair, L_topk and L_rec are the *distinct* items referenced by
  the batch's triplets: each query row and each document row once (a document that is a
  positive in one triplet and a negative in another, or a query with several triplets, counts
  once). Repeats would add zero-loss self-pairs and, worse, fill nearest-neighbour slots of
  L_topk with copies of the item itself. The adapter runs once per distinct item; L_rank
  gathers the triplets' vectors from those outputs.
- Nearest neighbours: K = min(topk_neighbors, n - 1) among the n distinct items, excluding i.
- Prefixes below min_prefix are only k (and d); M is sorted ascending; every prefix has equal
  weight.
- ``l1_reduction``: SPEC writes L_rec = mean |e - z|_1. Summed over the d coordinates
  (``sum``) with beta = 1, its pull back to the identity outweighs every other term and the
  adapter does not move: on SciFact validation (MiniLM, 64d, seed 2027, select stage) MRL then
  scores nDCG@10 0.4467, exactly truncation's 0.4467; averaged over coordinates (``mean``,
  i.e. torch.nn.L1Loss, = sum / d) it scores 0.7327 (0.7307 in the workflow's
  results/tables/selection.md, which trains with 2 threads instead of 1). The config uses
  ``mean`` for MRL, a choice made on validation queries only.

Logged per epoch (weighted): ``topk``, ``pair`` (alpha L_pair), ``reconstruction`` (beta L_rec),
``rank`` (gamma_rank L_rank).
"""

from __future__ import annotations

import torch
from torch import nn

from ..adapters import ResidualMLP
from ..losses import (L1ReconstructionLoss, MatryoshkaPairSimilarityLoss, MatryoshkaRankLoss,
                      MatryoshkaTopKSimilarityLoss, prefix_similarity_deviation)
from ._hp_checks import as_choice, as_float, as_int, check_shared
from .base import TorchMethod, register


def matryoshka_prefixes(d: int, k: int, min_prefix: int) -> list[int]:
    """Sorted prefix sizes: powers of two in [min_prefix, d], plus k and d."""
    out = {int(k), int(d)}
    m = 1
    while m <= d:
        if m >= min_prefix:
            out.add(m)
        m *= 2
    return sorted(out)


def distinct_items(data, idx: torch.Tensor):
    """Frozen embeddings of the distinct queries and documents used by triplets ``idx``.

    Returns ``(z, iq, ip, in_)``: ``z`` stacks the distinct query rows then the distinct document
    rows; ``z[iq]``, ``z[ip]``, ``z[in_]`` are the triplets' query, positive and negative.
    """
    b = idx.shape[0]
    uq, q_inv = torch.unique(data.t_q[idx], return_inverse=True)
    ud, d_inv = torch.unique(torch.cat([data.t_p[idx], data.t_n[idx]]), return_inverse=True)
    z = torch.cat([data.queries[uq], data.docs[ud]])
    nq = uq.shape[0]
    return z, q_inv, nq + d_inv[:b], nq + d_inv[b:]


@register
class MatryoshkaAdaptor(TorchMethod):
    type = "mrl"
    hyperparameters = ("alpha", "beta", "gamma_rank", "min_prefix", "topk_neighbors", "l1_reduction",
                       "schedule", "lr", "epochs", "batch_size", "hidden", "weight_decay")

    @classmethod
    def legacy_hparams(cls, hp):
        return {"schedule": "joint"}  # checkpoints before the audit trained jointly

    def build(self) -> None:
        check_shared(self.type, self.hp)
        for key in ("alpha", "beta", "gamma_rank"):
            as_float(self.type, self.hp, key)
        min_prefix = as_int(self.type, self.hp, "min_prefix")
        topk = as_int(self.type, self.hp, "topk_neighbors")
        self.prefixes = matryoshka_prefixes(self.d, self.k, min_prefix)
        self.net = nn.ModuleDict({"adapter": ResidualMLP(self.d, int(self.hp["hidden"]))}).to(self.device)
        self.topk_loss = MatryoshkaTopKSimilarityLoss(self.prefixes, topk)
        self.pair_loss = MatryoshkaPairSimilarityLoss(self.prefixes)
        as_choice(self.type, self.hp, "l1_reduction", ("sum", "mean"))
        self.rec_loss = L1ReconstructionLoss(self.hp["l1_reduction"])
        self.rank_loss = MatryoshkaRankLoss(self.prefixes)
        self.schedule = as_choice(self.type, self.hp, "schedule", ("joint", "two_stage"))
        if self.schedule == "two_stage" and as_int(self.type, self.hp, "epochs") < 2:
            raise ValueError("method 'mrl': schedule 'two_stage' needs epochs >= 2")

    def fit(self, data, log, progress: bool = True) -> None:
        epochs = int(self.hp["epochs"])
        if self.schedule == "two_stage":  # unsupervised on the corpus, then supervised
            first = (epochs + 1) // 2
            self.train_phase(data, log, first, self.hp["lr"], self.unsupervised_loss, self.net.parameters(),
                             phase="unsupervised", progress=progress, n_items=int(data.docs.shape[0]))
            epochs -= first
        self.train_phase(data, log, epochs, self.hp["lr"], self.batch_loss, self.net.parameters(),
                         phase="supervised" if self.schedule == "two_stage" else "train", progress=progress)

    def _geometry(self, e, z) -> dict[str, torch.Tensor]:
        """Weighted L_topk, alpha L_pair, beta L_rec of adapted ``e`` against frozen ``z``."""
        alpha, beta = float(self.hp["alpha"]), float(self.hp["beta"])
        dev = prefix_similarity_deviation(e, z, self.prefixes)  # shared by L_topk and L_pair
        topk = self.topk_loss(e, z, dev)
        zero = topk.new_zeros(())
        return {"topk": topk, "pair": alpha * self.pair_loss(e, z, dev) if alpha else zero,
                "reconstruction": beta * self.rec_loss(e, z) if beta else zero}

    def unsupervised_loss(self, data, idx):
        """Two-stage schedule, first stage: the geometry terms on a batch of corpus documents."""
        z = data.docs[idx]
        terms = self._geometry(self.net["adapter"](z), z)
        return {"loss": sum(terms.values()), **{k: v.detach() for k, v in terms.items()},
                "rank": terms["topk"].new_zeros(())}

    def batch_loss(self, data, idx):
        gam = float(self.hp["gamma_rank"])
        z, iq, ip, in_ = distinct_items(data, idx)
        e = self.net["adapter"](z)
        terms = self._geometry(e, z)
        terms["rank"] = gam * self.rank_loss(e[iq], e[ip], e[in_], data.y_p[idx], data.y_n[idx]) \
            if gam else terms["topk"].new_zeros(())
        return {"loss": sum(terms.values()), **{k: v.detach() for k, v in terms.items()}}

    def transform(self, x):
        return self.net["adapter"](x)[:, : self.k]
