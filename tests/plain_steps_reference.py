"""The MRL and SMEC training steps as they were before they were made recordable as CUDA graphs
(commit b593cd5): the reference that tests/test_fixed_shape_steps.py trains against. Kept verbatim
(only what the fixed-shape rewrite changed): ``torch.unique`` with data-dependent shapes, the
Gumbel noise drawn from a CPU generator inside the step, the S-XBM queue pushed and searched inside
the step (``len(queue)`` and ``bool(short.any())`` read back to the host)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from dive_core.methods.mrl import MatryoshkaAdaptor
from dive_core.methods.smec import SMEC, CrossBatchMemory, FrozenNeighbours, ads_stats, ads_summary, topk_indices


# ---- MRL -------------------------------------------------------------------------------------
def distinct_items(data, idx: torch.Tensor):
    b = idx.shape[0]
    uq, q_inv = torch.unique(data.t_q[idx], return_inverse=True)
    ud, d_inv = torch.unique(torch.cat([data.t_p[idx], data.t_n[idx]]), return_inverse=True)
    z = torch.cat([data.queries[uq], data.docs[ud]])
    nq = uq.shape[0]
    return z, q_inv, nq + d_inv[:b], nq + d_inv[b:]


def _prefix_cosine_rows(a, b, prefixes):
    cols = torch.as_tensor([int(m) - 1 for m in prefixes], device=a.device)
    ab, aa, bb = ((x * y).cumsum(-1)[:, cols] for x, y in ((a, b), (a, a), (b, b)))
    return ab / (aa.clamp_min(1e-24).sqrt() * bb.clamp_min(1e-24).sqrt())


def _mrl_geometry(self, e, z):
    from dive_core.losses import prefix_similarity_deviation

    alpha, beta = float(self.hp["alpha"]), float(self.hp["beta"])
    dev = prefix_similarity_deviation(e, z, self.prefixes)
    topk = self.topk_loss(e, z, dev)
    zero = topk.new_zeros(())
    return {"topk": topk, "pair": alpha * self.pair_loss(e, z, dev) if alpha else zero,
            "reconstruction": beta * self.rec_loss(e, z) if beta else zero}


class PlainMRL(MatryoshkaAdaptor):
    """MRL with the step of b593cd5 (not registered: ``type`` stays ``mrl``)."""

    cuda_graph = False
    _geometry = _mrl_geometry

    def fit(self, data, log, progress: bool = True) -> None:
        epochs = int(self.hp["epochs"])
        if self.schedule == "two_stage":
            first = (epochs + 1) // 2
            self.train_phase(data, log, first, self.hp["lr"], self.unsupervised_loss, self.net.parameters(),
                             phase="unsupervised", progress=progress, n_items=int(data.docs.shape[0]))
            epochs -= first
        self.train_phase(data, log, epochs, self.hp["lr"], self.batch_loss, self.net.parameters(),
                         phase="supervised" if self.schedule == "two_stage" else "train", progress=progress)

    def batch_loss(self, data, idx):
        gam = float(self.hp["gamma_rank"])
        z, iq, ip, in_ = distinct_items(data, idx)
        e = self.net["adapter"](z)
        terms = self._geometry(e, z)
        if gam:
            y_p, y_n = data.y_p[idx], data.y_n[idx]
            q, p, n = e[iq], e[ip], e[in_]
            s_p, s_n = _prefix_cosine_rows(q, p, self.rank_loss.prefixes), _prefix_cosine_rows(q, n, self.rank_loss.prefixes)
            terms["rank"] = gam * ((y_p - y_n)[:, None] * F.softplus(s_n - s_p)).mean()
        else:
            terms["rank"] = terms["topk"].new_zeros(())
        return {"loss": sum(terms.values()), **{k: v.detach() for k, v in terms.items()}}


# ---- SMEC ------------------------------------------------------------------------------------
def gumbel_topk_mask(logits, k, tau, generator=None):
    u = torch.rand(logits.shape, generator=generator, dtype=torch.float32)
    g = (-torch.log(-torch.log(u.clamp_min(1e-20)))).to(device=logits.device, dtype=logits.dtype)
    perturbed = logits + g
    idx = topk_indices(perturbed, k)
    hard = torch.zeros(logits.shape, dtype=logits.dtype, device=logits.device).index_fill(0, idx, 1.0)
    soft = torch.softmax(perturbed / tau, dim=-1)
    return hard + (soft - soft.detach()), idx


def xbm_loss(anchor, neighbours, target, valid, scale=None):
    if not bool(valid.any()):
        return (anchor.sum() + neighbours.sum() + (0.0 if scale is None else scale.sum())) * 0.0
    s2 = None if scale is None else scale * scale
    a = anchor if s2 is None else anchor * s2
    dots = torch.matmul(neighbours, a[:, :, None]).squeeze(-1)
    if s2 is None:
        a_norm, b_norm = anchor.norm(dim=-1, keepdim=True), neighbours.norm(dim=-1)
    else:
        a_norm = (anchor * a).sum(-1, keepdim=True).sqrt()
        b_norm = torch.matmul(neighbours * neighbours, s2).sqrt()
    norms = a_norm.clamp_min(1e-12) * b_norm.clamp_min(1e-12)
    w = valid.to(dots.dtype)
    return ((dots / norms - target).abs() * w).sum() / w.sum()


class PlainSMEC(SMEC):
    """SMEC with the step of b593cd5 (not registered: ``type`` stays ``smec``)."""

    cuda_graph = False

    def fit(self, data, log, progress: bool = True) -> None:
        if data.n_triplets == 0:
            raise ValueError("smec: supervised method, needs training triplets")
        dev = data.device
        self.net.to(dev)
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
                with torch.no_grad():
                    self._x = torch.cat([self.transform(c, s) for c in self._z.split(65536)])
                st.requires_grad_(True)
                seed = int(np.random.SeedSequence([int(self.seed), s]).generate_state(1)[0])
                self._gen = torch.Generator().manual_seed(seed)
                self._stage = s
                self._queue = CrossBatchMemory(self.queue_size, self.d, st.width_in, dev,
                                               n_items if self._nbrs is not None else None)
                self._pending = None
                groups = [{"params": list(st.adapter.parameters())},
                          {"params": [st.importance], "lr": self.ads_lr, "weight_decay": 0.0}]
                self.train_phase(data, log, epochs, self.hp["lr"], self._stage_loss, groups,
                                 phase=f"stage{s + 1}", progress=progress, after_step=self._push,
                                 cuda_graph=False)
                st.freeze()
                self.meta.setdefault("ads", []).append(ads_summary(st))
        finally:
            for name in ("_z", "_x", "_tq", "_tp", "_tn", "_yp", "_yn", "_queue", "_pending", "_gen",
                         "_nbrs"):
                self.__dict__.pop(name, None)
        self.net.eval()

    def _push(self) -> None:
        keys, wide = self._pending
        self._queue.push(keys, self._z[keys], wide)

    def _stage_loss(self, data, idx):
        st = self.stages[self._stage]
        kq, kp, kn = self._tq[idx], self._tp[idx], self._tn[idx]
        mask, sel = gumbel_topk_mask(st.importance, st.width_out, self.gumbel_tau, self._gen)
        items = torch.cat([kq, kp, kn])
        anchors, inv = torch.unique(items, return_inverse=True)
        b = idx.shape[0]
        iq, ip, in_ = inv[:b], inv[b:2 * b], inv[2 * b:]
        wide = st.adapter(self._x[anchors])
        narrow = wide[:, sel] * mask[sel]
        if len(self._queue):
            nb, target, valid = (self._nbrs.lookup(anchors, self._queue, self._z) if self._nbrs is not None else
                                 self._queue.exact_neighbours(anchors, self._z[anchors], self.queue_neighbors))
            nb_wide = self._queue.wide_at(nb)
        else:
            target = self._z.new_zeros((anchors.shape[0], 0))
            valid = torch.zeros_like(target, dtype=torch.bool)
            nb_wide = wide.new_zeros((anchors.shape[0], 0, st.width_in))
        self._pending = (items, wide.detach()[inv])
        yp, yn = self._yp[idx], self._yn[idx]
        out = {}
        for name, e, scale in (("wide", wide, None), ("narrow", narrow, mask)):
            rank = self.rank_loss(e[iq], e[ip], e[in_], yp, yn)
            xbm = xbm_loss(wide, nb_wide, target, valid, scale)
            out[f"rank_{name}"] = 0.5 * rank
            out[f"xbm_{name}"] = 0.5 * self.xbm_weight * xbm
        loss = out["rank_wide"] + out["rank_narrow"] + out["xbm_wide"] + out["xbm_narrow"]
        log = {k: v.detach() for k, v in out.items()}
        with torch.no_grad():
            log.update(width_in=loss.new_tensor(float(st.width_in)), width_out=loss.new_tensor(float(st.width_out)),
                       neighbours=valid.float().sum(1).mean() if valid.numel() else loss.new_zeros(()),
                       **{f"ads_{k}": v for k, v in ads_stats(st).items()})
        return {"loss": loss, **log}
