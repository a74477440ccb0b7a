"""Picking hyperparameters on validation results (SPEC section 4): a selection study's candidates
are scored by their mean validation nDCG@10 over the selection datasets, the best is recorded in a
selection record (``results/selection/{backbone}/{study}.json``), and final-stage training jobs of
that backbone apply the pick. A pipeline decision, not a report: no test query is ever read here,
and a pick made on one backbone never trains another backbone's runs."""

from __future__ import annotations

from typing import Mapping, Sequence

from .config import ConfigError
from .report import dataset_mean


def select(study: str, candidates: Mapping[str, Sequence[tuple[str, Mapping]]], results: Sequence[Mapping],
           datasets: Sequence[str], seed: int, groups: Mapping[str, str] | None = None,
           reference: str | None = None, metric: str = "ndcg@10", *, backbone: str) -> dict:
    """Pick, per base method, the candidate with the highest unweighted mean validation
    ``metric`` over ``datasets`` (ties: the earlier candidate). Only select-stage results (no
    test query) of ``backbone`` are accepted. ``reference``: a method reported beside the
    candidates (DIVE)."""
    for r in results:
        if r["stage"] != "select" or r["role"] != "validation":
            raise ValueError(f"selection {study}: result of {r['dataset']}/{r['method']} is stage "
                             f"{r['stage']!r} (role {r['role']!r}); only validation results may select")
        if r["backbone"] != backbone:
            raise ValueError(f"selection {study} of backbone {backbone!r}: result of {r['dataset']}/{r['method']} "
                             f"is backbone {r['backbone']!r}; a backbone selects on its own runs only")
    score = {(r["method"], r["dataset"]): r["metrics"][metric] for r in results if r["seed"] == seed}

    def summarize(method):
        per = {}
        for ds in datasets:
            if (method, ds) not in score:
                raise ValueError(f"selection {study}: no validation result for {method} on {ds} (seed {seed})")
            per[ds] = score[(method, ds)]
        return {"method": method, "per_dataset": per, "mean": dataset_mean(per, groups or {})}

    out = {"study": study, "backbone": backbone, "metric": metric, "datasets": list(datasets), "seed": seed,
           "methods": {}}
    for base, cands in candidates.items():
        rows = [{**summarize(name), "overrides": dict(over)} for name, over in cands]
        best = max(range(len(rows)), key=lambda i: (rows[i]["mean"], -i))
        out["methods"][base] = {"candidates": rows,
                                "pick": {k: rows[best][k] for k in ("method", "overrides", "mean")}}
    if reference:
        out["reference"] = summarize(reference)
    return out


def apply_selection(hp: Mapping, selection: Mapping, ref: str, backbone: str) -> tuple[dict, dict]:
    """``(hp with the picked overrides, the overrides)`` of ``ref`` = '<study>/<base>' from a
    selection record made on ``backbone`` (a record of another backbone is refused)."""
    if selection.get("backbone") != backbone:
        raise ConfigError(f"selection JSON of {selection.get('study')!r} was made on backbone "
                          f"{selection.get('backbone')!r}; a run of backbone {backbone!r} may only use its own "
                          f"backbone's pick (results/selection/{backbone}/{selection.get('study')}.json)")
    base = str(ref).partition("/")[2]
    try:
        over = selection["methods"][base]["pick"]["overrides"]
    except KeyError:
        raise ConfigError(f"selection JSON of {selection.get('study')!r} has no pick for {base!r}") from None
    return {**hp, **over}, dict(over)
