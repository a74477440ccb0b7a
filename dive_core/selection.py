"""Picking hyperparameters on validation results (docs/protocol.md#validation-only-selection): a selection study's candidates
are scored by their mean validation nDCG@10 over the selection datasets, the best is recorded in a
selection record (``results/selection/{backbone}/{study}.json``), and final-stage training jobs of
that backbone apply the pick. A pipeline decision, not a report: no test query is ever read here,
and a pick made on one backbone never trains another backbone's runs.

The code to store at a byte budget is picked here too (:func:`pick_code`), from a
``frontier_validation`` record's rows: the frontier's codes scored on validation queries."""

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


# --------------------------------------------------------------------------- codes at a byte budget
BUDGETS = (8, 16, 32, 64, 256)  # bytes per vector of the frontier's verdict, and a budget study's default
FAMILIES = ("label-free", "supervised")


def dim_label(row: Mapping, unit: str = "") -> str:
    """A frontier row's dimension: ``64`` (``unit``: ``64d``), or for a k-sparse code ``16 of 1536``
    (active of latents; ``16 of 1536 latents`` with a unit)."""
    if row.get("active"):
        return f"{row['active']} of {row['dim']}" + (" latents" if unit else "")
    return f"{row['dim']}{unit}"


def index_alone(row: Mapping) -> bool:
    """Whether a frontier row's search needs nothing outside its index: every encoding but
    ``binary_rescore``, which also reads float32 vectors kept outside it (on disk)."""
    return row["encoding"] != "binary_rescore"


def family(row: Mapping) -> str:
    """``supervised``: the row's map was trained on relevance judgments (mrl, search_adaptor, smec,
    dive, dive-pca, csr, ...); ``label-free``: frozen, truncate, PCA, the autoencoder, csr-free,
    whatever the encoding (the quantizers fit no label either)."""
    return "supervised" if row["supervised"] else "label-free"


def code_label(row: Mapping) -> str:
    """``dive 64d opq16``, ``csr-k8 8 of 1536 sparse``."""
    return f"{row['method']} {dim_label(row, 'd' if not row.get('active') else '')} {row['encoding']}"


def code_key(row: Mapping) -> tuple:
    """What names one code across seeds: method, dimension, active latents and encoding."""
    return row["method"], row["dim"], row.get("active"), row["encoding"]


#: the pick rule's tie: a code whose paired validation deficit against the best is at most this many
#: standard errors of that deficit is level with it (:func:`pick_code`)
TIE_SE = 1.0


def level_with(best: Mapping, row: Mapping, metric: str = "ndcg@10", z: float = TIE_SE) -> bool:
    """Whether ``row`` is level with ``best`` on the queries both were scored on: the mean of the paired
    per-query deficit ``best - row`` is at most ``z`` standard errors of that mean (a code is level
    with itself)."""
    a, b = best["per_query"][metric], row["per_query"][metric]
    if len(a) != len(b):
        raise ValueError(f"rows {code_label(best)} and {code_label(row)} hold {len(a)} and {len(b)} per-query "
                         "scores: not the same queries")
    d = [x - y for x, y in zip(a, b)]
    n = len(d)
    mean = sum(d) / n if n else 0.0
    sd = (sum((x - mean) ** 2 for x in d) / (n - 1)) ** 0.5 if n > 1 else 0.0
    return mean <= z * sd / n ** 0.5 + 1e-12


def within_latency(rows: Sequence[Mapping], limit: float | None, key: str) -> tuple[list[Mapping], list[dict]]:
    """``(kept, dropped)``: the rows whose measured ``latency_ms`` (one query's search at k = 10 on one
    thread, :func:`dive_core.efficiency.single_query_ms`) is at most ``limit`` ms (None: every row, none
    dropped), and each dropped code's label and latency. ``key`` names the limit where it was given
    (``--max-latency-ms``, a config key): a row measured without latency, or a limit no code meets
    (the fastest named), is refused with it."""
    if limit is None:
        return list(rows), []
    unmeasured = [r for r in rows if r.get("latency_ms") is None]
    if unmeasured:
        raise ValueError(f"{key} {limit:g}: {code_label(unmeasured[0])} (and {len(unmeasured) - 1} more codes) "
                         "was scored without a latency measurement: rerun the job that scored it with the limit set")
    kept = [r for r in rows if r["latency_ms"] <= limit]
    if not kept:
        fastest = min(rows, key=lambda r: r["latency_ms"])
        raise ValueError(f"{key} {limit:g}: no code meets it on this machine; the fastest, {code_label(fastest)}, "
                         f"takes {fastest['latency_ms']:.3f} ms a query")
    return kept, [{"code": code_label(r), "latency_ms": r["latency_ms"]} for r in rows if r["latency_ms"] > limit]


def candidates(rows: Sequence[Mapping], budget: int, fam: str | None = None) -> list[Mapping]:
    """The rows of at most ``budget`` bytes per vector that need nothing outside the index
    (:func:`index_alone`), of family ``fam`` (:func:`family`; None: either)."""
    return [x for x in rows if index_alone(x) and x["bytes_per_vector"] <= budget
            and (fam is None or family(x) == fam)]


def pick_code(rows: Sequence[Mapping], budget: int, fam: str | None = None, metric: str = "ndcg@10") -> Mapping | None:
    """The code to store in ``budget`` bytes a vector, read from ``rows`` scored on validation queries
    (never the test queries). Among the :func:`candidates`:

    1. the map: the method and dimension of the code of highest validation ``metric`` (the best);
    2. among that map's codes :func:`level_with` the best (within :data:`TIE_SE` standard errors of the
       paired per-query difference), the one of most bytes, then of highest ``metric``.

    Step 2 reads the budget as a cap to fill: codes of one map tied on validation differ by their
    quantization error, which more bytes can only lower on average, while validation queries too few
    to tell them apart make the best of them partly chance (docs/protocol.md, "The budget study").
    None when no code fits."""
    fits = candidates(rows, budget, fam)
    if not fits:
        return None
    best = max(fits, key=lambda x: (x[metric], -x["bytes_per_vector"]))
    same_map = [x for x in fits if (x["method"], x["dim"], x.get("active")) == (best["method"], best["dim"],
                                                                                 best.get("active"))]
    level = [x for x in same_map if level_with(best, x, metric)]
    return max(level, key=lambda x: (x["bytes_per_vector"], x[metric]))


