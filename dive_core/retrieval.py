"""Exact inner-product search with FAISS (flat index; a GPU index when a GPU is present)."""

from __future__ import annotations

from typing import Sequence

import numpy as np


def build_index(docs: np.ndarray, use_gpu: bool | str = "auto"):
    import faiss

    docs = np.ascontiguousarray(docs, dtype=np.float32)
    index = faiss.IndexFlatIP(docs.shape[1])
    if use_gpu and hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0:
        res = faiss.StandardGpuResources()
        index = faiss.index_cpu_to_gpu(res, 0, index)
        index._gpu_resources = res  # keep alive
    elif use_gpu is True:
        raise RuntimeError("a GPU FAISS index was requested but no GPU is available")
    index.add(docs)
    return index


def search(
    docs: np.ndarray,
    doc_ids: Sequence[str],
    queries: np.ndarray,
    query_ids: Sequence[str],
    top_k: int = 100,
    exclude_self: bool = True,
    batch_size: int = 4096,
    use_gpu: bool | str = "auto",
) -> dict[str, dict[str, float]]:
    """Top ``top_k`` documents per query by inner product, as ``{qid: {doc_id: score}}``.

    Hits whose document id equals the query id are dropped (BEIR convention for ArguAna /
    Quora / CQADupStack, where a query also appears in the corpus) before cutting to ``top_k``.
    """
    if docs.shape[1] != queries.shape[1]:
        raise ValueError(f"dimension mismatch: docs {docs.shape[1]} vs queries {queries.shape[1]}")
    index = build_index(docs, use_gpu)
    k = min(len(doc_ids), top_k + (1 if exclude_self else 0))
    q = np.ascontiguousarray(queries, dtype=np.float32)
    run: dict[str, dict[str, float]] = {}
    for start in range(0, len(query_ids), batch_size):
        scores, idx = index.search(q[start:start + batch_size], k)
        for row, qid in enumerate(query_ids[start:start + batch_size]):
            hits: dict[str, float] = {}
            for s, i in zip(scores[row], idx[row]):
                if i < 0:
                    continue
                did = doc_ids[i]
                if exclude_self and did == qid:
                    continue
                hits[did] = float(s)
                if len(hits) == top_k:
                    break
            run[qid] = hits
    return run
