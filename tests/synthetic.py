"""A tiny, separable retrieval problem shared by the method tests.

Documents live near an 8-dimensional random subspace of R^32 (spread over all coordinates, so
the first k raw coordinates - what `truncate` keeps - mix signal and noise); each query is a
noisy copy of its single relevant document. Any method that learns the subspace (PCA, an
autoencoder, a supervised adapter) retrieves far better at k = 8 than truncation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dive_core.metrics import evaluate, mean_metrics
from dive_core.retrieval import search
from dive_core.training import FitData


@dataclass
class Problem:
    d: int
    k: int
    docs: np.ndarray
    doc_ids: list[str]
    train: FitData
    val_queries: np.ndarray
    val_ids: list[str]
    val_qrels: dict

    def score(self, method) -> float:
        """Validation nDCG@10 of ``method`` (compress -> exact search -> pytrec_eval)."""
        run = search(method.compress(self.docs), self.doc_ids, method.compress(self.val_queries),
                     self.val_ids, top_k=10, use_gpu=False)
        return mean_metrics(evaluate(self.val_qrels, run))["ndcg@10"]


def _norm(x):
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def make_problem(seed: int = 0, d: int = 32, k: int = 8, rank: int = 8, n_docs: int = 300,
                 n_train: int = 150, n_val: int = 60, n_neg: int = 4, doc_noise: float = 0.35,
                 query_noise: float = 0.3) -> Problem:
    rng = np.random.default_rng(seed)
    basis, _ = np.linalg.qr(rng.standard_normal((d, rank)))
    docs = _norm(rng.standard_normal((n_docs, rank)) @ basis.T
                 + doc_noise * rng.standard_normal((n_docs, d)) / np.sqrt(d / rank))

    def queries(n):
        pos = rng.integers(0, n_docs, size=n)
        signal = (docs[pos] @ basis) @ basis.T  # in-subspace part of the positive
        q = _norm(signal + query_noise * rng.standard_normal((n, rank)) @ basis.T / np.sqrt(rank)
                  + doc_noise * rng.standard_normal((n, d)) / np.sqrt(d / rank))
        return q, pos

    tq, tpos = queries(n_train)
    vq, vpos = queries(n_val)
    t_q = np.repeat(np.arange(n_train), n_neg)
    t_p = np.repeat(tpos, n_neg)
    t_n = rng.integers(0, n_docs, size=n_train * n_neg)
    t_n = np.where(t_n == t_p, (t_n + 1) % n_docs, t_n)
    ones = np.ones(len(t_q), np.float32)
    train = FitData.from_arrays(docs, tq, t_q, t_p, t_n, ones, 0 * ones)
    doc_ids = [f"d{i}" for i in range(n_docs)]
    val_ids = [f"q{i}" for i in range(n_val)]
    qrels = {q: {doc_ids[p]: 1} for q, p in zip(val_ids, vpos)}
    return Problem(d, k, docs, doc_ids, train, vq, val_ids, qrels)


# Small-but-real training settings for method tests (shared keys of the `training:` section).
# The configured values that small inputs cannot hold, per method type: MRL's smallest prefix (k = 8
# here) and CSR's 64 active latents (H = 4d >= 256 needed; d = 32 here).
SMALL_INPUTS = {"mrl": {"min_prefix": 4}, "csr": {"topk": 4}, "csr_free": {"topk": 4}}
FAST = {"epochs": 15, "batch_size": 32, "hidden": 64, "weight_decay": 0.01}
