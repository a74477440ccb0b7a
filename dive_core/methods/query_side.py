"""Query-side adaptation over a label-free document map (docs/methods.md#query-side): the corpus is
compressed by a map that never sees a label, and only queries are adapted to it.

    documents:  c(x) = D(x)                        D: pca | autoencoder | truncate, fitted on the
                                                   corpus documents only (no label), then frozen
    queries:    linear:      u(z) = D(z) + z A             A: d x k, zero at init
                mlp:         u(z) = D(z) + W2 relu(W1 z + b1) + b2   W2, b2: zero at init
                procrustes:  u(z) = D(z) R                 R: k x k orthogonal, I at init
    inference:  normalise(c(x)) for documents, normalise(u(z)) for queries

At initialisation the query map *is* the document map (tested bit for bit), so the untrained method
is the label-free compressor. The document map is built and fitted exactly as the standalone
method of its type at the same seed (for ``autoencoder``: at ``doc_lr`` / ``doc_epochs``), so its
codes equal that method's codes, byte for byte (tested): the compressed corpus does not depend on
any label, and refitting the query side (:func:`refit_query_side`) leaves it unchanged.

Training of the query side (``linear``, ``mlp``), on the triplets, whose documents pass through
the frozen document map (their codes computed once, without gradient)::

    q^ = normalise(u(z_q)),  p^ = normalise(D(x_p)),  n^ = normalise(D(x_n))
    L = L_q + gamma_geo * L_geo(q^, z_q) + anchor * mean_i |u(z_i) - D(z_i)|^2
      L_q = hinge:   mean_i max(0, m - (q^.p^ - q^.n^))            (DIVE's self-limiting hinge)
            softmax: mean_i -log softmax_j(q^_i . D^_j / tau)[p_i] over every document the fit sees
      L_geo: DIVE's Gram distillation on the batch's queries (their frozen Gram matrix)

``anchor`` pulls the query map towards the document map in function space (for ``linear`` with a
PCA document map: ``|(W - P)|`` on the queries' span, the penalty ``lambda |W - P|^2`` of a map
``W`` anchored to PCA's ``P``). It and the number of epochs are the capacity control: a query map
that can move freely learns to point training queries at their positives' fixed codes, which sends
a query whose answer arrived later towards known documents (the arrival study's question).

``procrustes`` is closed-form, as Drift-Adapter's orthogonal alignment: over the unique
(query, positive) pairs of the triplets, with ``q^0 = normalise(D(z_q))`` and ``p^ = normalise(D(x_p))``,

    R = argmax_{R orthogonal} sum_i q^0_i R . p^_i + anchor * n * tr(R) = polar(Q^0' P^ / n + anchor I)

(``polar(M) = U V'`` for ``M = U S V'``), so ``anchor`` shrinks the rotation towards the identity
(``anchor -> inf``: the document map itself). It uses no learning rate and no epochs.

The record of a fit carries ``document_map`` (the document map alone: type, seed, hyperparameters,
state sha256): loading a checkpoint whose document state does not hash to it (the two maps of
different fits) is refused, and a corpus compressed with ``side="document"`` records it as its
compressor, so refitting the query side changes neither the compressed corpus nor its record.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from torch import nn

from ..losses import GeometryDistillationLoss, HingeTripletLoss, QuerySoftmaxLoss
from .base import TorchMethod, method_class, normalize, register

DOC_MAPS = ("pca", "autoencoder", "truncate")
QUERY_MAPS = ("linear", "mlp", "procrustes")


def document_hparams(hp) -> dict:
    """The hyperparameters of the document map's own method type (the autoencoder's at ``doc_lr``
    and ``doc_epochs``; PCA and truncation have none)."""
    if hp["doc_map"] != "autoencoder":
        return {}
    return {"lr": hp["doc_lr"], "epochs": hp["doc_epochs"], "batch_size": hp["batch_size"],
            "hidden": hp["hidden"], "weight_decay": hp["weight_decay"]}


def procrustes(q: torch.Tensor, p: torch.Tensor, anchor: float = 0.0) -> torch.Tensor:
    """``polar(q' p / n + anchor I)`` in float64: the orthogonal ``R`` maximising
    ``sum_i q_i R . p_i + anchor n tr(R)`` (rows of ``q`` and ``p`` paired)."""
    m = q.double().T @ p.double() / max(int(q.shape[0]), 1)
    m = m + float(anchor) * torch.eye(m.shape[0], dtype=m.dtype, device=m.device)
    u, _, vt = torch.linalg.svd(m)
    return (u @ vt).float()


class QueryResidual(nn.Module):
    """``r(z)``: the learned part of the query map, zero at initialisation (``linear``: ``z A``;
    ``mlp``: ``W2 relu(W1 z + b1) + b2``; ``procrustes``: the rotation ``R``, applied by the method)."""

    def __init__(self, kind: str, d: int, k: int, hidden: int):
        super().__init__()
        self.kind = kind
        if kind == "linear":
            self.a = nn.Linear(d, k, bias=False)
            nn.init.zeros_(self.a.weight)
        elif kind == "mlp":
            self.up, self.down = nn.Linear(d, hidden), nn.Linear(hidden, k)
            nn.init.zeros_(self.down.weight)
            nn.init.zeros_(self.down.bias)
        else:
            self.register_buffer("rotation", torch.eye(k))  # cpu: the module moves to the device

    def forward(self, z: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
        """``u(z)`` given ``base = D(z)``."""
        if self.kind == "linear":
            return base + self.a(z)
        if self.kind == "mlp":
            return base + self.down(F.relu(self.up(z)))
        return base @ self.rotation


@register
class QuerySide(TorchMethod):
    type = "query_side"
    asymmetric = True

    def build(self) -> None:
        # the document map first: the same RNG draws as the standalone method at this seed
        self.doc = method_class(self.hp["doc_map"])(self.d, self.k, document_hparams(self.hp), self.seed,
                                                    self.device, self.precision)
        self.net = nn.ModuleDict({"query": QueryResidual(self.hp["query_map"], self.d, self.k,
                                                         int(self.hp["hidden"]))}).to(self.device)
        self.triplet_loss = HingeTripletLoss(float(self.hp["margin"]))
        self.softmax_loss = QuerySoftmaxLoss(float(self.hp["tau"]))
        self.geo_loss = GeometryDistillationLoss()
        self._doc_codes = self._query_base = None

    # -- the two maps ------------------------------------------------------------------
    def transform(self, x):
        return self.doc.transform(x)

    def reconstruction_error(self, x):
        return self.doc.reconstruction_error(x)

    def document_map(self):
        return self.doc

    def transform_query(self, x):
        return self.net["query"](x, self.doc.transform(x))

    def layers(self, side="document"):
        from ..layers import Affine, ReluNet, add, detached, linear

        doc = self.doc.layers()
        if side != "query":
            return doc
        q = self.net["query"]
        if q.kind == "procrustes":
            return [*doc, Affine(detached(q.rotation.T))]
        (base,) = doc  # pca, truncate: one affine map; autoencoder: one ReLU network
        learned = Affine(detached(q.a.weight)) if q.kind == "linear" else ReluNet(linear(q.up), linear(q.down))
        return [add(base, learned)]

    # -- fitting -------------------------------------------------------------------------
    def fit_document_map(self, data, log, progress: bool = True) -> None:
        """Fit the document map on ``data.docs`` (no label), its log rows under phase ``document``."""
        from ..training import TrainLog

        self.doc.fit(data, TrainLog(on_epoch=lambda row: log.add({**row, "phase": "document"})), progress)
        self.meta["document_map"] = self.document_record()

    def document_record(self) -> dict:
        """What the document map is, alone: its type, seed, hyperparameters and state sha256 (the
        provenance of a compressed corpus, which the query side does not change)."""
        return {"type": self.doc.type, "d": self.d, "k": self.k, "seed": int(self.doc.seed),
                "hparams": dict(self.doc.hp), "state_sha256": self.doc.state_sha256()}

    def fit(self, data, log, progress: bool = True) -> None:
        self.fit_document_map(data, log, progress)
        self.fit_query_map(data, log, progress)

    def fit_query_map(self, data, log, progress: bool = True) -> None:
        """Train (or solve, for ``procrustes``) the query side against the frozen document map."""
        with torch.no_grad():
            self._doc_codes = normalize(self.doc.transform(data.docs))
            self._query_base = self.doc.transform(data.queries)
        if self.hp["query_map"] == "procrustes":
            t0 = time.perf_counter()
            pairs = torch.unique(torch.stack([data.t_q, data.t_p], 1), dim=0)  # sorted: one order anywhere
            q0 = normalize(self._query_base[pairs[:, 0]])
            rot = procrustes(q0, self._doc_codes[pairs[:, 1]], float(self.hp["anchor"]))
            self.net["query"].rotation.copy_(rot)
            log.add({"epoch": len(log.rows) + 1, "phase": "query", "pairs": int(pairs.shape[0]),
                     "rotation_from_identity": float((rot - torch.eye(self.k, device=rot.device)).norm()),
                     "total": 0.0, "seconds": time.perf_counter() - t0})
        else:
            self.train_phase(data, log, self.hp["epochs"], self.hp["lr"], self.batch_loss,
                             self.net.parameters(), phase="query", progress=progress)
        self._doc_codes = self._query_base = None

    def doc_codes(self, rows: torch.Tensor | None = None) -> torch.Tensor:
        """The normalised codes of the fitted documents ``rows`` (all of them for None) that the
        query side trains against: fixed here, trainable in :class:`QuerySideKnown`."""
        return self._doc_codes if rows is None else self._doc_codes[rows]

    def doc_terms(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """Extra loss terms on the batch's documents ``rows`` (none here)."""
        return {}

    def batch_loss(self, data, idx):
        tp, tn = data.t_p[idx], data.t_n[idx]
        rows = data.t_q[idx]
        z, base = data.queries[rows], self._query_base[rows]
        u = self.net["query"](z, base)
        q = normalize(u)
        p, n = self.doc_codes(tp), self.doc_codes(tn)
        main = self.softmax_loss(q, self.doc_codes(), tp) if self.hp["loss"] == "softmax" else \
            self.triplet_loss(q, p, n)
        gam, lam = float(self.hp["gamma_geo"]), float(self.hp["anchor"])
        zero = main.new_zeros(())
        geo = gam * self.geo_loss(q, z) if gam else zero
        anchor = lam * (u - base).pow(2).sum(-1).mean() if lam else zero
        extra = self.doc_terms(torch.cat([tp, tn]))
        with torch.no_grad():
            rho = self.triplet_loss.active(q, p, n).float().mean()
        return {"loss": main + geo + anchor + sum(extra.values(), zero), "query": main.detach(), "geo": geo.detach(),
                "anchor": anchor.detach(), **{k: v.detach() for k, v in extra.items()}, "rho": rho}

    # -- state -------------------------------------------------------------------------------
    def state_dict(self):
        return {**{f"doc.{n}": t for n, t in self.doc.state_dict().items()},
                **{f"query.{n}": t for n, t in self.net.state_dict().items()}}

    def load_state_dict(self, state) -> None:
        self.doc.load_state_dict({n[4:]: t for n, t in state.items() if n.startswith("doc.")})
        self.net.load_state_dict({n[6:]: t for n, t in state.items() if n.startswith("query.")})

    def check_loaded(self, source: str = "checkpoint") -> None:
        """Refuse a document map that is not the one the record says the query map was fitted to."""
        rec = self.meta.get("document_map")
        if not isinstance(rec, dict) or "state_sha256" not in rec:
            raise ValueError(f"{source}: a query_side compressor without a document_map record: which document "
                             "map its query side was fitted to is unknown")
        self.doc.seed = int(rec.get("seed", self.seed))  # a refitted query side keeps its document map's seed
        want, have = rec["state_sha256"], self.doc.state_sha256()
        if have != want:
            raise ValueError(f"{source}: the document map (sha256 {have[:12]}...) is not the one its query side "
                             f"was fitted to ({want[:12]}...): the two maps come from different fits")


def refit_query_side(method: QuerySide, data, log, seed: int | None = None, hparams=None,
                     progress: bool = True) -> QuerySide:
    """A new compressor with ``method``'s document map, unchanged, and a query side fitted anew on
    ``data`` (another seed, more training queries, other query-side hyperparameters): the corpus
    compressed by the old and the new one is the same, byte for byte, so an index built from it
    stays valid. ``hparams``: overrides of query-side hyperparameters (never ``doc_*`` ones). The new
    compressor keeps ``method``'s record (its run's dataset, backbone, ...), so the corpus it compresses
    records the same provenance; save it with the refit's own record as further ``meta``."""
    from ..training import set_seed

    over = dict(hparams or {})
    bad = sorted(k for k in over if k.startswith("doc") or k not in method.hyperparameters)
    if bad:
        raise ValueError(f"refit_query_side: {bad} cannot change (document-map keys and unknown keys)")
    seed = method.seed if seed is None else int(seed)
    set_seed(seed)
    new = type(method)(method.d, method.k, {**method.hp, **over}, seed, method.device, method.precision)
    new.doc.load_state_dict(method.doc.state_dict())
    new.doc.seed = method.doc.seed
    # the record of the run that fitted the document map (dataset, backbone, ...: what a compressed
    # corpus names as its compressor's provenance), with the document map's own record
    new.meta = {**method.meta, "document_map": new.document_record()}
    new.fit_query_map(data, log, progress)
    return new


MATCH_TOLERANCE = 1e-4  # squared distance in the document map's space under which a row is a fitted document


@register
class QuerySideKnown(QuerySide):
    """Known documents keep a supervised code; every other document gets the label-free one, in the
    same space (docs/methods.md#query-side)::

        c(x) = D(x) + o_i   if D(x) is the code of fitted document i (squared distance < 1e-4)
        c(x) = D(x)         otherwise (a document that arrived after the fit)

    The offsets ``o_i`` (one k-vector per fitted document, zero at initialisation) are trained with
    the query side on the triplets, whose documents are all fitted ones, with the penalty
    ``offset_anchor * mean_i |o_i|^2`` over the batch's documents: they keep the supervised codes
    near the label-free ones, so the scores of known and arriving documents stay comparable. The
    untrained method is its document map, exactly (tested). Unlike ``query_side``, the document
    side depends on labels for the known documents, by design; its record covers the offsets."""

    type = "query_side_known"

    def build(self) -> None:
        super().build()
        self.net["known"] = _KnownCodes(self.k).to(self.device)

    def fit_query_map(self, data, log, progress: bool = True) -> None:
        with torch.no_grad():
            self.net["known"].reset(self.doc.transform(data.docs))
        super().fit_query_map(data, log, progress)
        self.meta["document_map"] = self.document_record()

    def document_record(self) -> dict:
        rec = super().document_record()
        if "known" in self.net:
            import hashlib

            h = hashlib.sha256(rec["state_sha256"].encode())
            for name, t in sorted(self.net["known"].state_dict().items()):
                h.update(name.encode())
                h.update(t.detach().cpu().contiguous().numpy().tobytes())
            rec["state_sha256"] = h.hexdigest()
            rec["known_documents"] = int(self.net["known"].base.shape[0])
        return rec

    def check_loaded(self, source: str = "checkpoint") -> None:
        rec = self.meta.get("document_map") or {}
        want = rec.get("state_sha256")
        self.doc.seed = int(rec.get("seed", self.seed))
        if want is None or self.document_record()["state_sha256"] != want:
            raise ValueError(f"{source}: the document map and known-document codes are not the ones its query "
                             "side was fitted to: the two maps come from different fits")

    def transform(self, x):
        return self.net["known"](self.doc.transform(x))

    def layers(self, side="document"):
        if side == "query":
            return super().layers(side)
        raise NotImplementedError(
            f"{self.type}: the document map adds a trained offset to a code only within a squared distance of "
            f"{MATCH_TOLERANCE} of a fitted document's code (a nearest-code lookup): a discontinuous map that no "
            "affine, ReLU and normalisation layers compute")

    def doc_codes(self, rows: torch.Tensor | None = None) -> torch.Tensor:
        """The fitted documents' codes with their offsets (which train)."""
        known = self.net["known"]
        return normalize(known.base + known.offsets) if rows is None else \
            normalize(known.base[rows] + known.offsets[rows])

    def doc_terms(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        lo = float(self.hp["offset_anchor"])
        offs = self.net["known"].offsets[rows]
        return {"offset": lo * offs.pow(2).sum(-1).mean() if lo else offs.new_zeros(())}

    def load_state_dict(self, state) -> None:
        n = state["query.known.base"].shape[0]
        self.net["known"].reset(torch.zeros(n, self.k, device=self.device))
        super().load_state_dict(state)


class _KnownCodes(nn.Module):
    """The fitted documents' label-free codes (``base``, for matching) and their trained offsets."""

    def __init__(self, k: int):
        super().__init__()
        self.register_buffer("base", torch.zeros(0, k))  # cpu: the module moves to the device
        self.offsets = nn.Parameter(torch.zeros(0, k))  # cpu: the module moves to the device; reset() sizes it

    def reset(self, base: torch.Tensor) -> None:
        self.base = base.detach().clone()
        self.offsets = nn.Parameter(torch.zeros_like(self.base))

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        """``codes`` plus the offset of the fitted document each row is (if any)."""
        if not len(self.base) or not len(codes):
            return codes
        d = torch.cdist(codes, self.base).pow(2)
        best, i = d.min(dim=1)
        hit = best < MATCH_TOLERANCE
        return codes + self.offsets[i] * hit.unsqueeze(1).to(codes.dtype)
