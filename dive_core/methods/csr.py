"""CSR, Contrastive Sparse Representation (Wen et al., "Beyond Matryoshka: Revisiting Sparse Coding
for Adaptive Representation", ICML 2025, arXiv 2503.01776): a top-k sparse autoencoder over the
frozen embedding, built on sentence-transformers' own ``SparseAutoEncoder`` module and ``CSRLoss``.

    a = W (z - b_pre) + b_lat                W: (H, d), H = expansion x d latents; b_pre, b_lat start at 0
    h_k = relu(top_k(a))                     the k = ``topk`` largest entries of a kept, every other 0
    x^(h) = W^T h + b_pre                    decoder tied to the encoder (the library's TiedTranspose)
    L = L(k) + L(4k) / 8 + beta L_aux + gamma L_con
      L(k)  = mean_{i,c} (x^(h_k(z_i)) - z_i)_c^2;  L(4k): the same from the top 4k latents
      L_aux = NMSE(W^T h_aux + b_pre, z - W^T h_k)   (target detached; NMSE: MSE / the target's batch variance)
              h_aux = relu(top_{k_aux}(a restricted to dead latents)): latents that have not been among the
              top k or top 4k with a value > 1e-5 for more than ``dead_threshold`` top-k calls (the
              library counts calls, two per column and step, not inputs)
      L_con = -mean_i log softmax_j(h_k(q_i) . c_j)[i],  c = [h_k(P); h_k(N)]   (dot product, scale 1)
    inference: h_k(z), an (n, H) vector with at most k non-zeros (Method.compress normalises it)

Two types (docs/methods.md): ``csr`` trains on the workflow's triplets, every term of ``CSRLoss`` over
the columns (query, positive, negative) of a batch: reconstruction averaged over the three columns,
and the contrastive term of the library's default ``SparseMultipleNegativesRankingLoss``, where each
query's candidates are the batch's positives (its own at its row, the others in-batch negatives) and
the batch's negatives (each triplet's negative a hard negative for every query of the batch, as the
library treats a third column). Triplets share a query and positive (the workflow draws several
negatives per pair), so a copy of a query's positive can be an in-batch candidate: it scores as the
positive, which bounds that row's loss below by log 2 but never pushes the pair apart; a query's
other relevant documents are false negatives, as with the library's sampler without NO_DUPLICATES.
``csr_free`` is label-free: the reconstruction terms alone over batches of corpus documents, as the
autoencoder trains; it never reads a query or a label.

Where the library's objects do not take cached embeddings as they are, and the adapter used:

* ``CSRLoss`` calls a ``SparseEncoder`` on tokenised texts. Here the ``SparseAutoEncoder`` module is
  that model: it reads ``features["sentence_embedding"]``, what the backbone's Pooling (and Normalize)
  modules hand it, so each column is passed as ``{"sentence_embedding": rows}``. The loss object holds
  the module, so it is kept outside ``self.net``.
* ``CSRLoss`` always computes its contrastive term, which needs two columns or more; ``csr_free``'s
  batches are one column of documents, so it calls ``CSRReconstructionLoss.compute_loss_from_embeddings``
  (the three terms CSRLoss sums; its ``forward`` refuses standalone use by design).
* The module skips the 4k codes, the auxiliary codes and the decoder only under
  ``torch.inference_mode``; :meth:`CSR.transform` runs that branch's steps itself (prepare,
  ``encode_pre_act``, ``top_k`` without aux), so ``Method.compress`` under ``no_grad`` is the same.
* The tied weight is in the module's state twice (``encoder.weight``, ``decoder.linear.weight``, one
  tensor), which safetensors refuses: :meth:`state_dict` drops the alias, :meth:`load_state_dict`
  restores it.
* ``k_aux`` is capped at H (the library's ``torch.topk`` would fail on a tiny H; MiniLM's H = 1536 > 512).

tests/test_csr.py checks that the code and every loss term equal the library's objects' (a
``SparseEncoder`` around a ``SparseAutoEncoder`` with the same weights, ``CSRLoss``) over several
optimiser steps, dead-latent statistics included. The library's initialisation is kept (PyTorch's
Linear for W, zero biases; the paper's code starts the decoder at unit-norm columns and b_pre at the
data's median). A code of k latents among H <= 65,536 is stored as k (uint16 index, fp16 value)
pairs: :func:`dive_core.sparse.code_bytes`, 4k bytes (``Method.bytes_per_vector``, from the spec's ``active``).

Logged per epoch: ``reconstruction`` (L(k)), ``reconstruction_4k`` (L(4k)/8), ``aux`` (beta L_aux),
``contrastive`` (gamma L_con, csr only), the total, and ``dead`` (share of latents counted dead).
"""

from __future__ import annotations

import torch

from .base import TorchMethod, register

# the weight the library's state holds twice (TiedTranspose(encoder)): dropped from ours
TIED_ALIAS, TIED = "decoder.linear.weight", "encoder.weight"


class _SparseCode(TorchMethod):
    """What ``csr`` and ``csr_free`` share: the module, the code, the reconstruction terms."""

    cuda_graph = False  # the library's loss is not checked for graph capture

    def build(self) -> None:
        from sentence_transformers.sparse_encoder.modules import SparseAutoEncoder

        self.net = SparseAutoEncoder(**self.module_config()).to(self.device)
        self.net.eval()  # training mode (and its dead-latent counting) only inside fit
        self.loss_fn = self.make_loss()

    def module_config(self) -> dict:
        """The ``SparseAutoEncoder`` arguments (its ``config_keys``) of this method."""
        return {"input_dim": self.d, "hidden_dim": self.k, "k": int(self.hp["topk"]),
                "k_aux": min(int(self.hp["k_aux"]), self.k), "normalize": False,
                "dead_threshold": int(self.hp["dead_threshold"])}

    def make_loss(self):
        from sentence_transformers.sparse_encoder.losses import CSRReconstructionLoss

        return CSRReconstructionLoss(model=self.net, beta=float(self.hp["beta"]))

    def columns(self, data, idx) -> list[torch.Tensor]:
        raise NotImplementedError

    def terms(self, columns: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        """The library's loss terms (weighted, as it returns them) over ``columns`` of frozen rows."""
        outputs = [self.net({"sentence_embedding": x}) for x in columns]
        return self.loss_fn.compute_loss_from_embeddings(outputs)

    def batch_loss(self, data, idx):
        out = self.terms(self.columns(data, idx))
        names = {"reconstruction_loss_k": "reconstruction", "reconstruction_loss_4k": "reconstruction_4k",
                 "reconstruction_loss_aux": "aux", "base_loss": "contrastive"}
        logged = {names[key]: value.detach() for key, value in out.items()}
        with torch.no_grad():
            logged["dead"] = (self.net.stats_last_nonzero > self.net.dead_threshold).float().mean()
        return {"loss": sum(out.values()), **logged}

    def transform(self, x):
        x, _ = self.net.prepare(x)
        return self.net.top_k(self.net.encode_pre_act(x), int(self.hp["topk"]), compute_aux=False)[0]

    def layers(self, side="document"):
        raise NotImplementedError(
            f"{self.type}: the code keeps the top {self.hp['topk']} of {self.k} latents, a selection that "
            "Dense, ReLU and Normalize layers do not express; its sentence-transformers form is a SparseEncoder "
            "ending in its SparseAutoEncoder module (dive_core.export.sparse_encoder_modules)")

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {n: t for n, t in self.net.state_dict().items() if n != TIED_ALIAS}

    def load_state_dict(self, state) -> None:
        self.net.load_state_dict({**state, TIED_ALIAS: state[TIED]})


@register
class CSR(_SparseCode):
    """``csr``: CSRLoss on the triplets' (query, positive, negative) columns."""

    type = "csr"

    def make_loss(self):
        from sentence_transformers.sparse_encoder.losses import CSRLoss

        return CSRLoss(self.net, beta=float(self.hp["beta"]), gamma=float(self.hp["gamma"]))

    def columns(self, data, idx):
        q, p, n, _, _ = data.triplet_batch(idx)
        return [q, p, n]

    def terms(self, columns):
        return self.loss_fn([{"sentence_embedding": x} for x in columns])


@register
class CSRFree(_SparseCode):
    """``csr_free``: the reconstruction terms alone, over corpus documents (no label)."""

    type = "csr_free"

    def n_items(self, data) -> int:
        return int(data.docs.shape[0])

    def columns(self, data, idx):
        return [data.docs[idx]]

    def reconstruction_error(self, x):
        return (self.net.decode(self.transform(x)) - x).norm(dim=-1)
