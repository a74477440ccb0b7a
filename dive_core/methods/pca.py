"""PCA: fit on the corpus embeddings (no labels), project to k, normalise.

Decision: the corpus mean is subtracted before projecting (standard PCA; queries are centred
with the same corpus mean). Components come from an exact SVD in float64, so the fit is
deterministic; their signs do not affect inner-product rankings.
"""

import torch

from .base import Method, register


@register
class PCA(Method):
    type = "pca"

    def build(self) -> None:
        self.mean = torch.zeros(self.d)
        self.components = torch.eye(self.d)[:, : self.k].clone()

    def fit(self, data, log, progress=True) -> None:
        import time

        t0 = time.perf_counter()
        x = data.docs.detach().double().cpu()
        mean = x.mean(0)
        _, s, vh = torch.linalg.svd(x - mean, full_matrices=False)
        self.mean = mean.float()
        self.components = vh[: self.k].T.float().contiguous()
        var = s**2
        log.add({"epoch": 1, "phase": "fit", "explained_variance": float(var[: self.k].sum() / var.sum()),
                 "total": 0.0, "seconds": time.perf_counter() - t0})

    def transform(self, x):
        return (x - self.mean.to(x.device)) @ self.components.to(x.device)

    def state_dict(self):
        return {"mean": self.mean, "components": self.components}

    def load_state_dict(self, state) -> None:
        self.mean, self.components = state["mean"].float(), state["components"].float()
