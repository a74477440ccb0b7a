"""Loss terms, one ``nn.Module`` each, with the equation in the docstring.

All vectors passed in are already L2-normalised unless stated otherwise; ``.`` is the dot
product. Each module returns a scalar (mean over its terms).
"""

from __future__ import annotations

import functools

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


class QuerySoftmaxLoss(nn.Module):
    """Listwise loss of a query side against fixed document codes (:mod:`dive_core.methods.query_side`)::

        L = (1/B) sum_i -log( exp(q_i . D_{p_i} / tau) / sum_j exp(q_i . D_j / tau) )

    ``q`` (B, k): normalised queries; ``docs`` (N, k): the normalised codes of every document the
    fit sees; ``positives`` (B,): the row in ``docs`` of each query's positive.
    """

    def __init__(self, tau: float = 0.05):
        super().__init__()
        self.tau = tau

    def forward(self, q: torch.Tensor, docs: torch.Tensor, positives: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(q @ docs.T / self.tau, positives)


class MultiPositiveNTXent(nn.Module):
    """Head-wise multi-positive NT-Xent over one set of B samples with H heads each.

    With ``s(ih, jg) = z_i^[h] . z_j^[g]`` and ``A(i,h) = {(j,g) != (i,h)}``::

        l(i,h) = -(1/(H-1)) sum_{h' != h} log( exp(s(ih,ih')/tau) / sum_{(j,g) in A(i,h)} exp(s(ih,jg)/tau) )
        L_con  = (1/(B H)) sum_i sum_h l(i,h)

    Input: heads of shape (B, H, k), each row L2-normalised; or (G, B, H, k), G independent sets
    of the same size, giving the mean of their G losses in one batched pass (DIVE's Q, P and N).
    Needs H >= 2.

    Computed as ``l(i,h) = LSE_{(j,g) in A(i,h)} s(ih,jg)/tau - (1/(H-1)) sum_{h'!=h} s(ih,ih')/tau``
    (the log-softmax written out): one (BH x BH) similarity matrix per set with the self-pair
    masked by an additive -inf (fused into the product), and the positive sum from the per-sample
    sum of heads, ``z^[h] . (sum_g z^[g] - z^[h])``; no (BH x BH) masks are built or applied.
    """

    def __init__(self, tau: float = 0.1):
        super().__init__()
        self.tau = tau

    def forward(self, heads: torch.Tensor) -> torch.Tensor:
        sets = heads if heads.dim() == 4 else heads.unsqueeze(0)
        g, b, h, k = sets.shape
        if h < 2:
            raise ValueError("NT-Xent over heads needs at least 2 heads")
        flat = sets.reshape(g, b * h, k)
        sim = torch.baddbmm(_self_mask(b * h, flat.dtype, flat.device), flat, flat.transpose(1, 2),
                            alpha=1.0 / self.tau)
        positives = (sets * (sets.sum(2, keepdim=True) - sets)).sum(-1).reshape(g, b * h)
        per_anchor = torch.logsumexp(sim, dim=-1) - positives / (self.tau * (h - 1))
        return per_anchor.mean()


@functools.lru_cache(maxsize=16)
def _self_mask(n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """(n, n) additive mask: -inf on the diagonal, 0 elsewhere (cached: one per size)."""
    return torch.zeros(n, n, dtype=dtype, device=device).fill_diagonal_(float("-inf"))


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
        gs = student @ student.T
        with torch.no_grad():
            gt = teacher @ teacher.T
        # the off-diagonal sum = the full sum minus the diagonal's (no boolean gather, whose
        # backward is a scatter): value and gradient equal those of the masked form
        total = F.smooth_l1_loss(gs, gt, beta=self.beta, reduction="sum")
        diagonal = F.smooth_l1_loss(gs.diagonal(), gt.diagonal(), beta=self.beta, reduction="sum")
        return (total - diagonal) / (n * (n - 1))


# ---- baseline losses: Matryoshka-Adaptor, Search-Adaptor, autoencoder ----
#
# Unlike the DIVE losses above, these take raw (un-normalised) adapter outputs where a cosine
# is involved and normalise internally: cos(a, b) = a.b / (|a| |b|).


def _cosine_matrix(x: torch.Tensor) -> torch.Tensor:
    """``C_ij = cos(x_i, x_j)`` for the rows of ``x``."""
    xn = F.normalize(x, dim=-1)
    return xn @ xn.T


def _cosine_rows(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``cos(a_i, b_i)`` for each row."""
    return (F.normalize(a, dim=-1) * F.normalize(b, dim=-1)).sum(-1)


class ReconstructionMSELoss(nn.Module):
    """Autoencoder reconstruction error, mean over items and coordinates::

        L_mse = (1/(n d)) sum_i sum_c (xhat_ic - x_ic)^2

    ``xhat`` = decoder(encoder(x)), ``x`` the (n, d) normalised frozen corpus embeddings.
    """

    def forward(self, reconstruction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(reconstruction, target)


def _l1(diff: torch.Tensor, reduction: str, weight: torch.Tensor | None = None) -> torch.Tensor:
    """Mean over items of |diff|_1 (``"sum"`` over coordinates) or of the per-coordinate mean
    absolute error (``"mean"``, what ``torch.nn.L1Loss()`` computes): the two differ by 1/d.
    ``weight`` (n,) of 0 / 1: the mean over the rows of weight 1 only (a batch padded to a fixed
    number of rows)."""
    if reduction not in ("sum", "mean"):
        raise ValueError(f"L1 reduction must be 'sum' or 'mean', not {reduction!r}")
    if weight is not None:
        per_row = diff.abs().sum(-1) if reduction == "sum" else diff.abs().mean(-1)
        return (per_row * weight).sum() / weight.sum()
    return diff.abs().sum(-1).mean() if reduction == "sum" else diff.abs().mean()


class L1ReconstructionLoss(nn.Module):
    """Stay close to the frozen embedding (Matryoshka-Adaptor L_rec, Search-Adaptor L_rec)::

        reduction "sum":  L_rec = (1/n) sum_i |e_i - z_i|_1 = (1/n) sum_i sum_c |e_ic - z_ic|
        reduction "mean": L_rec = (1/(n d)) sum_i sum_c |e_ic - z_ic|       (= "sum" / d)

    ``e`` = f(z) the adapted (un-normalised, full-width) vectors, ``z`` the frozen ones.
    """

    def __init__(self, reduction: str = "sum"):
        super().__init__()
        _l1(torch.zeros(1, 1), reduction)  # cpu: validates the reduction name only
        self.reduction = reduction

    def forward(self, adapted: torch.Tensor, frozen: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
        """``weight`` (n,) of 0 / 1: the mean over the rows of weight 1 (:func:`_l1`)."""
        return _l1(adapted - frozen, self.reduction, weight)


class QueryPredictionLoss(L1ReconstructionLoss):
    """Search-Adaptor's prediction regulariser over the batch's positive pairs (q_i, d_i)::

        reduction "sum":  L_pred = (1/B) sum_i |f(q_i) - p(f(d_i))|_1
        reduction "mean": L_pred = the same / d

    Inputs: ``target`` = f(q) (B, d) and ``prediction`` = p(f(d)) (B, d), where p is the
    training-only query predictor.
    """

    def forward(self, target: torch.Tensor, prediction: torch.Tensor) -> torch.Tensor:
        return _l1(target - prediction, self.reduction)


class PairwiseSoftplusRankLoss(nn.Module):
    """Graded pairwise rank loss (Search-Adaptor L_rank) on triplets (q_i, p_i, n_i)::

        L_rank = (1/B) sum_i (y_p,i - y_n,i) * softplus(s_n,i - s_p,i),
        s_p,i = cos(q_i, p_i),  s_n,i = cos(q_i, n_i),  softplus(x) = log(1 + exp(x))

    ``q``, ``p``, ``n`` need not be normalised (cosines are computed here).
    """

    def forward(self, q, p, n, y_p, y_n) -> torch.Tensor:
        return ((y_p - y_n) * F.softplus(_cosine_rows(q, n) - _cosine_rows(q, p))).mean()


@functools.lru_cache(maxsize=16)
def _prefix_columns(prefixes: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """The last column of each prefix, made once per device (not uploaded at every step: a CUDA
    graph cannot record an upload from host memory)."""
    return torch.as_tensor([m - 1 for m in prefixes], device=device)


def prefix_cosine_rows(a: torch.Tensor, b: torch.Tensor, prefixes) -> torch.Tensor:
    """``C[i, p] = cos(a_i[:m_p], b_i[:m_p])`` for every prefix size m_p: shape (n, P), from
    cumulative sums of ``a*b``, ``a*a`` and ``b*b`` over coordinates (all prefixes at the cost
    of one). Norms clamp at 1e-12 as ``F.normalize`` does."""
    cols = _prefix_columns(tuple(int(m) for m in prefixes), a.device)
    ab, aa, bb = ((x * y).cumsum(-1)[:, cols] for x, y in ((a, b), (a, a), (b, b)))
    return ab / (aa.clamp_min(1e-24).sqrt() * bb.clamp_min(1e-24).sqrt())


class MatryoshkaRankLoss(nn.Module):
    """The pairwise softplus rank loss averaged over the prefix sizes M (Matryoshka-Adaptor)::

        L_rank = (1/(B |M|)) sum_i sum_{m in M} (y_p,i - y_n,i) * softplus(s_n,i[:m] - s_p,i[:m]),
        s_p,i[:m] = cos(q_i[:m], p_i[:m]),  s_n,i[:m] = cos(q_i[:m], n_i[:m])
    """

    def __init__(self, prefixes):
        super().__init__()
        self.prefixes = tuple(int(m) for m in prefixes)
        if not self.prefixes:
            raise ValueError("MatryoshkaRankLoss needs at least one prefix size")

    def forward(self, q, p, n, y_p, y_n) -> torch.Tensor:
        s_p, s_n = prefix_cosine_rows(q, p, self.prefixes), prefix_cosine_rows(q, n, self.prefixes)
        return ((y_p - y_n)[:, None] * F.softplus(s_n - s_p)).mean()


def prefix_cosine_matrices(x: torch.Tensor, prefixes) -> torch.Tensor:
    """``C[p]_ij = cos(x_i[:m_p], x_j[:m_p])`` for ascending prefix sizes m_1 < ... < m_P.

    Shape (P, n, n). Prefix Grams are cumulative sums of block Grams,
    ``G_{m_p} = sum_{b <= p} X_b X_b^T`` with ``X_b = x[:, m_{b-1}:m_b]`` (m_0 = 0), so all P
    prefixes together cost one full Gram matrix. Norms clamp at 1e-12 as ``F.normalize`` does.
    """
    bounds = [0] + [int(m) for m in prefixes]
    if any(b <= a for a, b in zip(bounds[:-1], bounds[1:])) or bounds[-1] > x.shape[-1]:
        raise ValueError(f"prefix sizes must be ascending within 1..{x.shape[-1]}, got {list(prefixes)}")
    grams = torch.stack([x[:, a:b] @ x[:, a:b].T for a, b in zip(bounds[:-1], bounds[1:])]).cumsum(0)
    norms = grams.diagonal(dim1=1, dim2=2).clamp_min(1e-24).sqrt()
    return grams / (norms[:, :, None] * norms[:, None, :])


def prefix_similarity_deviation(e: torch.Tensor, z: torch.Tensor, prefixes):
    """``(D, C_z)``: ``D[p]_ij = |cos(e_i[:m_p], e_j[:m_p]) - cos(z_i, z_j)|`` (P, n, n) and the
    frozen cosines ``C_z`` (n, n, no gradient). L_pair and L_topk are means of D over two sets
    of pairs; computing D once serves both."""
    with torch.no_grad():
        cz = _cosine_matrix(z)
    return (prefix_cosine_matrices(e, prefixes) - cz).abs(), cz


class MatryoshkaPairSimilarityLoss(nn.Module):
    """Matryoshka-Adaptor L_pair: every prefix must keep the frozen pairwise cosines::

        L_pair = (1/(|Omega| |M|)) sum_{(i,j) in Omega} sum_{m in M} |cos(z_i, z_j) - cos(e_i[:m], e_j[:m])|,
        Omega = {(i, j): i != j}

    ``e`` (n, d): adapted vectors; ``z`` (n, d): frozen vectors of the same n items.
    ``deviation``: optionally ``prefix_similarity_deviation(e, z, prefixes)``, already computed.
    """

    def __init__(self, prefixes):
        super().__init__()
        self.prefixes = tuple(sorted({int(m) for m in prefixes}))
        if not self.prefixes:
            raise ValueError(f"{type(self).__name__} needs at least one prefix size")

    def pair_mask(self, cz: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
        """Boolean (n, n) mask of the pairs (i, j) in Omega, from the frozen cosines ``cz``;
        ``weight`` (n,) of 0 / 1: only items of weight 1 take part (padding rows do not)."""
        off = ~torch.eye(cz.shape[0], dtype=torch.bool, device=cz.device)
        if weight is None:
            return off
        item = weight > 0
        return off & item[:, None] & item[None, :]

    def forward(self, e: torch.Tensor, z: torch.Tensor, deviation=None, weight: torch.Tensor | None = None) -> torch.Tensor:
        """``weight`` (n,) of 0 / 1, optional: the items of weight 0 are padding, left out of Omega
        (a batch of a fixed number of rows; with fewer than 2 items of weight 1 the mean is 0/0)."""
        if z.shape[0] < 2:
            return e.sum() * 0.0
        dev, cz = deviation if deviation is not None else prefix_similarity_deviation(e, z, self.prefixes)
        w = self.pair_mask(cz, weight).to(dev.dtype)  # a weighted sum, not boolean indexing: cheaper backward
        return (dev * w).sum() / (w.sum() * dev.shape[0])


class MatryoshkaTopKSimilarityLoss(MatryoshkaPairSimilarityLoss):
    """Matryoshka-Adaptor L_topk: L_pair restricted to each item's nearest frozen neighbours::

        L_topk = (1/(|Omega_K| |M|)) sum_{(i,j) in Omega_K} sum_{m in M} |cos(z_i, z_j) - cos(e_i[:m], e_j[:m])|,
        Omega_K = {(i, j): j in NN_K(i)}

    NN_K(i) = the K items j != i with the largest frozen cosine cos(z_i, z_j) among the n items
    passed in (K = min(topk, n - 1); ties broken by ``torch.topk``).
    """

    def __init__(self, prefixes, topk: int):
        super().__init__(prefixes)
        if int(topk) < 1:
            raise ValueError(f"MatryoshkaTopKSimilarityLoss: topk must be >= 1, got {topk}")
        self.topk = int(topk)

    def pair_mask(self, cz: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
        n = cz.shape[0]
        eye = torch.eye(n, dtype=torch.bool, device=cz.device)
        if weight is None:
            nn_idx = cz.masked_fill(eye, float("-inf")).topk(min(self.topk, n - 1), dim=1).indices
            return torch.zeros_like(eye).scatter_(1, nn_idx, True)
        # padding items (weight 0) are nobody's neighbour and have none: with n' real items each
        # real row keeps its min(topk, n' - 1) finite picks, the same set as among the n' alone
        # (a pick of -inf lands on a padding column or the diagonal, which ``allowed`` drops)
        item = weight > 0
        allowed = ~eye & item[None, :] & item[:, None]
        nn_idx = cz.masked_fill(~allowed, float("-inf")).topk(min(self.topk, n - 1), dim=1).indices
        return torch.zeros_like(eye).scatter_(1, nn_idx, True) & allowed


# ---- baseline losses: SMEC ----
#
# SMEC (Zhang et al., EMNLP 2025) trains one stage at a time; every term below is evaluated at
# one width w (the stage's input width N or its output width N/2) and the method averages the
# two widths (see dive_core/methods/smec.py). Its supervised term is PairwiseSoftplusRankLoss
# (above) at that width. Inputs need not be normalised: cosines are computed here.


class SMECCrossBatchLoss(nn.Module):
    """S-XBM alignment at one width w: compressed cosines to the queue neighbours must match the
    frozen ones::

        L_xbm(w) = (1/|Omega|) sum_{(i,j) in Omega} | cos(e_i^w, e_j^w) - cos(z_i, z_j) |,
        Omega = {(i, j): j in NN_m(i)}

    ``z``: frozen (teacher, full-dimension) embeddings; ``e^w``: the stage's vectors at width w;
    i runs over the batch items (anchors), j over the FIFO queue. NN_m(i) = the m queue entries
    with the largest frozen cosine to z_i, excluding entries that are the same item as i
    (``neighbours``). Anchors with fewer than m admissible entries use what there is; an empty
    Omega gives 0 (keeping the graph).

    ``forward(anchor, neighbours, target, valid)``: ``anchor`` (A, w) = e_i^w, ``neighbours``
    (A, m, w) = e_j^w for j = NN_m(i) in order, ``target`` (A, m) = cos(z_i, z_j), ``valid``
    (A, m) bool = the slot holds an admissible neighbour.
    """

    @staticmethod
    @torch.no_grad()
    def neighbours(anchor_frozen: torch.Tensor, queue_frozen: torch.Tensor, m: int,
                   exclude: torch.Tensor | None = None):
        """NN_m of each anchor among the queue entries by frozen cosine.

        Returns ``(index (A, m') long, target (A, m') = cos(z_i, z_j), valid (A, m') bool)``
        with ``m' = min(m, L)`` for a queue of L entries, neighbours in decreasing frozen
        cosine; ``exclude`` (A, L) bool marks inadmissible (anchor, entry) pairs.
        """
        with torch.autocast(anchor_frozen.device.type, enabled=False):  # frozen targets: fp32 under bf16 training
            sim = F.normalize(anchor_frozen, dim=-1) @ F.normalize(queue_frozen, dim=-1).T
        masked = sim if exclude is None else sim.masked_fill(exclude, float("-inf"))
        vals, idx = masked.topk(min(int(m), sim.shape[1]), dim=1)
        return idx, sim.gather(1, idx), torch.isfinite(vals)

    def forward(self, anchor, neighbours, target, valid, scale=None) -> torch.Tensor:
        """``scale`` (w,), optional: both sides' coordinates multiplied by it, ``a * s`` and
        ``b * s``, without forming ``b * s`` (SMEC's narrow width as its k-hot ADS mask over the
        wide coordinates: ``cos(a * s, b * s) = sum_c a_c b_c s_c^2 / (|a * s| |b * s|)``)."""
        # cos = a.b / (|a| |b|), the dots as one batched product (A, m, w) @ (A, w, 1): no
        # normalised (or scaled) copy of the (A, m, w) neighbours, forward or backward
        s2 = None if scale is None else scale * scale
        a = anchor if s2 is None else anchor * s2
        dots = torch.matmul(neighbours, a[:, :, None]).squeeze(-1)
        if s2 is None:
            a_norm, b_norm = anchor.norm(dim=-1, keepdim=True), neighbours.norm(dim=-1)
        else:
            a_norm = (anchor * a).sum(-1, keepdim=True).sqrt()
            b_norm = torch.matmul(neighbours * neighbours, s2).sqrt()
        norms = a_norm.clamp_min(1e-12) * b_norm.clamp_min(1e-12)
        w = valid.to(dots.dtype)  # the mean over Omega as a weighted sum (no boolean gather)
        # an empty Omega gives 0 (and zero gradients) without reading ``valid`` back to the host
        return ((dots / norms - target).abs() * w).sum() / w.sum().clamp_min(1.0)
