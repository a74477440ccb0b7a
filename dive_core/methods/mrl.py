"""Matryoshka-Adaptor (Yoon et al., EMNLP 2024), supervised form (docs/methods.md#matryoshka-adaptor).

    e = f(z) = z + W2 relu(W1 z + b1) + b2      (shared ResidualMLP; identity at init)
    M = {powers of two m with min_prefix <= m <= d} | {k, d}
    L = L_topk + alpha L_pair + beta L_rec + gamma_rank L_rank
      L_pair = mean_{i!=j, m in M} |cos(z_i, z_j) - cos(e_i[:m], e_j[:m])|     (MatryoshkaPairSimilarityLoss)
      L_topk = the same over j in NN_K(i), K = topk_neighbors, frozen space    (MatryoshkaTopKSimilarityLoss)
      L_rec  = mean_i |e_i - z_i|_1                                            (L1ReconstructionLoss)
      L_rank = mean_{triplets, m in M} (y_p - y_n) softplus(s_n[:m] - s_p[:m]) (MatryoshkaRankLoss)
    inference: normalise(e[:k])

Decisions (left open by the paper; docs/decisions.md):
- "The batch's embeddings" for L_pair, L_topk and L_rec are the *distinct* items referenced by
  the batch's triplets: each query row and each document row once (a document that is a
  positive in one triplet and a negative in another, or a query with several triplets, counts
  once). Repeats would add zero-loss self-pairs and, worse, fill nearest-neighbour slots of
  L_topk with copies of the item itself. The adapter runs once per distinct item; L_rank
  gathers the triplets' vectors from those outputs. The distinct items are padded to a fixed
  3B rows (B query rows, 2B document rows; padding has weight 0 in every term), so no shape of the
  step depends on the batch and a CUDA graph can record it (``distinct_items``).
- Nearest neighbours: K = min(topk_neighbors, n - 1) among the n distinct items, excluding i.
- Prefixes below min_prefix are only k (and d); M is sorted ascending; every prefix has equal
  weight.
- ``schedule`` (default ``two_stage``, the publication's): "the Matryoshka-Adaptor is trained
  in an unsupervised way, subsequent tuning is conducted in a supervised way". Stage 1 trains
  L_topk + alpha L_pair + beta L_rec on batches of corpus documents for ceil(E/2) of the E
  epochs (phase ``unsupervised``); stage 2 adds gamma L_rank and trains on the triplets for the
  rest (phase ``supervised``); one epoch budget, as SMEC splits its own. ``joint`` (all four
  terms from the start) was the implementation before the audit.
- ``l1_reduction`` (default ``mean``): The method's definition writes L_rec = mean |e - z|_1. Summed over the d
  coordinates (``sum``) with the published beta = 1, the L1 pull outweighs every other term
  and the adapter stays the identity: validation nDCG@10 and R@10 are exactly truncation's
  (0.4467 / 0.5724). That cannot be what the authors meant (they report large gains over the
  frozen prefix), while ``mean`` (per-coordinate, ``torch.nn.L1Loss`` / Keras MAE) makes L_rec a
  mean like every other term of the objective (pairs, neighbours, triplets). It is a reading
  of an ambiguous equation fixed once, not a tuned value: nothing else was tried.

Audit (docs/decisions.md; ``config/audit.yaml``, table ``results/tables/audit_mrl.md``;
SciFact, MiniLM, 64d, seed 2027, validation nDCG@10 / R@10 / unseen nDCG@10, 101 unseen of 221)::

    truncate                          0.4467 / 0.5724 / 0.4778
    joint (before the audit)          0.7337 / 0.7937 / 0.5129
    two_stage (published)             0.7436 / 0.8390 / 0.5354   <- configuration kept
    joint without L_rank              0.5001 / 0.6373 / 0.5266
    joint, |.|_1 summed               0.4467 / 0.5724 / 0.4778   (= truncate)

Logged per epoch (weighted): ``topk``, ``pair`` (alpha L_pair), ``reconstruction`` (beta L_rec),
``rank`` (gamma_rank L_rank; 0 in the unsupervised stage); ``phase`` names the stage.

Speed: the prefix cosine matrices of L_pair and L_topk come from cumulative block Gram matrices
(all prefixes for the price of one Gram, computed once for both terms), L_rank's prefix cosines
from cumulative sums over coordinates.
"""

from __future__ import annotations

import torch
from torch import nn

from ..adapters import ResidualMLP
from ..losses import (L1ReconstructionLoss, MatryoshkaPairSimilarityLoss, MatryoshkaRankLoss,
                      MatryoshkaTopKSimilarityLoss, prefix_similarity_deviation)
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


def distinct_rows(rows: torch.Tensor):
    """``torch.unique(rows, return_inverse=True)`` with a fixed output size: ``(uniq, inverse,
    weight)``, each of ``rows``' length n. ``uniq[:u]`` are the u distinct values in ascending order
    and ``uniq[u:]`` repeat the largest (padding); ``weight`` is 1 on the first u slots, 0 on the
    padding; ``uniq[inverse] == rows``. Sort-based, no shape depends on the values (a CUDA graph can
    record it)."""
    n = rows.shape[0]
    s, order = torch.sort(rows, stable=True)
    first = torch.ones_like(s, dtype=torch.bool)
    first[1:] = s[1:] != s[:-1]
    slot = first.cumsum(0) - 1  # each sorted value's distinct slot
    where = torch.searchsorted(slot, torch.arange(n, device=rows.device)).clamp_max(n - 1)
    inverse = torch.empty_like(slot)
    inverse[order] = slot  # a permutation: index_put_, deterministic on every device
    weight = (torch.arange(n, device=rows.device) <= slot[-1]).to(torch.float32)
    return s[where], inverse, weight


def distinct_items(data, idx: torch.Tensor):
    """Frozen embeddings of the distinct queries and documents used by triplets ``idx`` (b of
    them), padded to a fixed number of rows.

    Returns ``(z, weight, iq, ip, in_)``: ``z`` (3b, d) stacks b query rows (the distinct queries,
    ascending, then padding) and 2b document rows (the distinct documents, then padding); ``weight``
    (3b,) is 1 on the distinct items and 0 on the padding rows; ``z[iq]``, ``z[ip]``, ``z[in_]`` are
    the triplets' query, positive and negative. The same items as ``torch.unique`` gives, in the
    same order, at a size that does not depend on how many there are.
    """
    b = idx.shape[0]
    uq, q_inv, wq = distinct_rows(data.t_q[idx])
    ud, d_inv, wd = distinct_rows(torch.cat([data.t_p[idx], data.t_n[idx]]))
    z = torch.cat([data.queries[uq], data.docs[ud]])
    return z, torch.cat([wq, wd]), q_inv, b + d_inv[:b], b + d_inv[b:]


@register
class MatryoshkaAdaptor(TorchMethod):
    type = "mrl"
    cuda_graph = True  # both stages: fixed shapes, no host synchronisation (distinct_items)

    def build(self) -> None:
        min_prefix, topk = int(self.hp["min_prefix"]), int(self.hp["topk_neighbors"])
        self.prefixes = matryoshka_prefixes(self.d, self.k, min_prefix)
        self.net = nn.ModuleDict({"adapter": ResidualMLP(self.d, int(self.hp["hidden"]))}).to(self.device)
        self.topk_loss = MatryoshkaTopKSimilarityLoss(self.prefixes, topk)
        self.pair_loss = MatryoshkaPairSimilarityLoss(self.prefixes)
        self.rec_loss = L1ReconstructionLoss(self.hp["l1_reduction"])
        self.rank_loss = MatryoshkaRankLoss(self.prefixes)
        self.schedule = self.hp["schedule"]

    def fit(self, data, log, progress: bool = True) -> None:
        epochs = int(self.hp["epochs"])
        if self.schedule == "two_stage":  # unsupervised on the corpus, then supervised
            first = (epochs + 1) // 2
            self.train_phase(data, log, first, self.hp["lr"], self.unsupervised_loss, self.net.parameters(),
                             phase="unsupervised", progress=progress, n_items=int(data.docs.shape[0]),
                             cuda_graph=self.graph_capturable())
            epochs -= first
        self.train_phase(data, log, epochs, self.hp["lr"], self.batch_loss, self.net.parameters(),
                         phase="supervised" if self.schedule == "two_stage" else "train", progress=progress)

    def _geometry(self, e, z, weight=None) -> dict[str, torch.Tensor]:
        """Weighted L_topk, alpha L_pair, beta L_rec of adapted ``e`` against frozen ``z``; rows of
        ``weight`` 0 are padding, left out of every term."""
        alpha, beta = float(self.hp["alpha"]), float(self.hp["beta"])
        dev = prefix_similarity_deviation(e, z, self.prefixes)  # shared by L_topk and L_pair
        topk = self.topk_loss(e, z, dev, weight)
        zero = topk.new_zeros(())
        return {"topk": topk, "pair": alpha * self.pair_loss(e, z, dev, weight) if alpha else zero,
                "reconstruction": beta * self.rec_loss(e, z, weight) if beta else zero}

    def unsupervised_loss(self, data, idx):
        """Two-stage schedule, first stage: the geometry terms on a batch of corpus documents."""
        z = data.docs[idx]
        terms = self._geometry(self.net["adapter"](z), z)
        return {"loss": sum(terms.values()), **{k: v.detach() for k, v in terms.items()},
                "rank": terms["topk"].new_zeros(())}

    def batch_loss(self, data, idx):
        gam = float(self.hp["gamma_rank"])
        z, weight, iq, ip, in_ = distinct_items(data, idx)
        e = self.net["adapter"](z)
        terms = self._geometry(e, z, weight)
        terms["rank"] = gam * self.rank_loss(e[iq], e[ip], e[in_], data.y_p[idx], data.y_n[idx]) \
            if gam else terms["topk"].new_zeros(())
        return {"loss": sum(terms.values()), **{k: v.detach() for k, v in terms.items()}}

    def transform(self, x):
        return self.net["adapter"](x)[:, : self.k]

    def layers(self, side="document"):
        return [self.net["adapter"].layers(slice(0, self.k))]
