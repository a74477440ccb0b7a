"""FAISS's SQ8 (ScalarQuantizer QT_8bit): the ranges, the int8 codes and the vectors they decode to."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from .errors import CompressError


def sq8_ranges(vmin: np.ndarray, vmax: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(vmin, vdiff)`` as FAISS's ``ScalarQuantizer`` trains QT_8bit (RS_minmax, rangestat_arg 0)
    from the per-coordinate minimum and maximum of the vectors."""
    vmin = np.asarray(vmin, dtype=np.float32)
    return vmin, (np.asarray(vmax, dtype=np.float32) - vmin).astype(np.float32)


def sq8_encode(y: np.ndarray, vmin: np.ndarray, vdiff: np.ndarray) -> np.ndarray:
    """FAISS's QT_8bit codes of float32 rows, ``int(255 * clip((y - vmin) / vdiff, 0, 1))`` (0 where
    vdiff = 0), stored as ``code - 128`` (int8)."""
    y = np.asarray(y, dtype=np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (y - vmin) / vdiff
    t = np.where(vdiff != 0, t, np.float32(0))
    np.clip(t, np.float32(0), np.float32(1), out=t)
    return ((np.float32(255) * t).astype(np.int16) - 128).astype(np.int8)


def sq8_decode(codes: np.ndarray, vmin: np.ndarray, vdiff: np.ndarray) -> np.ndarray:
    """Float32 rows from stored int8 codes, as FAISS reconstructs QT_8bit:
    ``vmin + (code + 0.5) / 255 * vdiff``."""
    c = np.asarray(codes).astype(np.float32) + np.float32(128.5)
    return (np.asarray(vmin, np.float32) + (c / np.float32(255)) * np.asarray(vdiff, np.float32)).astype(np.float32)


def _ranges_of(record: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    sq8 = record.get("sq8") or {}
    if "vmin" not in sq8 or "vdiff" not in sq8:
        raise CompressError("no SQ8 ranges in the file's dive_compressed metadata")
    return np.asarray(sq8["vmin"], dtype=np.float32), np.asarray(sq8["vdiff"], dtype=np.float32)


def _floats(a: np.ndarray) -> list[float]:
    return [float(v) for v in np.asarray(a, dtype=np.float32)]  # a float32 round-trips through its float
