"""The method variants the studies add to the config (selection candidates, head counts,
document-disjoint and arrival refits): :func:`expand`."""

from __future__ import annotations

import copy
from typing import Mapping

from ..config import ConfigError
from .experiments import experiment_backbones
from .frozen import thaw
from .grammar import ARRIVAL, DOC_DISJOINT, SELECTION_STUDIES
from .methods import fits_on_documents, needs_triplets
from .selection import arrival_entry, arrival_references, selection_candidates, selection_runs, selection_settings


# --------------------------------------------------------------------------- generated variants
def heads_variants(config: Mapping, base: str, values, k: int, d: int) -> tuple[list[tuple[int, str]], str]:
    """``[(H, method name)]`` of the head-sensitivity study and a note. H with k*H > d cannot
    exist; each is replaced by the largest H with k*H <= d (d // k) when that is not already in
    the list (MiniLM, 64d: {2, 4, 8} -> {2, 4, 6})."""
    entry = config["methods"][base]
    kept, notes = [], []
    for h in values:
        h = int(h)
        if k * h > d:
            alt = d // k
            notes.append(f"H = {h} cannot exist at k = {k}, d = {d} (k*H = {k * h} > d)"
                         + (f"; H = {alt} (k*H = {k * alt}) is used instead" if alt not in values else ""))
            h = alt
        if h < 1 or h in [x for x, _ in kept]:
            continue
        kept.append((h, base if int(entry.get("heads", -1)) == h else f"{base}-h{h}"))
    return sorted(kept), "; ".join(notes)


def _add_method(config: dict, name: str, entry: dict) -> None:
    have = config["methods"].get(name)
    if have is not None and have != entry:
        raise ConfigError(f"config: methods.{name} is defined, but the workflow generates a different "
                          f"variant under that name; rename it")
    config["methods"][name] = entry


def _variants(config: dict, exp: dict, suffix: str, key: str, applies) -> list[str]:
    """An experiment's methods with each one that ``applies`` replaced by its generated variant
    ``<method>-<suffix>`` (the entry with ``key: true``); ``method_seeds`` follows the renaming."""
    names, renamed = [], {}
    for m in exp.get("methods", []):
        entry = config["methods"].get(m)
        if entry is None or not applies(m) or entry.get(key):
            names.append(m)
            continue
        name = renamed[m] = f"{m}-{suffix}"
        _add_method(config, name, arrival_entry(entry) if key == "arrival" else {**entry, key: True})
        names.append(name)
    if exp.get("method_seeds"):
        clash = sorted(m for m in exp["method_seeds"] if m in renamed and renamed[m] in exp["method_seeds"])
        if clash:
            raise ConfigError(f"config: experiments.<study>.method_seeds names both {clash[0]!r} and its generated "
                              f"variant {renamed[clash[0]]!r}; give the seeds once")
        exp["method_seeds"] = {renamed.get(m, m): seeds for m, seeds in exp["method_seeds"].items()}
    if exp.get("codes"):  # the arrival study's methods whose vectors get the quantizers' rows
        exp["codes"] = [renamed.get(m, m) for m in exp["codes"]]
    return names


def expand(config: Mapping) -> dict:
    """A copy of ``config`` with the generated method variants added to ``methods`` and every
    study's method list (``experiments.<name>.methods``) resolved; ``config`` itself is left as
    it was. Idempotent: expanding an expanded config changes nothing."""
    config = copy.deepcopy(thaw(config))
    config.setdefault("selection", {})
    base_entries = {n: dict(e) for n, e in config["methods"].items()}
    for study in SELECTION_STUDIES:
        for base, cands in selection_candidates(config, study).items():
            for name, over in cands:
                if name != base:
                    entry = {k: v for k, v in base_entries[base].items() if k != "selected"}
                    if study == "arrival_variants":
                        entry = arrival_entry(entry)
                    _add_method(config, name, {**entry, **over})
    if selection_settings(config)["arrival_grid"]:
        for m, name in zip(selection_settings(config)["arrival_references"], arrival_references(config)):
            _add_method(config, name, arrival_entry(base_entries[m]))
    for ename, exp in (config.get("experiments") or {}).items():
        study = exp.get("study", "main")
        backbones = experiment_backbones(config, ename, exp)
        if study == "heads":
            base = exp.get("base", "dive")
            if base not in base_entries:
                raise ConfigError(f"config: experiments.{ename}.base = {base!r} is not defined under methods")
            per_backbone = {}  # the variants depend on k and d: one backbone, or backbones that agree
            for bname in backbones:
                bb = config["backbones"][bname]
                k = int(bb["dims"][exp.get("dim", "primary")])
                per_backbone[bname] = heads_variants(config, base, exp.get("heads", [2, 4, 8]), k, int(bb["dim"]))
            if len({tuple(variants) for variants, _ in per_backbone.values()}) > 1:
                raise ConfigError(f"config: experiments.{ename}: backbones {backbones} admit different head counts "
                                  f"at the {exp.get('dim', 'primary')} dimension; give each its own heads experiment")
            variants, note = per_backbone[backbones[0]]
            for h, name in variants:
                if name != base:
                    _add_method(config, name, {**base_entries[base], "heads": h})
            exp["methods"] = [name for _, name in variants]
            exp["heads_note"] = note
        elif study == "lr_audit":
            if len(backbones) != 1:
                raise ConfigError(f"config: experiments.{ename}: an lr_audit experiment reads one backbone's "
                                  f"selection record; give each of {backbones} its own experiment")
            runs = selection_runs(config, "lr_audit", backbones[0])
            exp["methods"] = list(dict.fromkeys(run["method"] for run in runs))
            exp["datasets"] = selection_settings(config)["datasets"]
            exp["seeds"] = [selection_settings(config)["seed"]]
            exp["stage"] = "select"
        if exp.get("triplets") == "doc_disjoint":
            exp["methods"] = _variants(config, exp, DOC_DISJOINT, "doc_disjoint", lambda m: needs_triplets(config, m))
        if study == "arrival":  # every fit on known documents only; frozen and truncate fit nothing
            exp["methods"] = _variants(config, exp, ARRIVAL, "arrival", lambda m: fits_on_documents(config, m))
    return config
