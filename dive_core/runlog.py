"""Logging set-up for workflow jobs: everything (logging, warnings, progress bars, stray
prints) goes to the rule's log file, and the job's thread budget is applied."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path


def setup(log_path: str | os.PathLike | None, threads: int | None = None) -> logging.Logger:
    if log_path:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        fh = open(log_path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - lives with the job
        sys.stdout = sys.stderr = fh
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
        force=True,
    )
    logging.captureWarnings(True)
    if threads:
        set_threads(threads)
    return logging.getLogger("dive")


def set_threads(threads: int) -> None:
    """The job's thread budget for PyTorch (and FAISS); MKL's vector math warmed on this thread
    first (:func:`dive_core.numerics.warm_vector_math`: the same bytes in every process)."""
    import torch

    from . import numerics

    numerics.warm_vector_math()
    torch.set_num_threads(int(threads))
    try:
        import faiss

        faiss.omp_set_num_threads(int(threads))
    except ImportError:
        pass
