"""The selection studies (:data:`~dive_core.plan.grammar.SELECTION_STUDIES`): their settings, their
candidates, the references they report beside them, the validation runs they read, and which
study a method's jobs read their picked hyperparameters from."""

from __future__ import annotations

import itertools
from typing import Any, Mapping

from ..config import ConfigError
from .experiments import defined_backbone
from .grammar import ARRIVAL, SELECTION_STUDIES
from .methods import method_k


# --------------------------------------------------------------------------- selection studies
def _value_tag(value: Any) -> str:
    """A path-safe rendering of a hyperparameter value: 1e-04, 0.7, 4, hinge."""
    if isinstance(value, float):
        return f"{value:.0e}" if value != 0 and (abs(value) < 1e-2 or abs(value) >= 1e4) else f"{value:g}"
    return str(value)


def selection_settings(config: Mapping) -> dict:
    sel = dict(config.get("selection") or {})
    sel.setdefault("datasets", None)
    sel["datasets"] = list(sel["datasets"] or config["datasets"])
    sel.setdefault("seed", int(config["seeds"][0]))
    sel.setdefault("lr_audit", {})
    sel.setdefault("dive_grid", {})
    sel.setdefault("arrival_grid", {})
    sel.setdefault("arrival_references", ["dive", "mrl"])
    sel.setdefault("arrival_tolerance", 0.01)
    return sel


def arrival_entry(entry: Mapping) -> dict:
    """A method entry refitted under the arrival protocol (its fits see the known documents only).

    A ``selected:`` pick of another study (``lr_audit``, ``dive_config``) is dropped: it was made
    on fits that saw every document, the arriving ones too, so the arrival run trains at the
    entry's own values. Only an ``arrival_variants`` pick, made on arrival runs, is kept."""
    out = {**entry, "arrival": True}
    if str(out.get("selected", "")).partition("/")[0] != "arrival_variants":
        out.pop("selected", None)
    return out


def selection_candidates(config: Mapping, study: str) -> dict[str, list[tuple[str, dict]]]:
    """``{base method: [(candidate method name, overrides), ...]}`` of a selection study.

    ``lr_audit``: each audited method at each of its learning rates (``{base}-lr{value}``);
    ``dive_config``: the product of ``selection.dive_grid`` (``dive-{key}{value}...``); an empty
    grid is the paper's single point, whose only candidate is ``dive`` itself. A candidate whose
    overrides equal the base entry's values is the base method itself (its runs are shared).
    ``arrival_variants``: the product of each method's grid in ``selection.arrival_grid`` (of the
    bases an enabled experiment uses, :func:`arrival_bases_in_use`), every candidate refitted under
    the arrival protocol (``{base}-{key}{value}...-arrival``, always its own run)."""
    sel = selection_settings(config)
    if study == "lr_audit":
        grids = {base: {"lr": list(values)} for base, values in sel["lr_audit"].items()}
    elif study == "dive_config":
        grids = {"dive": dict(sel["dive_grid"])}
    elif study == "arrival_variants":
        used = arrival_bases_in_use(config)
        grids = {base: dict(grid) for base, grid in sel["arrival_grid"].items() if base in used}
    else:
        raise ConfigError(f"config: unknown selection study {study!r} (have {SELECTION_STUDIES})")
    out = {}
    for base, grid in grids.items():
        entry = config["methods"].get(base)
        if entry is None:
            raise ConfigError(f"config: selection.{study}: method {base!r} is not defined under methods")
        keys = list(grid)
        cands = []
        for values in itertools.product(*(grid[k] for k in keys)):
            over = dict(zip(keys, values))
            tags = "-".join(f"{k.replace('_', '')}{_value_tag(v)}" for k, v in over.items())
            if study == "arrival_variants":
                name = "-".join(x for x in (base, tags, ARRIVAL) if x)
            else:
                same = all(k in entry and entry[k] == v for k, v in over.items())
                name = base if same else f"{base}-{tags}"
            cands.append((name, over))
        out[base] = cands
    return out


def arrival_bases_in_use(config: Mapping) -> set[str]:
    """The bases of ``selection.arrival_grid`` that a method of an enabled experiment takes its pick
    from (``selected: arrival_variants/<base>``): the record covers these, so a config whose studies
    use none of a variant does not train that variant's candidates."""
    from .experiments import enabled_experiments, experiment

    used = set()
    for name in enabled_experiments(config):
        for m in experiment(config, name)["methods"]:
            study, _, base = str((config["methods"].get(m) or {}).get("selected", "")).partition("/")
            if study == "arrival_variants":
                used.add(base)
    return used


def arrival_references(config: Mapping) -> list[str]:
    """The supervised methods refitted under the arrival protocol whose ``known``-stratum validation
    score bounds the arrival variants' pick (``selection.arrival_references``, as ``<m>-arrival``)."""
    refs = selection_settings(config)["arrival_references"]
    for i, m in enumerate(refs):
        if m not in config["methods"]:
            raise ConfigError(f"config: selection.arrival_references[{i}] = {m!r} is not defined under methods")
    return [f"{m}-{ARRIVAL}" for m in refs]


def selection_reference(config: Mapping, study: str) -> str | None:
    """The method a selection study reports beside its candidates: for the learning-rate audit,
    ``experiments.<name>.reference`` of its ``study: lr_audit`` experiment (default ``dive``)."""
    if study != "lr_audit":
        return None
    refs = {(exp or {}).get("reference", "dive") for exp in (config.get("experiments") or {}).values()
            if (exp or {}).get("study") == "lr_audit"}
    if len(refs) > 1:
        raise ConfigError(f"config: experiments of study lr_audit name different references {sorted(refs)}; "
                          "the audit has one")
    ref = refs.pop() if refs else "dive"
    if ref not in config["methods"]:
        raise ConfigError(f"config: experiments.*.reference = {ref!r} is not defined under methods")
    return ref


def selection_runs(config: Mapping, study: str, backbone: str | None = None) -> list[dict]:
    """The validation (select-stage) runs a selection study reads on one backbone (default: the
    default backbone): its candidates and its reference, on the selection datasets at the
    selection seed, at the backbone's primary dimension. Never a final-stage run, never another
    backbone's run: each backbone has its own selection record."""
    sel = selection_settings(config)
    methods = [n for cands in selection_candidates(config, study).values() for n, _ in cands]
    ref = selection_reference(config, study)
    methods += [ref] if ref else []
    methods += arrival_references(config) if study == "arrival_variants" else []
    bb = defined_backbone(config, backbone or config["backbone"], f"selection {study}: backbone")
    return [dict(dataset=ds, backbone=bb, method=m, k=method_k(config, bb, m, "primary"), stage="select",
                 seed=sel["seed"])
            for ds in sel["datasets"] for m in dict.fromkeys(methods)]


def selection_study(config: Mapping, method: str, stage: str = "final") -> str | None:
    """The selection study whose JSON a method's ``stage`` jobs read their picked hyperparameters
    from, or None. ``selected: <study>/<base>`` in the method entry; a study with a single
    candidate (the paper's fixed DIVE point) picks nothing, so nothing depends on it. A
    select-stage run of a method that is itself one of the study's candidates trains at its own
    values: the pick is made from that run, so reading the pick there would be a cycle."""
    ref = config["methods"][method].get("selected")
    if not ref:
        return None
    study, _, base = str(ref).partition("/")
    if study not in SELECTION_STUDIES or not base:
        raise ConfigError(f"config: methods.{method}.selected = {ref!r}: expected '<study>/<method>' "
                          f"with study in {SELECTION_STUDIES}")
    cands = selection_candidates(config, study)
    grid = selection_settings(config)["arrival_grid"].get(base) if study == "arrival_variants" else None
    if base not in cands and grid:
        # a variant no enabled study uses: its runs still read the record, which refuses them
        # (dive_core.selection.apply_selection: no pick) - the record covers the variants in use
        return study if len(list(itertools.product(*grid.values()))) > 1 else None
    if base not in cands:
        raise ConfigError(f"config: methods.{method}.selected = {ref!r}: selection.{study} has no "
                          f"method {base!r} (have {sorted(cands)})")
    if len(cands[base]) < 2:
        return None
    if stage == "select" and method in {name for name, _ in cands[base]}:
        return None
    return study
