"""Picking hyperparameters on validation results (docs/protocol.md#validation-only-selection): a selection study's candidates
are scored by their mean validation nDCG@10 over the selection datasets, the best is recorded in a
selection record (``results/selection/{backbone}/{study}.json``), and final-stage training jobs of
that backbone apply the pick. A pipeline decision, not a report: no test query is ever read here,
and a pick made on one backbone never trains another backbone's runs."""

from __future__ import annotations

import math
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
    check_validation(study, results, backbone)
    score = {(r["method"], r["dataset"]): r["metrics"][metric] for r in results if r["seed"] == seed}

    def summarize(method):
        per = per_dataset(study, score, method, datasets, seed)
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
        raise ConfigError(f"selection JSON of {selection.get('study')!r} has no pick for {base!r}"
                          + (" (an arrival_variants record covers the variants that an enabled experiment uses: "
                             f"add a method picked from arrival_variants/{base} to one)"
                             if selection.get("study") == "arrival_variants" else "")) from None
    return {**hp, **over}, dict(over)


ARRIVAL_CRITERION = (
    "Per base method, among its candidates (each refitted under the arrival protocol, select stage: trained on "
    "the train role's known documents, scored on the validation queries): the highest mean over the selection "
    "datasets of validation nDCG@10 on the `new` stratum (every relevant document arrives after training), "
    "among the candidates whose mean validation nDCG@10 on the `known` stratum is at least the best "
    "reference's minus the tolerance; if none is, the candidate with the highest `known` score. Ties: the "
    "earlier candidate. No test query's score is read. The arrival split itself (which documents are known) "
    "is fixed before any fit from the validation and the test judgments alike, as the query split is: the "
    "select-stage fits train on the known documents of that one split.")


def select_arrival(candidates: Mapping[str, Sequence[tuple[str, Mapping]]], results: Sequence[Mapping],
                   strata: Sequence[Mapping[str, float]], datasets: Sequence[str], seed: int,
                   references: Sequence[str], tolerance: float = 0.01, groups: Mapping[str, str] | None = None,
                   metric: str = "ndcg@10", *, backbone: str) -> dict:
    """The ``arrival_variants`` pick (:data:`ARRIVAL_CRITERION`). ``strata``: per result (same
    order) its validation ``metric`` on each stratum (:func:`dive_core.evaluation.stratum_means`)."""
    study = "arrival_variants"
    check_validation(study, results, backbone)
    score = {}
    for r, s in zip(results, strata, strict=True):
        if r["seed"] != seed:
            continue
        for c in ("known", "new"):
            if math.isnan(s[c]):
                raise ValueError(f"selection {study}: the validation queries of {r['dataset']} (results/"
                                 f"{r['dataset']}/arrival.json) have an empty `{c}` "
                                 "stratum; the pick needs both (raise arrival.new_query_share, or change "
                                 "arrival.fraction)")
        # an empty stratum (mixed) has no score: null in the record
        score[(r["method"], r["dataset"])] = {c: (None if math.isnan(v) else v) for c, v in s.items()} | {
            "all": r["metrics"][metric]}

    def summarize(method):
        per = per_dataset(study, score, method, datasets, seed)
        means = {c: dataset_mean({ds: v[c] for ds, v in per.items()}, groups or {}) for c in ("all", "known", "new")}
        return {"method": method, "per_dataset": per, "mean_new": means["new"], "mean_known": means["known"],
                "mean_all": means["all"]}

    refs = [summarize(m) for m in references]
    bar = max(r["mean_known"] for r in refs) - float(tolerance) if refs else float("-inf")
    out = {"study": study, "backbone": backbone, "metric": metric, "datasets": list(datasets), "seed": seed,
           "criterion": ARRIVAL_CRITERION, "tolerance": float(tolerance), "known_bar": bar, "references": refs,
           "methods": {}}
    for base, cands in candidates.items():
        rows = [{**summarize(name), "overrides": dict(over)} for name, over in cands]
        for row in rows:
            row["qualifies"] = bool(row["mean_known"] >= bar)
        pool = [i for i, row in enumerate(rows) if row["qualifies"]]
        if pool:
            best = max(pool, key=lambda i: (rows[i]["mean_new"], -i))
        else:
            best = max(range(len(rows)), key=lambda i: (rows[i]["mean_known"], -i))
        out["methods"][base] = {"candidates": rows, "pick": {
            "method": rows[best]["method"], "overrides": rows[best]["overrides"], "mean": rows[best]["mean_new"],
            "mean_known": rows[best]["mean_known"], "qualified": bool(pool)}}
    return out


def per_dataset(study: str, score: Mapping[tuple[str, str], object], method: str, datasets: Sequence[str],
                seed: int) -> dict:
    """``{dataset: score}`` of ``method``; a dataset without a validation result is refused."""
    per = {}
    for ds in datasets:
        if (method, ds) not in score:
            raise ValueError(f"selection {study}: no validation result for {method} on {ds} (seed {seed})")
        per[ds] = score[(method, ds)]
    return per


def check_validation(study: str, results: Sequence[Mapping], backbone: str) -> None:
    """Refuse any result that is not a select-stage (validation) result of ``backbone``."""
    for r in results:
        if r["stage"] != "select" or r["role"] != "validation":
            raise ValueError(f"selection {study}: result of {r['dataset']}/{r['method']} is stage "
                             f"{r['stage']!r} (role {r['role']!r}); only validation results may select")
        if r["backbone"] != backbone:
            raise ValueError(f"selection {study} of backbone {backbone!r}: result of {r['dataset']}/{r['method']} "
                             f"is backbone {r['backbone']!r}; a backbone selects on its own runs only")
