"""SMEC (Zhang et al., EMNLP 2025): Sequential Matryoshka Embedding Compression (docs/methods.md#smec).

Three ingredients: Sequential Matryoshka Representation Learning (SMRL: halve the width one
stage at a time, earlier stages frozen), Adaptive Dimension Selection (ADS: learnable
per-coordinate importance scores pick which coordinates survive, instead of the prefix) and
Selectable Cross-batch Memory (S-XBM: a FIFO queue of frozen embeddings; each item's nearest
queue neighbours give unsupervised similarity targets).

Model. Widths ``d = w_0 > w_1 > ... > w_S = k``. Stage s (1-based) maps ``x_{s-1}`` (width
N = w_{s-1}, L2-normalised; ``x_0 = z`` the frozen embedding) to::

    y_s     = f_s(x_{s-1})                    ResidualMLP at width N (identity at init), hidden r
    x_s     = normalise(y_s[:, I_s])          I_s = the w_s coordinates chosen by ADS (ascending)
    output  = x_S                             (compress() normalises again: a no-op)

Training of stage s (its own ``train_phase`` call, ``phase="stage{s}"``; stages 1..s-1 frozen)::

    mask, I  = straight-through Gumbel top-w_s of the importance scores a_s   (one draw per step)
    e^N      = y_s            e^{N/2} = (y_s * mask)[:, I] = y_s[:, I] * mask[I]
    L_s      = 1/2 [L_rank(e^N) + L_rank(e^{N/2})] + xbm_weight * 1/2 [L_xbm(e^N) + L_xbm(e^{N/2})]

with ``L_rank`` = :class:`~dive_core.losses.PairwiseSoftplusRankLoss` (graded pairwise softplus rank loss,
cosines at that width) and ``L_xbm`` = :class:`~dive_core.losses.SMECCrossBatchLoss`.

Decisions where the paper is open (each one is tested in tests/test_smec.py):

1. Stage widths: ``w_{s+1} = max(floor(w_s / 2), k)`` until ``w = k``. So every stage halves
   except possibly the last, which keeps exactly k of N coordinates when N/2 < k:
   d=384, k=64 -> 384, 192, 96, 64 (3 stages); d=384, k=96 -> 384, 192, 96; d=32, k=8 ->
   32, 16, 8; d=4096, k=128 -> 4096, ..., 128 (5 stages). k = d gives no stage: SMEC is then
   the identity (normalise(z)), there is nothing to compress or train.
2. Epoch budget: ``epochs`` (the total, 50) split evenly over the S stages, the remainder going
   to the earliest stages: 50 over 3 stages -> 17, 17, 16; 15 over 2 -> 8, 7. Fewer epochs than
   stages is a configuration error.
3. The per-stage layer is the project's shared ResidualMLP at the stage's input width N (hidden
   width ``hidden``, identity at init), followed by ADS selection; the stage output is
   re-normalised so every stage sees unit vectors, as the first one does.
4. "Loss at both widths": both widths belong to the stage being trained - width N is the
   stage's adapted vector y_s before selection, width N/2 (or k) the selected coordinates. (The
   stage input x_{s-1} itself is frozen, so a loss on it would have no gradient.) The two widths
   have equal weight 1/2, so the loss scale does not depend on the number of widths.
5. ADS: importance scores a_s in R^N, initialised to 0. Training: one Gumbel(0,1) noise vector
   g per optimiser step, shared by every item of the step (queries, documents and queue
   neighbours must use the same coordinates); hard mask = k-hot of the top w_s of a_s + g;
   relaxation soft = softmax((a_s + g) / gumbel_tau); mask = hard + (soft - soft.detach()) -
   exactly k-hot in the forward pass, gradient of the soft relaxation to a_s (straight-through).
   ``gumbel_tau`` is the softmax temperature only; the noise itself is unscaled Gumbel(0,1).
   The noise is drawn from a generator seeded by (seed, stage).
   **Own learning rate** ``ads_lr`` for a_s (AdamW group without weight decay; the adapter keeps
   ``lr``). The paper gives no optimiser setting for the scores. At the shared lr 5e-6, AdamW
   moves each score by about lr per step, so after a stage's ~1.2k steps (SciFact) the scores
   spread over ~1e-3 against the noise's standard deviation pi/sqrt(6) = 1.28: every training
   mask was a uniformly random subset, and the adapter never trained on the subset it is
   deployed with. A separate rate lets the scores outgrow the noise during a stage (random
   masks first, then masks that follow the scores), which is what a learnable selection
   means. Chosen on validation queries (SciFact, MiniLM, 64d, seed 2027, select stage;
   ``config/audit.yaml``) from {5e-6 (the old behaviour), 1e-2, 1e-1}: nDCG@10 0.5518, 0.5687,
   0.5602 (unseen 0.5135, 0.5329, 0.5261), so 1e-2. There, at the end of stage 1 the scores span
   [-1.5, 4.9] (spread 0.64 of the noise std; 0.0003 at 5e-6) and the selection overlaps the
   prefix at chance level (0.48 of 192 of 384): MiniLM was not trained Matryoshka-style, so
   its first coordinates are not special. Logged per epoch: ``ads_prefix_overlap`` (the
   fraction of the current top-w_s selection inside the prefix [0, w_s); 1.0 = truncation) and
   ``ads_spread`` (std of the scores / std of the noise); the checkpoint's ``meta.ads`` holds
   both per stage when the stage is frozen.
   Inference: deterministic top-w_s of a_s (stable sort, ties -> lower index), fixed when the
   stage's training ends and stored as the buffer ``stages.<i>.selected`` in the checkpoint.
   With a_s = 0 the selection is the prefix, so the untrained model is exactly ``truncate``.
6. Frozen: after stage s ends, its adapter and importance scores get ``requires_grad=False``
   and are not given to later optimisers (AdamW weight decay therefore cannot move them
   either); its selection I_s is fixed. The frozen backbone embeddings z are never trained.
   The inputs x_{s-1} of stage s are computed once, at the start of the stage, for every item
   the triplets use (earlier stages are frozen, so they are exact for the whole stage).
7. S-XBM queue: ``queue_size`` (default 4096) distinct items, each stored with its frozen
   full-dimension embedding z (for neighbour search and targets) and its stage vector y_s at
   width N as computed in the step that enqueued it (as cross-batch memory stores embeddings,
   XBM, Wang et al. 2020). After every optimiser step the step's batch items (queries,
   positives, negatives) are pushed (newest last); a re-pushed item moves to the newest
   position with its new vectors; the oldest entries drop out beyond ``queue_size``.
   Pushing after the step means a batch is never its own memory. The queue is emptied at the
   start of each stage (the first step of a stage has no S-XBM term).
8. S-XBM loss: anchors = the batch's distinct items; neighbours = each anchor's
   ``queue_neighbors`` (10) queue entries with the largest frozen cosine cos(z_i, z_j), the
   anchor itself excluded; the target is always the frozen full-dimension cosine (not the
   previous stage's); the compressed side of a neighbour is its stored y_s (at the narrow
   width: the current step's ADS selection of it). Memory entries are constants, as in XBM:
   only the anchor side carries a gradient. Until the audit the neighbours were re-run through
   the current adapter every step (a no-grad forward of up to ~3,000 extra rows per step,
   the larger part of SMEC's step time); an entry is at most ~12 steps old (4096 entries,
   ~350 distinct items per step), and at the adapter's lr 5e-6 it drifts by far less than the
   stored values' float noise, which is XBM's "slow drift" argument. Validation nDCG@10 with
   ADS at the old learning rate: 0.5447 recomputing the neighbours, 0.5518 with the memory;
   SMEC's training time fell from 262 s to 116 s (select stage). The neighbour search itself
   (every anchor against every queue entry at full dimension, 12 ms of a 33 ms step) uses
   :class:`FrozenNeighbours`: z never changes, so each item's nearest items by frozen cosine
   are listed once per fit, and an anchor's neighbours are the first m queued entries of its
   list (exact whenever m of them are queued; otherwise the exact search over the queue). A
   cost model keeps the per-step search when the n x n listing would cost more (Quora scale);
   ``meta.neighbour_search`` records which path ran. Both give the same neighbours (tested);
   SMEC then trains at 0.82x DIVE's time per epoch. Penalty = mean absolute difference |cos(e_i^w, e_j^w) - cos(z_i, z_j)|
   (the L1 form of Matryoshka-Adaptor's L_topk), weight ``xbm_weight`` (1.0).
9. Learning rate ``lr`` (5e-6, the paper's setting; audit grid {1e-6, 5e-6, 1e-5}, docs/protocol.md#validation-only-selection) is used
   for every stage's adapter with a fresh AdamW per stage; ``ads_lr`` for its scores (5);
   batch 128 triplets; weight decay 0.01 (adapter only).

Logged per epoch (weighted, they sum to ``total``): ``rank_wide``, ``rank_narrow``,
``xbm_wide``, ``xbm_narrow``; plus ``width_in`` / ``width_out`` (the stage's N and w_s),
``neighbours`` (mean admissible queue neighbours per anchor; < queue_neighbors while the queue
fills) and the ADS diagnostics ``ads_prefix_overlap`` and ``ads_spread`` (5).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..adapters import ResidualMLP
from ..losses import PairwiseSoftplusRankLoss, SMECCrossBatchLoss
from .base import TorchMethod, register
from .specs import stage_widths  # noqa: F401  (the stage plan, defined without torch)


def split_epochs(total: int, n_stages: int) -> list[int]:
    """``total`` epochs split evenly over ``n_stages``, remainder to the first stages."""
    if n_stages == 0:
        return []
    if total < n_stages:
        raise ValueError(f"smec: epochs={total} cannot be split over {n_stages} stages "
                         f"(each stage needs at least one epoch)")
    base, extra = divmod(int(total), n_stages)
    return [base + (1 if s < extra else 0) for s in range(n_stages)]


def topk_indices(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Deterministic top-k of a 1-D score vector: the k largest (ties -> lower index), returned
    in ascending coordinate order."""
    order = torch.sort(scores.detach(), descending=True, stable=True).indices
    return order[:k].sort().values


def gumbel_noise(n: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """One Gumbel(0, 1) draw of ``n`` coordinates, on the CPU (the same noise on every device)."""
    u = torch.rand((n,), generator=generator, dtype=torch.float32)  # cpu: drawn from a CPU generator, the same noise on every device
    return -torch.log(-torch.log(u.clamp_min(1e-20)))


def gumbel_topk_mask(logits: torch.Tensor, k: int, tau: float, generator: torch.Generator | None = None,
                     noise: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Straight-through Gumbel top-k over a 1-D logit vector.

    Returns ``(mask, idx)``: ``mask`` is exactly k-hot in the forward pass (``hard + (soft -
    soft.detach())`` adds an exact zero) and back-propagates the gradient of the relaxation
    ``soft = softmax((logits + g) / tau)``; ``idx`` = the k chosen coordinates, ascending. ``g`` is
    ``noise`` if given (drawn before the step: :func:`gumbel_noise`), else drawn here from ``generator``.
    """
    g = gumbel_noise(logits.shape[0], generator) if noise is None else noise
    g = g.to(device=logits.device, dtype=logits.dtype)
    perturbed = logits + g
    idx = topk_indices(perturbed, k)
    hard = torch.zeros(logits.shape, dtype=logits.dtype, device=logits.device).index_fill(0, idx, 1.0)
    soft = torch.softmax(perturbed / tau, dim=-1)
    return hard + (soft - soft.detach()), idx


class CrossBatchMemory:
    """FIFO queue of distinct items (integer keys) with their frozen embeddings ``emb`` and the
    stage's wide vectors ``wide`` computed when they were enqueued (decision 7).

    ``keys`` / ``emb`` / ``wide`` are ordered oldest -> newest. ``push`` appends a batch (an
    item repeated within the batch keeps its last position; an item already queued moves to
    the newest position, with its new vectors) and drops the oldest entries beyond ``size``.

    With ``n_items`` (keys in ``range(n_items)``) the queue also tracks each item's position
    (for :meth:`FrozenNeighbours.lookup`) and keeps the vectors in per-item tables, so that a
    push writes only the pushed rows instead of re-concatenating the whole queue; ``emb`` and
    ``wide`` are then gathered in queue order on access, and :meth:`wide_at` gathers only the
    entries asked for. Both layouts hold the same values.
    """

    def __init__(self, size: int, dim: int, wide_dim: int = 0, device: torch.device | str = "cpu",
                 n_items: int | None = None):
        if size < 1:
            raise ValueError(f"queue size must be >= 1, got {size}")
        self.size = int(size)
        self.keys = torch.empty(0, dtype=torch.long, device=device)
        rows = 0 if n_items is None else int(n_items)
        self._emb = torch.zeros(rows, dim, dtype=torch.float32, device=device)
        self._wide = torch.zeros(rows, wide_dim, dtype=torch.float32, device=device)
        # with ``n_items``: each item's queue position, or -1 (for FrozenNeighbours.lookup)
        self.position = None if n_items is None else torch.full((rows,), -1, dtype=torch.long, device=device)

    def __len__(self) -> int:
        return int(self.keys.shape[0])

    @property
    def emb(self) -> torch.Tensor:
        return self._emb if self.position is None else self._emb[self.keys]

    @property
    def wide(self) -> torch.Tensor:
        return self._wide if self.position is None else self._wide[self.keys]

    def wide_at(self, index: torch.Tensor) -> torch.Tensor:
        """``wide[index]`` for queue positions ``index`` (any shape)."""
        return self._wide[index] if self.position is None else self._wide[self.keys[index]]

    @torch.no_grad()
    def push(self, keys: torch.Tensor, emb: torch.Tensor, wide: torch.Tensor | None = None) -> None:
        n = keys.shape[0]
        if n == 0:
            return
        if wide is None:
            wide = emb.new_zeros((n, self._wide.shape[1]))
        uniq, inv = torch.unique(keys, return_inverse=True)
        last = torch.full((uniq.shape[0],), -1, dtype=torch.long, device=keys.device)
        last = last.scatter_reduce(0, inv, torch.arange(n, device=keys.device), reduce="amax")
        keep = last.sort().values
        keys = keys[keep]
        if self.position is None:
            old = ~torch.isin(self.keys, keys)
            self._emb = torch.cat([self._emb[old], emb[keep].detach().to(self._emb.dtype)])[-self.size:]
            self._wide = torch.cat([self._wide[old], wide[keep].detach().to(self._wide.dtype)])[-self.size:]
            self.keys = torch.cat([self.keys[old], keys])[-self.size:]
            return
        # per-item tables: write the pushed rows only; positions locate the re-pushed items
        self._emb[keys] = emb[keep].detach().to(self._emb.dtype)
        self._wide[keys] = wide[keep].detach().to(self._wide.dtype)
        self.position[keys] = -1  # re-pushed items leave their old place
        old = self.position[self.keys] >= 0
        self.position[self.keys] = -1
        self.keys = torch.cat([self.keys[old], keys])[-self.size:]
        self.position[self.keys] = torch.arange(len(self.keys), device=self.keys.device)

    def exact_neighbours(self, keys: torch.Tensor, z: torch.Tensor, m: int):
        """NN_m of items ``keys`` (frozen embeddings ``z``) among the queued entries, each item's
        own entry excluded (:meth:`SMECCrossBatchLoss.neighbours`)."""
        return SMECCrossBatchLoss.neighbours(z, self.emb, m, keys[:, None] == self.keys[None, :])


class FrozenNeighbours:
    """Each training item's ``M`` nearest other items by frozen cosine, computed once per fit
    (decision 8): the S-XBM neighbours of an anchor are then the first ``m`` of its list that are
    queued, which is exactly the top-m of the queue whenever at least ``m`` of them are queued
    (the list is sorted by cosine). Anchors with fewer queued candidates than they have
    admissible queue entries fall back to the exact search over the queue.

    ``z`` (n, d) must be L2-normalised. ``M = min(n - 1, max(m, ceil(4 m n / queue_size)))``: a
    queue holding a fraction ``queue_size / n`` of the items is expected to hold 4m of them.
    """

    def __init__(self, z: torch.Tensor, m: int, queue_size: int, chunk: int = 2048):
        n = z.shape[0]
        self.m = int(m)
        self.M = int(min(n - 1, max(self.m, -(-4 * self.m * n // int(queue_size)))))
        idx, cos = [], []
        with torch.no_grad():
            for start in range(0, n, chunk):
                sim = z[start:start + chunk] @ z.T
                rows = torch.arange(sim.shape[0], device=z.device)
                sim[rows, rows + start] = float("-inf")  # an item is never its own neighbour
                v, i = sim.topk(self.M, dim=1)
                idx.append(i)
                cos.append(v)
        self.idx = torch.cat(idx) if idx else torch.empty(0, 0, dtype=torch.long, device=z.device)
        self.cos = torch.cat(cos) if cos else torch.empty(0, 0, device=z.device)

    @staticmethod
    def worthwhile(n_items: int, m: int, queue_size: int, steps: int, anchors_per_step: int) -> bool:
        """Cost model: the one-off n x n search costs less than ``steps`` searches of
        ``anchors_per_step`` x ``queue_size`` (same d), and its lists (8-byte index + 4-byte
        cosine per entry) fit in 1 GiB. At Quora scale (n ~ 10^6 items) it does not pay."""
        M = min(n_items, max(m, -(-4 * m * n_items // queue_size)))
        return n_items * n_items <= steps * anchors_per_step * queue_size and 12 * n_items * M <= 2 ** 30

    @torch.no_grad()
    def lookup(self, anchors: torch.Tensor, queue: "CrossBatchMemory", z: torch.Tensor):
        """Same contract as :meth:`CrossBatchMemory.exact_neighbours`: ``(index into the queue,
        target cosine, valid)``, each (A, min(m, L)). Needs a queue that tracks positions."""
        L, M = len(queue), self.M
        width = min(self.m, L)
        qpos = queue.position[self.idx[anchors]]
        queued = qpos >= 0
        cols = torch.arange(M, device=anchors.device).expand_as(queued)
        order = torch.where(queued, cols, M).sort(dim=1).values[:, :width]
        valid = order < M
        col = order.clamp_max(M - 1)
        index = qpos.gather(1, col).clamp_min(0)
        target = self.cos[anchors].gather(1, col)
        admissible = L - (queue.position[anchors] >= 0).long()
        short = valid.sum(1) < admissible.clamp_max(width)
        if bool(short.any()):  # too few queued candidates: exact search over the queue
            index[short], target[short], valid[short] = queue.exact_neighbours(anchors[short], z[anchors[short]], width)
        return index, target, valid


class SMECStage(nn.Module):
    """One SMRL stage: ResidualMLP at width ``width_in``, ADS importance scores, and the
    selection ``selected`` (buffer, fixed when the stage is frozen)."""

    def __init__(self, width_in: int, width_out: int, hidden: int):
        super().__init__()
        self.width_in, self.width_out = int(width_in), int(width_out)
        self.adapter = ResidualMLP(self.width_in, int(hidden))
        self.importance = nn.Parameter(torch.zeros(self.width_in))  # cpu: the module moves to the device
        self.register_buffer("selected", topk_indices(self.importance, self.width_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Inference path: ``normalise(f(x)[:, selected])``."""
        return F.normalize(self.adapter(x)[:, self.selected], dim=-1)

    @torch.no_grad()
    def freeze(self) -> None:
        self.selected.copy_(topk_indices(self.importance, self.width_out))
        self.requires_grad_(False)


@register
class SMEC(TorchMethod):
    type = "smec"
    cuda_graph = True  # _stage_loss and _push: fixed shapes, no host read (the queue's search in _schedule)

    def build(self) -> None:
        self.queue_size = int(self.hp["queue_size"])
        self.queue_neighbors = int(self.hp["queue_neighbors"])
        self.gumbel_tau = float(self.hp["gumbel_tau"])
        self.xbm_weight = float(self.hp["xbm_weight"])
        self.ads_lr = float(self.hp["ads_lr"])
        self.widths = stage_widths(self.d, self.k)
        self.stage_epochs = split_epochs(int(self.hp["epochs"]), len(self.widths) - 1)
        hidden = int(self.hp["hidden"])
        stages = [SMECStage(a, b, hidden) for a, b in zip(self.widths[:-1], self.widths[1:])]
        self.net = nn.ModuleDict({"stages": nn.ModuleList(stages)}).to(self.device)
        self.rank_loss = PairwiseSoftplusRankLoss()
        self.xbm_loss = SMECCrossBatchLoss()

    @property
    def stages(self) -> nn.ModuleList:
        return self.net["stages"]

    def transform(self, x: torch.Tensor, n_stages: int | None = None) -> torch.Tensor:
        """The first ``n_stages`` stages (all by default) on normalised frozen embeddings."""
        for st in list(self.stages)[:n_stages]:
            x = st(x)
        return x

    def layers(self, side="document"):
        from ..layers import NORMALIZE

        return [step for st in self.stages for step in (st.adapter.layers(st.selected.cpu()), NORMALIZE)]

    # -- training ----------------------------------------------------------------------
    # The step is recordable as a CUDA graph (fixed shapes, no host read): what depends only on
    # which items a step trains on (its distinct items, their S-XBM neighbours in the queue, the
    # Gumbel noise) is worked out for every step of an epoch before the epoch (``_schedule``, with
    # the queue of keys kept there), and the step reads its row of those tensors at a step counter
    # kept on the device. The anchors are padded to 3B rows (weight 0). The stored wide vectors live
    # in a table of one row per queue slot (memory of the queue's size), written by the step that
    # pushes them.
    def fit(self, data, log, progress: bool = True) -> None:
        if data.n_triplets == 0:
            raise ValueError("smec: supervised method, needs training triplets")
        dev = data.device
        self.net.to(dev)
        # The items the triplets use: distinct documents, then distinct queries (keys = rows).
        doc_rows = torch.unique(torch.cat([data.t_p, data.t_n]))
        q_rows = torch.unique(data.t_q)
        self._z = torch.cat([data.docs[doc_rows], data.queries[q_rows]])
        self._tq = doc_rows.shape[0] + torch.searchsorted(q_rows, data.t_q)
        self._tp = torch.searchsorted(doc_rows, data.t_p)
        self._tn = torch.searchsorted(doc_rows, data.t_n)
        self._yp, self._yn = data.y_p, data.y_n
        n_items = self._z.shape[0]
        steps = -(-data.n_triplets // int(self.hp["batch_size"])) * sum(self.stage_epochs)
        anchors = 3 * int(self.hp["batch_size"])
        self._nbrs = None
        if FrozenNeighbours.worthwhile(n_items, self.queue_neighbors, self.queue_size, steps, anchors):
            self._nbrs = FrozenNeighbours(F.normalize(self._z, dim=-1), self.queue_neighbors, self.queue_size)
        self.meta["neighbour_search"] = "precomputed" if self._nbrs is not None else "per_step"
        try:
            for s, (st, epochs) in enumerate(zip(self.stages, self.stage_epochs)):
                self.net.eval()
                with torch.no_grad():  # stage inputs through the frozen earlier stages
                    self._x = torch.cat([self.transform(c, s) for c in self._z.split(65536)])
                st.requires_grad_(True)
                seed = int(np.random.SeedSequence([int(self.seed), s]).generate_state(1)[0])
                self._gen = torch.Generator().manual_seed(seed)
                self._stage = s
                self._queue = CrossBatchMemory(self.queue_size, self.d, 0, dev,
                                               n_items if self._nbrs is not None else None)
                # the queued items' stored wide vectors, one row per queue slot (an item keeps its
                # slot while queued; _schedule assigns them); row Q takes the writes of padding and
                # of items not queued, row Q + 1 (ones: a finite norm) stands for an empty neighbour
                self._wide = torch.zeros(self.queue_size + 2, st.width_in, device=dev)
                self._wide[-1] = 1.0
                self._slot = torch.full((n_items,), -1, dtype=torch.long, device=dev)  # item -> slot
                self._occupant = torch.full((self.queue_size,), -1, dtype=torch.long, device=dev)  # slot -> item
                self._sched, self._t = None, torch.zeros(1, dtype=torch.long, device=dev)
                self._consts = torch.tensor([float(st.width_in), float(st.width_out)], device=dev)
                self._pending = None
                # ADS scores: own learning rate, no weight decay (decision 5)
                groups = [{"params": list(st.adapter.parameters())},
                          {"params": [st.importance], "lr": self.ads_lr, "weight_decay": 0.0}]
                self.train_phase(data, log, epochs, self.hp["lr"], self._stage_loss, groups,
                                 phase=f"stage{s + 1}", progress=progress, after_step=self._push,
                                 cuda_graph=self.graph_capturable(), before_epoch=self._schedule)
                st.freeze()
                self.meta.setdefault("ads", []).append(ads_summary(st))
        finally:
            for name in ("_z", "_x", "_tq", "_tp", "_tn", "_yp", "_yn", "_queue", "_pending", "_gen",
                         "_nbrs", "_wide", "_sched", "_t", "_consts", "_slot", "_occupant"):
                self.__dict__.pop(name, None)
        self.net.eval()

    @torch.no_grad()
    def _schedule(self, order: torch.Tensor) -> None:
        """Before an epoch: for each of its steps (batches of ``order``), the distinct batch items
        padded to 3B anchors (``anchors``, ``weight``), the triplets' anchor rows (``inverse``), each
        anchor's S-XBM neighbours as rows of the vector table (``nb``; an empty slot -> the table's
        row of ones), their frozen cosines and validity, the rows the step writes its anchors' vectors
        to (``write``) and the step's Gumbel noise; then the queue as it is after that step. Written
        into the same tensors every epoch (a recorded step reads them)."""
        st = self.stages[self._stage]
        bs, m, q = int(self.hp["batch_size"]), self.queue_neighbors, self.queue_size
        rows = 3 * bs
        dev = order.device
        steps = []
        for idx in order.split(bs):
            b = idx.shape[0]
            items = torch.cat([self._tq[idx], self._tp[idx], self._tn[idx]])
            anchors, inv = torch.unique(items, return_inverse=True)
            a = anchors.shape[0]
            nb = torch.full((rows, m), q + 1, dtype=torch.long, device=dev)
            target = torch.zeros((rows, m), device=dev)
            valid = torch.zeros((rows, m), dtype=torch.bool, device=dev)
            if len(self._queue):
                qi, tg, ok = (self._nbrs.lookup(anchors, self._queue, self._z) if self._nbrs is not None else
                              self._queue.exact_neighbours(anchors, self._z[anchors], m))
                w = qi.shape[1]
                nb[:a, :w] = torch.where(ok, self._slot[self._queue.keys[qi]], q + 1)
                target[:a, :w], valid[:a, :w] = tg, ok
            self._queue.push(items, self._z[items])
            self._assign_slots()
            write = self._slot[anchors]
            pad = lambda x, n, v=0: torch.cat([x, x.new_full((n - x.shape[0],), v)])  # noqa: E731
            steps.append(dict(anchors=pad(anchors, rows), weight=pad(torch.ones(a, device=dev), rows),
                              inverse=pad(inv, rows), nb=nb, target=target, valid=valid,
                              write=pad(torch.where(write >= 0, write, q), rows, q),
                              noise=gumbel_noise(st.width_in, self._gen).to(dev)))
        new = {k: torch.stack([s_[k] for s_ in steps]) for k in steps[0]}
        if self._sched is None:
            self._sched = new
        else:  # in place: a recorded step reads these tensors
            for k, v in new.items():
                self._sched[k].copy_(v)
        self._t.zero_()

    def _assign_slots(self) -> None:
        """After a push: the slots of items that left the queue are freed, the items that entered
        take free ones; an item still queued keeps its slot (so its stored vector stays put)."""
        keys, occ = self._queue.keys, self._occupant
        queued = torch.zeros_like(self._slot, dtype=torch.bool)
        queued[keys] = True
        gone = (occ >= 0) & ~queued[occ.clamp_min(0)]
        self._slot[occ[gone]] = -1
        occ[gone] = -1
        new = keys[self._slot[keys] < 0]
        free = torch.nonzero(occ < 0).squeeze(1)[: new.shape[0]]
        occ[free] = new
        self._slot[new] = free

    def _push(self) -> None:
        """After the step: its anchors' wide vectors into their queue slots (the queue's keys were
        pushed and the slots assigned by :meth:`_schedule`), and the step counter on."""
        rows, wide = self._pending
        self._wide[rows] = wide.to(self._wide.dtype)
        self._t += 1

    def _stage_loss(self, data, idx: torch.Tensor) -> dict[str, torch.Tensor]:
        st = self.stages[self._stage]
        at = {k: v.index_select(0, self._t)[0] for k, v in self._sched.items()}  # this step's row
        mask, sel = gumbel_topk_mask(st.importance, st.width_out, self.gumbel_tau, noise=at["noise"])
        b = idx.shape[0]
        anchors, weight, inv = at["anchors"], at["weight"], at["inverse"]
        iq, ip, in_ = inv[:b], inv[b:2 * b], inv[2 * b:3 * b]
        wide = st.adapter(self._x[anchors])  # every distinct batch item once (then padding), with gradient
        narrow = wide[:, sel] * mask[sel]  # = (wide * mask)[:, sel], on w_s columns only
        nb_wide = self._wide[at["nb"]]  # memory entries: constants (decision 8)
        target, valid = at["target"], at["valid"]
        self._pending = (at["write"], wide.detach())  # padding's and unqueued items' rows: the spare row
        yp, yn = self._yp[idx], self._yn[idx]
        out: dict[str, torch.Tensor] = {}
        # S-XBM at the narrow width = at the wide width with both sides scaled by the k-hot mask
        # (zero off ``sel``, one on it in the forward pass, its gradient that of the relaxation):
        # the same cosines and gradients as gathering the ``sel`` columns of every neighbour
        for name, e, scale in (("wide", wide, None), ("narrow", narrow, mask)):
            rank = self.rank_loss(e[iq], e[ip], e[in_], yp, yn)
            xbm = self.xbm_loss(wide, nb_wide, target, valid, scale)
            out[f"rank_{name}"] = 0.5 * rank
            out[f"xbm_{name}"] = 0.5 * self.xbm_weight * xbm
        loss = out["rank_wide"] + out["rank_narrow"] + out["xbm_wide"] + out["xbm_narrow"]
        log = {k: v.detach() for k, v in out.items()}
        with torch.no_grad():
            log.update(width_in=self._consts[0], width_out=self._consts[1],
                       neighbours=(valid.float().sum(1) * weight).sum() / weight.sum(),
                       **{f"ads_{k}": v for k, v in ads_stats(st).items()})
        return {"loss": loss, **log}


GUMBEL_STD = float(np.pi / np.sqrt(6.0))  # standard deviation of Gumbel(0, 1) noise


@torch.no_grad()
def ads_stats(st: SMECStage) -> dict[str, torch.Tensor]:
    """What ADS has learned so far in one stage, as tensors (no device sync):
    ``prefix_overlap`` = fraction of the current deterministic selection (top-w_out of the
    scores) inside the prefix ``[0, w_out)`` (1.0 = plain truncation); ``spread`` = std of the
    scores / std of the Gumbel noise (pi / sqrt 6): at << 1 the noise decides every training
    mask, which is then a uniformly random subset."""
    sel = topk_indices(st.importance, st.width_out)
    a = st.importance.detach().float()
    return {"prefix_overlap": (sel < st.width_out).float().mean(),
            "spread": a.std() / GUMBEL_STD if a.numel() > 1 else a.new_zeros(())}


def ads_summary(st: SMECStage) -> dict:
    """:func:`ads_stats` as floats, with the stage's widths and the score range (checkpoint
    metadata)."""
    a = st.importance.detach().float()
    return {"width_in": st.width_in, "width_out": st.width_out,
            **{k: float(v) for k, v in ads_stats(st).items()},
            "score_min": float(a.min()), "score_max": float(a.max())}
