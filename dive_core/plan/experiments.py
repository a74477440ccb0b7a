"""The studies (``experiments.<name>``) with their defaults, their backbones, the runs of each,
the runs behind the headline results and the efficiency and frontier studies, and the titles
of the study tables."""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from ..config import ConfigError
from .grammar import OWN_JSON_STUDIES
from ..methods.specs import spec
from .methods import method_k, method_type


# --------------------------------------------------------------------------- studies and runs
def experiment(config: Mapping, name: str) -> dict:
    """An experiment with its defaults filled in: all configured datasets and seeds, the
    ``final`` stage (test queries), the ``primary`` dimension, the default backbone, study
    ``main``."""
    exps = config.get("experiments") or {}
    if name not in exps:
        raise ConfigError(f"config: no experiment {name!r} under experiments: (have {sorted(exps)})")
    exp = dict(exps[name])
    own_seeds = "seeds" in exp
    exp.setdefault("study", "main")
    exp.setdefault("datasets", list(config["datasets"]))
    exp.setdefault("seeds", list(config["seeds"]))
    exp.setdefault("stage", "final")
    exp.setdefault("dim", "primary")
    exp.setdefault("enabled", True)
    exp.setdefault("methods", [])
    if exp["study"] == "budget":
        from ..selection import BUDGETS  # the frontier verdict's

        exp.setdefault("budgets", list(BUDGETS))
        exp.setdefault("arrival", None)  # an arrival study's name: pick among its codes (arrival_codes)
        exp.setdefault("stratum", "all")  # the validation queries an arrival budget study picks on
        exp.setdefault("max_latency_ms", None)  # ms a query at k = 10 on one thread: slower codes are no candidates
        src = exp["arrival"]
        if src and not own_seeds and src in exps and src != name:  # the arrival study's codes have one seed
            exp["seeds"] = experiment(config, src)["seeds"][:1]
    exp["backbones"] = experiment_backbones(config, name, exp)
    return exp


def experiment_backbones(config: Mapping, name: str, exp: Mapping) -> list[str]:
    """An experiment's ``backbones`` (default: ``[backbone]``), each defined under ``backbones:``;
    an unknown one is refused, naming its key."""
    if not exp.get("backbones"):
        return [defined_backbone(config, config["backbone"], "backbone")]
    return [defined_backbone(config, b, f"experiments.{name}.backbones:") for b in exp["backbones"]]


def defined_backbone(config: Mapping, backbone: str, where: str) -> str:
    """``backbone`` if it is defined under ``backbones:``; else a ConfigError that names ``where``."""
    if backbone not in config["backbones"]:
        raise ConfigError(f"config: {where} {backbone!r} is not defined under backbones")
    return backbone


def enabled_experiments(config: Mapping) -> list[str]:
    return [n for n in (config.get("experiments") or {}) if experiment(config, n)["enabled"]]


def experiment_runs(config: Mapping, name: str) -> list[dict]:
    """The (dataset, backbone, method, k, stage, seed) runs of an experiment; none for a study over
    its own measurement JSONs (efficiency, frontier)."""
    exp = experiment(config, name)
    if exp["study"] in OWN_JSON_STUDIES:
        return []
    return [dict(dataset=ds, backbone=bb, method=m, k=method_k(config, bb, m, exp["dim"]),
                 stage=exp["stage"], seed=seed)
            for bb in exp["backbones"] for ds in exp["datasets"] for m in exp["methods"]
            for seed in method_seeds(exp, m)]


def method_seeds(exp: Mapping, method: str) -> list[int]:
    """The seeds of ``method`` in an experiment (with its defaults): ``method_seeds.<method>``, else ``seeds``."""
    return list((exp.get("method_seeds") or {}).get(method, exp["seeds"]))


def headline_run(config: Mapping, dataset: str, method: str, seed: int | str) -> dict:
    """The run behind ``results/{dataset}/{method}/seed{seed}.json``: default backbone, final stage
    (test queries), primary dimension (full dimension for frozen)."""
    bb = config["backbone"]
    return dict(dataset=dataset, backbone=bb, method=method, k=method_k(config, bb, method, "primary"),
                stage="final", seed=seed)


def efficiency_runs(config: Mapping, backbone: str) -> list[tuple[str, int]]:
    """``[(method, k)]`` the efficiency study times: frozen at full dimension, then
    ``efficiency.method`` at the secondary and the primary dimension, then
    ``efficiency.sparse_method`` (a k-sparse method, searched over its stored codes) if set."""
    bb = config["backbones"][backbone]
    runs = [("frozen", int(bb["dim"]))]
    for which in ("secondary", "primary"):
        if which in bb["dims"]:
            runs.append((config["efficiency"]["method"], int(bb["dims"][which])))
    sparse = config["efficiency"].get("sparse_method")
    if sparse:
        runs.append((sparse, method_k(config, backbone, sparse)))
    return runs


def frontier_runs(config: Mapping, backbone: str) -> list[tuple[str, int]]:
    """``[(method, k)]``: every method of the frontier study at each of its dimensions (frozen: full)."""
    runs = []
    for m in experiment(config, "frontier")["methods"]:
        for which in ("primary", "secondary"):
            k = method_k(config, backbone, m, which)
            if (m, k) not in runs:
                runs.append((m, k))
    return runs


def budget_experiments(config: Mapping, arrival: bool = False) -> list[str]:
    """The enabled experiments of study ``budget`` (what to store in B bytes a vector) that pick among
    the frontier's codes, or (``arrival``) among an arrival study's codes (``experiments.<name>.arrival``:
    every fit on the documents known at training time)."""
    return [n for n in enabled_experiments(config) if experiment(config, n)["study"] == "budget"
            and bool(experiment(config, n)["arrival"]) == arrival]


def budget_seeds(config: Mapping) -> list[int]:
    """The seeds at which every fitted frontier method runs again for the budget studies (each one's
    ``seeds`` but the frontier's first), in increasing order."""
    first = experiment(config, "frontier")["seeds"][0]
    return sorted({s for n in budget_experiments(config) for s in experiment(config, n)["seeds"] if s != first})


def fitted(config: Mapping, method: str) -> bool:
    """Whether a method's map is fitted, so that another seed can give other codes (frozen and
    truncate: no)."""
    return spec(method_type(config, method)).fitted


def frontier_seeds(config: Mapping) -> list[int]:
    """The seeds other than the frontier's first at which some of its methods run again
    (``experiments.frontier.method_seeds``, a listed method that the study leaves out ignored, and
    the budget studies' seeds, :func:`budget_seeds`), in increasing order: one ``frontier_seed``
    record each."""
    exp = experiment(config, "frontier")
    first = exp["seeds"][0]
    return sorted({s for m, seeds in (exp.get("method_seeds") or {}).items() if m in exp["methods"]
                   for s in seeds if s != first} | set(budget_seeds(config)))


def frontier_seed_runs(config: Mapping, backbone: str, seed: int,
                       picked: Iterable[tuple[str, int]] = ()) -> list[tuple[str, int]]:
    """``[(method, k)]`` of :func:`frontier_runs` whose method runs again at ``seed``: those of
    ``experiments.frontier.method_seeds``, and at a budget study's seed the fitted maps of ``picked``
    (:func:`picked_maps`: the maps whose codes are picked on validation queries). The rows that the
    verdict's and the budget study's picked codes are scored on at that seed."""
    again = experiment(config, "frontier").get("method_seeds") or {}
    chosen = {tuple(x) for x in picked} if seed in budget_seeds(config) else set()
    return [(m, k) for m, k in frontier_runs(config, backbone)
            if seed in again.get(m, ()) or ((m, k) in chosen and fitted(config, m))]


def budget_candidates(config: Mapping, name: str, validation_rows: Sequence[Mapping]) -> list[Mapping]:
    """The rows of a ``frontier_validation`` record that budget study ``name`` picks among: those
    within its ``max_latency_ms`` (:func:`dive_core.selection.within_latency`; no limit: every row). A
    limit no code meets, or rows scored without latency, are refused naming the key."""
    from ..selection import within_latency

    limit = experiment(config, name).get("max_latency_ms")
    try:
        return within_latency(validation_rows, limit, f"config: experiments.{name}.max_latency_ms =")[0]
    except ValueError as e:
        raise ConfigError(str(e)) from None


def frontier_latency_queries(config: Mapping) -> int:
    """How many validation queries rule frontier_validation times one at a time per code
    (:data:`dive_core.efficiency.LATENCY_QUERIES`) when a budget study sets ``max_latency_ms``; 0 (no
    timing, rows without ``latency_ms``) when none does."""
    if not any(experiment(config, n).get("max_latency_ms") is not None for n in budget_experiments(config)):
        return 0
    from ..efficiency import LATENCY_QUERIES

    return LATENCY_QUERIES


def picked_maps(config: Mapping, validation_rows: Iterable[Mapping]) -> list[tuple[str, int]]:
    """``[(method, k)]``: the maps whose codes :func:`dive_core.selection.pick_code` picks from one
    ``frontier_validation`` record's rows, at every budget of the frontier's verdict (every row) and
    of each budget study (its :func:`budget_candidates`), for any family, the label-free and the
    supervised one (sorted)."""
    from ..selection import BUDGETS, FAMILIES, pick_code

    rows = list(validation_rows)
    pools = [(rows, BUDGETS)] + [(budget_candidates(config, n, rows), experiment(config, n)["budgets"])
                                 for n in budget_experiments(config)]
    picks = {(x["method"], int(x["dim"])) for pool, budgets in pools for b in budgets for fam in (None, *FAMILIES)
             for x in [pick_code(pool, b, fam)] if x is not None}
    return sorted(picks)


def frontier_quantized(config: Mapping, backbone: str) -> list[tuple[str, int]]:
    """``[(method, k)]`` of :func:`frontier_runs` whose vectors also get the index quantizers' rows:
    each frontier method at the dimensions of ``quantizers.dims`` (frozen: full); a k-sparse code's
    rows are left out where they are made (its codes are stored as they are)."""
    runs = []
    for m in experiment(config, "frontier")["methods"]:
        for which in config["quantizers"].get("dims", ("primary", "secondary")):
            k = method_k(config, backbone, m, which)
            if (m, k) not in runs:
                runs.append((m, k))
    return runs


def arrival_code_runs(config: Mapping, name: str, backbone: str) -> list[tuple[str, int]]:
    """``[(method, k)]`` of arrival experiment ``name`` whose vectors get the index quantizers' rows
    fitted on the known documents (``experiments.<name>.codes``, generated variants' names; a name
    not among the study's methods is left out), each at the experiment's dimension (frozen: full)."""
    exp = experiment(config, name)
    return [(m, method_k(config, backbone, m, exp["dim"])) for m in exp.get("codes") or [] if m in exp["methods"]]


def dataset_groups(registry: Mapping[str, Mapping], datasets: Iterable[str]) -> dict[str, str]:
    """dataset -> its group (CQADupStack's communities average first), itself when ungrouped."""
    return {ds: registry[ds].get("group", ds) for ds in datasets}


def experiment_title(config: Mapping, name: str) -> str:
    """A study table's title: which queries (or logs) it reads, the backbones, the dimension."""
    exp = experiment(config, name)
    if exp["study"] in OWN_JSON_STUDIES:
        return f"{name}: {exp.get('description', exp['study'])}"
    if exp["study"] == "dynamics":  # read from train logs: no query is evaluated
        role = "final-stage training logs" if exp["stage"] == "final" else "select-stage training logs"
    else:
        role = "held-out test queries" if exp["stage"] == "final" else "validation queries"
    return f"{name}: {role}, backbone {', '.join(exp['backbones'])}, {exp['dim']} dimension" + (
        f" - {exp['description']}" if exp.get("description") else "")
