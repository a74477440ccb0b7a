"""Autoencoder (unsupervised baseline, docs/methods.md#autoencoder): a non-linear bottleneck trained to
reconstruct the corpus embeddings.

    encoder g: d -> hidden -> k     (Linear, ReLU, Linear)
    decoder h: k -> hidden -> d     (Linear, ReLU, Linear)
    L = L_mse = mean_{i,c} (h(g(z_i))_c - z_ic)^2      over the corpus documents (no labels)
    inference: normalise(g(z))

Decisions (left open by the paper; docs/decisions.md): the code layer and the decoder output are linear (ReLU only after the
hidden layers, so the k-dimensional code can take any sign and the decoder can reproduce
negative coordinates); the reconstruction target is the normalised frozen embedding itself and
the MSE is averaged over items and coordinates; an epoch is one pass over the corpus documents
(``data.docs``) in shuffled batches of ``batch_size`` documents; queries and triplets are not
used. Parameters use PyTorch's default Linear initialisation (seeded by ``new_method``).

Logged per epoch: ``reconstruction`` (= the total).
"""

from torch import nn

from ..losses import ReconstructionMSELoss
from .base import TorchMethod, register


@register
class Autoencoder(TorchMethod):
    type = "autoencoder"
    cuda_graph = True  # batch_loss: fixed shapes, no host synchronisation
    stackable = True  # seeds may train together (TorchMethod.fit_together)

    def build(self) -> None:
        d, k, r = self.d, self.k, int(self.hp["hidden"])
        self.net = nn.ModuleDict({
            "encoder": nn.Sequential(nn.Linear(d, r), nn.ReLU(), nn.Linear(r, k)),
            "decoder": nn.Sequential(nn.Linear(k, r), nn.ReLU(), nn.Linear(r, d)),
        }).to(self.device)
        self.rec_loss = ReconstructionMSELoss()

    def n_items(self, data) -> int:
        return int(data.docs.shape[0])

    def batch_loss(self, data, idx):
        x = data.docs[idx]
        rec = self.rec_loss(self.net["decoder"](self.net["encoder"](x)), x)
        return {"loss": rec, "reconstruction": rec.detach()}

    def transform(self, x):
        return self.net["encoder"](x)

    def layers(self, side="document"):
        from ..layers import ReluNet, linear

        enc = self.net["encoder"]
        return [ReluNet(linear(enc[0]), linear(enc[2]))]

    def reconstruction_error(self, x):
        return (self.net["decoder"](self.net["encoder"](x)) - x).norm(dim=-1)
