"""The drift guard: what a compressor's fit saw, and how far the vectors it is asked to compress
have moved from it (docs/compressors.md#the-drift-guard).

At training, :func:`fit_statistics` records, over the documents the fit saw (normalised frozen
vectors), into the checkpoint's record (``meta["fit_statistics"]``):

* ``mean``: their mean (d values), and ``total_variance``: the mean of ``|x - mean|^2``;
* ``code_min`` / ``code_max``: the per-coordinate range of their compressed codes (the document
  side, L2-normalised: what an index stores, and what SQ8 calibrated on them would clip to);
* ``reconstruction_error``: for a compressor with a label-free document map (PCA, the autoencoder,
  truncation, a query_side's document map), quantiles of ``|x - reconstruction(x)|`` over them;
* ``reconstruction_heldout``: how much larger that error is on documents the map was not fitted on.
  Over the fitted documents it is a training error: an autoencoder reconstructs its own documents
  about twice as well as others of the same collection. A twin of the document map (same type,
  hyperparameters and seed) is fitted on a seeded half of the documents; ``median_ratio`` is its
  median error on the other half over that on its own half. The guard compares an input's median
  error with the fit's times this ratio: what documents of the same collection that the map never
  saw would give. The twin is thrown away; the compressor is not changed.

``dive-compress`` feeds every row it compresses to a :class:`DriftMonitor` and reports, per input
set: the share of vectors with a code outside the fit's ranges, the share of code values outside
them (the share of SQ8 codes that saturate under ranges calibrated on the fit's documents), the
distance between the input's mean and the fit's (and that distance over what sampling alone would
give, ``mean_shift_z``), and the reconstruction-error quantiles against the fit's. It warns above
:data:`THRESHOLDS`.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

QUANTILES = (0.5, 0.9, 0.99)
#: warn when the share of code values outside the fit's per-coordinate ranges exceeds 1% (in
#: distribution, a coordinate of a new vector exceeds the extremes of n fitted ones with probability
#: about 2 / (n + 1): 0.05% for 4,000 documents), when the median reconstruction error exceeds by
#: more than 20% the fit's times its held-out ratio (what unseen documents of the same collection
#: give), or when the input's mean lies further from the fit's than 3 times what drawing n vectors
#: of the fit's own distribution would give: for n vectors drawn independently
#: from it, E|mean_n - mean|^2 = total_variance / n, so ``mean_shift_z = |mean_n - mean| /
#: sqrt(total_variance / n)`` is about 1 (high-dimensional vectors: it concentrates there)
THRESHOLDS = {"outside_values_share": 0.01, "reconstruction_median_ratio": 1.2, "mean_shift_z": 3.0}
CHUNK = 65536
#: the held-out calibration's split of the fitted documents: a generator seeded by the fit's seed + this
HELDOUT_SEED_OFFSET = 104729
HELDOUT_MIN_DOCS = 20  # fewer fitted documents: no calibration (the ratio would be noise)
#: a code value counts as outside the fit's range only beyond it by more than this: the same document,
#: normalised in another process or order, may land a float32 rounding step outside (codes lie in [-1, 1])
RANGE_TOLERANCE = 1e-5


def _quantiles(errors: np.ndarray) -> dict[str, float]:
    return {f"q{int(q * 100)}": float(np.quantile(errors, q)) for q in QUANTILES}


def _reconstruction_errors(method, x: np.ndarray) -> np.ndarray | None:
    """``method.reconstruction_error`` of normalised rows ``x`` as an array (None: no reconstruction)."""
    import torch

    with torch.no_grad():
        err = method.reconstruction_error(torch.as_tensor(np.asarray(x, dtype=np.float32), device=method.device))
    return None if err is None else err.float().cpu().numpy()


def fit_statistics(method, docs) -> dict[str, Any]:
    """The statistics of the documents a fit saw (``docs``: (n, d) normalised frozen vectors, a
    tensor or an array), in chunks."""
    x = docs.detach().cpu().numpy() if hasattr(docs, "detach") else np.asarray(docs, dtype=np.float32)
    n = int(x.shape[0])
    total = np.zeros(x.shape[1], dtype=np.float64)
    squares = 0.0
    lo = np.full(method.k, np.inf, dtype=np.float32)
    hi = np.full(method.k, -np.inf, dtype=np.float32)
    errors = []
    for s in range(0, n, CHUNK):
        xb = np.ascontiguousarray(x[s:s + CHUNK], dtype=np.float32)
        total += xb.sum(0, dtype=np.float64)
        squares += float(np.square(xb, dtype=np.float64).sum())
        codes, err = method.compress(xb), _reconstruction_errors(method, xb)
        np.minimum(lo, codes.min(0), out=lo)
        np.maximum(hi, codes.max(0), out=hi)
        if err is not None:
            errors.append(err)
    mean = total / max(n, 1)
    return {"n": n, "mean": [float(v) for v in mean], "total_variance": squares / max(n, 1) - float(mean @ mean),
            "code_min": [float(v) for v in lo],
            "code_max": [float(v) for v in hi],
            "reconstruction_error": _quantiles(np.concatenate(errors)) if errors else None,
            "reconstruction_heldout": heldout_calibration(method, x) if errors else None}


def heldout_calibration(method, x: np.ndarray) -> dict[str, Any] | None:
    """Split-half calibration of the reconstruction error (module docstring): a twin of
    ``method``'s document map fitted on a seeded half of the fitted documents ``x``; its median error
    on the other half over that on its own half. None below ``HELDOUT_MIN_DOCS`` documents."""
    from ..methods import new_method
    from ..training import FitData, TrainLog, preserved_rng

    n = int(x.shape[0])
    if n < HELDOUT_MIN_DOCS:
        return None
    dm = method.document_map()
    order = np.random.default_rng(int(dm.seed) + HELDOUT_SEED_OFFSET).permutation(n)
    own, other = np.sort(order[: n // 2]), np.sort(order[n // 2:])
    half = FitData.documents(x[own], dm.device)
    with preserved_rng():  # the twin's seeding must not move the caller's generators
        twin = new_method(dm.type, dm.d, dm.k, dm.hp, int(dm.seed), dm.device, dm.precision)
        twin.fit(half, TrainLog(), progress=False)
    on_own = float(np.quantile(_reconstruction_errors(twin, x[own]), 0.5))
    on_other = float(np.quantile(_reconstruction_errors(twin, x[other]), 0.5))
    return {"n_fit": len(own), "n_heldout": len(other), "q50_fit": on_own, "q50_heldout": on_other,
            "median_ratio": on_other / on_own if on_own > 0 else math.inf}


class DriftMonitor:
    """Accumulates one input set's rows (raw; normalised here) and their compressed codes against
    a fit's statistics; :meth:`report` gives the figures and the warnings."""

    def __init__(self, method, stats: Mapping[str, Any], side: str = "document"):
        self.method, self.stats, self.side = method, stats, side
        self.lo = np.asarray(stats["code_min"], dtype=np.float32) - RANGE_TOLERANCE
        self.hi = np.asarray(stats["code_max"], dtype=np.float32) + RANGE_TOLERANCE
        self.n = self.rows_out = self.values_out = 0
        self.total = np.zeros(len(stats["mean"]), dtype=np.float64)
        self.errors: list[np.ndarray] = []

    def update(self, x: np.ndarray, codes: np.ndarray) -> None:
        from ..embeddings import l2_normalize

        if not len(x):
            return
        xn = l2_normalize(np.asarray(x, dtype=np.float32))
        outside = (codes < self.lo) | (codes > self.hi)
        self.n += len(x)
        self.rows_out += int(outside.any(1).sum())
        self.values_out += int(outside.sum())
        self.total += xn.sum(0, dtype=np.float64)
        if self.stats.get("reconstruction_error") is not None:
            self.errors.append(_reconstruction_errors(self.method, xn))

    def report(self) -> dict[str, Any]:
        n = max(self.n, 1)
        out = {"n": self.n, "side": self.side, "fit_n": self.stats["n"],
               "outside_rows_share": self.rows_out / n,
               "outside_values_share": self.values_out / (n * len(self.lo)),
               "mean_shift": float(np.linalg.norm(self.total / n - np.asarray(self.stats["mean"]))),
               "mean_shift_z": None, "reconstruction_error": None, "thresholds": dict(THRESHOLDS), "warnings": []}
        if self.stats.get("total_variance"):
            out["mean_shift_z"] = out["mean_shift"] / math.sqrt(self.stats["total_variance"] / n)
            if out["mean_shift_z"] > THRESHOLDS["mean_shift_z"]:
                out["warnings"].append(
                    f"the mean of these vectors lies {out['mean_shift']:.4f} from the fit's, {out['mean_shift_z']:.1f}x "
                    f"what {self.n} vectors drawn from the fitted documents' distribution would give (threshold "
                    f"{THRESHOLDS['mean_shift_z']}x): they come from elsewhere")
        fit_err = self.stats.get("reconstruction_error")
        if fit_err is not None and self.errors:
            mine = _quantiles(np.concatenate(self.errors))
            ratio = mine["q50"] / fit_err["q50"] if fit_err["q50"] > 0 else math.inf
            # against what unseen documents of the fitted collection give, where the record has it
            heldout = (self.stats.get("reconstruction_heldout") or {}).get("median_ratio")
            expected = fit_err["q50"] * heldout if heldout else fit_err["q50"]
            judged = mine["q50"] / expected if expected > 0 else math.inf
            out["reconstruction_error"] = {"fit": dict(fit_err), "input": mine, "median_ratio": ratio,
                                           "heldout_ratio": heldout, "expected_q50": expected,
                                           "median_ratio_expected": judged}
            if judged > THRESHOLDS["reconstruction_median_ratio"]:
                against = (f"{judged:.2f}x the {expected:.4f} that documents of the fitted collection unseen by the "
                           f"map give (the fit's {fit_err['q50']:.4f} x {heldout:.2f}, held-out calibration)"
                           if heldout else f"{judged:.2f}x the fit's {fit_err['q50']:.4f}")
                out["warnings"].append(
                    f"median reconstruction error {mine['q50']:.4f} is {against} (threshold "
                    f"{THRESHOLDS['reconstruction_median_ratio']}x): these vectors lie off the subspace the "
                    "document map was fitted on")
        if out["outside_values_share"] > THRESHOLDS["outside_values_share"]:
            out["warnings"].append(
                f"{out['outside_values_share']:.2%} of code values lie outside the fit's per-coordinate ranges "
                f"(threshold {THRESHOLDS['outside_values_share']:.0%}; {out['outside_rows_share']:.1%} of vectors): "
                "SQ8 calibrated on the fitted documents would saturate them")
        return out


def describe(report: Mapping[str, Any], where: str) -> str:
    """The report as lines for a terminal."""
    lines = [f"drift of {where} ({report['n']} vectors, {report['side']} side) against the fit's {report['fit_n']} "
             f"documents: {report['outside_rows_share']:.2%} of vectors and {report['outside_values_share']:.3%} of "
             f"code values outside the fit's ranges; mean shift {report['mean_shift']:.4f}"
             + (f" ({report['mean_shift_z']:.1f}x sampling)" if report.get("mean_shift_z") is not None else "")]
    rec = report["reconstruction_error"]
    if rec:
        q = lambda d: " / ".join(f"{d[k]:.4f}" for k in ("q50", "q90", "q99"))  # noqa: E731
        lines.append(f"  reconstruction error q50 / q90 / q99: {q(rec['input'])} (fit: {q(rec['fit'])}; median "
                     f"ratio {rec['median_ratio']:.3f}"
                     + (f", {rec['median_ratio_expected']:.3f} against the held-out expectation "
                        f"{rec['expected_q50']:.4f}" if rec.get("heldout_ratio") else "") + ")")
    lines += [f"  WARNING: {w}" for w in report["warnings"]]
    return "\n".join(lines)
