"""The run plan: what the configured studies need, decided once and tested without Snakemake.

A *run* is one (dataset, backbone, method, k, stage, seed): a trained compressor and its
evaluation. This module generates the method variants the studies add to the config (selection
candidates, head counts, document-disjoint retrainings), lists the runs of every study, the
selection study a job reads its picked hyperparameters from, the triplet set a method trains on
(the ``negatives`` wildcard, encoded and decoded only here), the titles of the study tables, and
checks the whole plan before any job starts. It imports no torch: the method metadata comes from
:mod:`dive_core.methods.specs`, so the plan is the same in every environment that drives
Snakemake.

:func:`resolve` turns a validated config into one read-only :class:`Plan`: the runs, the method
variants with their resolved hyperparameters, the backbones with the one rule for what reaches a
job (:attr:`Backbone.job_spec`), and the input functions that turn a job's wildcards into the
artifact paths of :mod:`dive_core.paths`. The rules read the plan; nothing changes the config
after validation. ``rules/common.smk`` only wires the plan into Snakemake.
"""

from __future__ import annotations

import copy
import fnmatch
import itertools
import os
import re
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterable, Mapping

from . import paths
from .config import ConfigError, canonical_order, local_beir_dir
from .methods.specs import UNCOMPRESSED_TYPES, resolve_hparams, spec

SELECTION_STUDIES = ("lr_audit", "dive_config", "arrival_variants")
OWN_JSON_STUDIES = ("efficiency", "frontier")  # studies over their own measurement JSONs, not over runs
# an experiment's keys (config `experiments.<name>`): its stage, its output dimension, its triplets
STAGES = ("select", "final")  # select: train on train, score validation queries; final: score test queries
DIMS = ("primary", "secondary")  # which of the backbone's `dims`
EXPERIMENT_TRIPLETS = ("default", "doc_disjoint")


# --------------------------------------------------------------------------- methods
def method_entry(config: Mapping, method: str) -> Mapping:
    """``methods.<method>``; a ConfigError naming the defined methods if there is none."""
    entry = config["methods"].get(method)
    if entry is None:
        raise ConfigError(f"config: unknown method {method!r}; defined under methods: {sorted(config['methods'])}")
    return entry


def method_type(config: Mapping, method: str) -> str:
    return method_entry(config, method).get("type", method)


def method_k(config: Mapping, backbone: str, method: str, which: str = "primary") -> int:
    """Output dimension of ``method`` at the ``which`` ("primary"/"secondary") dimension of
    ``backbone``; uncompressed methods (frozen) always have the backbone's full dimension."""
    bb = config["backbones"][backbone]
    if method_type(config, method) in UNCOMPRESSED_TYPES:
        return int(bb["dim"])
    if which not in bb["dims"]:
        raise ConfigError(f"config: backbones.{backbone}.dims has no {which!r} dimension")
    return int(bb["dims"][which])


def method_hparams(config: Mapping, method: str) -> dict:
    """The resolved hyperparameters of ``methods.<method>`` (entry, then the ``training`` section)."""
    return resolve_hparams(method, config["methods"][method], config.get("training", {}))


def needs_triplets(config: Mapping, method: str) -> bool:
    """Supervised methods train on the shared triplets; label-free ones read none."""
    try:
        return spec(method_type(config, method)).supervised
    except KeyError as exc:
        raise ConfigError(f"config: methods.{method}: {exc.args[0]}") from None


# --------------------------------------------------------------------------- triplet sets
NEGATIVES = ("random", "hard")
DOC_DISJOINT = "docdisjoint"
ARRIVAL = "arrival"
TRIPLET_VARIANTS = (DOC_DISJOINT, ARRIVAL)
NEGATIVES_WILDCARD = rf"({'|'.join(NEGATIVES)})(-({'|'.join(TRIPLET_VARIANTS)}))?"  # the {negatives} path wildcard


def negatives_tag(mode: str, variant: str | None = None) -> str:
    """The ``{negatives}`` wildcard of a triplet set: ``random`` / ``hard`` negatives, with
    ``-docdisjoint`` when every document relevant to an evaluated query is excluded, ``-arrival``
    when only the known documents of the arrival split (:func:`dive_core.splits.make_arrival_manifest`)
    may be a positive or a negative."""
    if mode not in NEGATIVES:
        raise ConfigError(f"config: negatives {mode!r}: expected one of {list(NEGATIVES)}")
    if variant is not None and variant not in TRIPLET_VARIANTS:
        raise ConfigError(f"triplet variant {variant!r}: expected one of {list(TRIPLET_VARIANTS)}")
    return f"{mode}-{variant}" if variant else mode


def parse_negatives(tag: str) -> tuple[str, str | None]:
    """``(mode, variant)`` of a ``{negatives}`` wildcard (the inverse of :func:`negatives_tag`);
    ``variant``: None, :data:`DOC_DISJOINT` or :data:`ARRIVAL`."""
    if not re.fullmatch(NEGATIVES_WILDCARD, tag):
        raise ValueError(f"negatives {tag!r}: expected {NEGATIVES_WILDCARD}")
    mode, _, variant = tag.partition("-")
    return mode, variant or None


def method_negatives(config: Mapping, method: str) -> str:
    """The triplet set a method trains on (``negatives`` of its entry, else ``triplets.negatives``;
    document-disjoint with ``doc_disjoint: true``, known documents only with ``arrival: true``)."""
    entry = config["methods"][method]
    if entry.get("doc_disjoint") and entry.get("arrival"):
        raise ConfigError(f"config: methods.{method}: doc_disjoint and arrival exclude different documents; "
                          "set one of them")
    variant = DOC_DISJOINT if entry.get("doc_disjoint") else ARRIVAL if entry.get("arrival") else None
    return negatives_tag(entry.get("negatives", config["triplets"]["negatives"]), variant)


def fits_on_documents(config: Mapping, method: str) -> bool:
    """Whether a method's fit reads anything (every type but frozen and truncate)."""
    try:
        return spec(method_type(config, method)).fitted
    except KeyError as exc:
        raise ConfigError(f"config: methods.{method}: {exc.args[0]}") from None


def arrival_settings(config: Mapping) -> dict:
    """``arrival:`` with its defaults: seed (the split's), fraction 0.2, new_query_share 0.2."""
    out = {"seed": int(config["split"]["seed"]), "fraction": 0.2, "new_query_share": 0.2}
    out.update(dict(config.get("arrival") or {}))
    return out


def triplet_cap(config: Mapping, dataset: str) -> int | None:
    """``triplets.max_per_query``: null (the paper's protocol: every triplet), an int, or a
    mapping dataset -> int (datasets not listed: no cap)."""
    cap = config["triplets"].get("max_per_query")
    if isinstance(cap, Mapping):
        cap = cap.get(dataset)
    return None if cap is None else int(cap)


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
    ``arrival_variants``: the product of each method's grid in ``selection.arrival_grid``, every
    candidate refitted under the arrival protocol (``{base}-{key}{value}...-arrival``, always its
    own run)."""
    sel = selection_settings(config)
    if study == "lr_audit":
        grids = {base: {"lr": list(values)} for base, values in sel["lr_audit"].items()}
    elif study == "dive_config":
        grids = {"dive": dict(sel["dive_grid"])}
    elif study == "arrival_variants":
        grids = {base: dict(grid) for base, grid in sel["arrival_grid"].items()}
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
    if base not in cands:
        raise ConfigError(f"config: methods.{method}.selected = {ref!r}: selection.{study} has no "
                          f"method {base!r} (have {sorted(cands)})")
    if len(cands[base]) < 2:
        return None
    if stage == "select" and method in {name for name, _ in cands[base]}:
        return None
    return study


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


# --------------------------------------------------------------------------- studies and runs
def experiment(config: Mapping, name: str) -> dict:
    """An experiment with its defaults filled in: all configured datasets and seeds, the
    ``final`` stage (test queries), the ``primary`` dimension, the default backbone, study
    ``main``."""
    exps = config.get("experiments") or {}
    if name not in exps:
        raise ConfigError(f"config: no experiment {name!r} under experiments: (have {sorted(exps)})")
    exp = dict(exps[name])
    exp.setdefault("study", "main")
    exp.setdefault("datasets", list(config["datasets"]))
    exp.setdefault("seeds", list(config["seeds"]))
    exp.setdefault("stage", "final")
    exp.setdefault("dim", "primary")
    exp.setdefault("enabled", True)
    exp.setdefault("methods", [])
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
    ``efficiency.method`` at the secondary and the primary dimension."""
    bb = config["backbones"][backbone]
    runs = [("frozen", int(bb["dim"]))]
    for which in ("secondary", "primary"):
        if which in bb["dims"]:
            runs.append((config["efficiency"]["method"], int(bb["dims"][which])))
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


# --------------------------------------------------------------------------- checks
VECTORS = "vectors"  # the backbone family that reads embeddings from files (dive_core.vectors)
VECTOR_KEYS = ("corpus", "queries", "id_column", "vector_column", "sha256")


def check_vectors_backbone(name: str, bb: Mapping, datasets: Iterable[str]) -> None:
    """A ``family: vectors`` backbone: files, not a model; one ingest job per dataset; a path shared
    by several datasets must hold ``{dataset}``, and a pinned sha256 is per file."""
    other = [k for k in ("model", "base_model", "source", "shards", "peft_model") if k in bb]
    if other:
        raise ConfigError(f"config: backbones.{name}: {other} do not apply to a backbone of family {VECTORS!r} "
                          "(its vectors come from the files corpus: and queries:, ingested in one job)")
    from .vectors import VectorFileError, vector_format

    datasets = list(datasets)
    for role in ("corpus", "queries"):
        path = str(bb[role])
        if "{" in path.replace("{dataset}", ""):
            raise ConfigError(f"config: backbones.{name}.{role} = {path!r}: the only placeholder is {{dataset}}")
        if len(datasets) > 1 and "{dataset}" not in path:
            raise ConfigError(f"config: backbones.{name}.{role} = {path!r} names one file for the datasets "
                              f"{datasets}; put {{dataset}} in the path")
        try:
            vector_format(path)
        except VectorFileError as exc:
            raise ConfigError(f"config: backbones.{name}.{role}: {exc}") from None
        pin = (bb.get("sha256") or {}).get(role)
        if isinstance(pin, str) and "{dataset}" in path and len(datasets) > 1:
            raise ConfigError(f"config: backbones.{name}.sha256.{role} is one sha256 for a file per dataset; give "
                              "a mapping dataset -> sha256")


def check_method(config: Mapping, mname: str, d: int, k: int, where: str) -> None:
    """Check a method as its jobs will build it (d, k, resolved hyperparameters): every value's
    type and range (a value given on the command line as a string, such as heads: '7', is
    refused, not multiplied), DIVE's k*H <= d. Errors name the key."""
    hp = method_hparams(config, mname)
    try:
        spec(method_type(config, mname)).validate(d, k, hp)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"config: methods.{mname} ({where}, d = {d}, k = {k}): {exc}") from None


def check(config: Mapping, registry: Mapping[str, dict]) -> None:
    """Raise :class:`ConfigError` naming the offending key: names that must exist elsewhere,
    every method's hyperparameters and values at each dimension it runs at, the selection."""
    for i, ds in enumerate(config["datasets"]):
        if ds not in registry:
            raise ConfigError(f"config: datasets[{i}] = {ds!r} is not in the dataset registry "
                              f"({config.get('dataset_registry')}); known: {sorted(registry)}")
    defined_backbone(config, config["backbone"], "backbone")
    fr = config["split"]["fractions"]
    if abs(sum(fr) - 1.0) > 1e-9:
        raise ConfigError(f"config: split.fractions {fr} must sum to 1")
    for bname, bb in config["backbones"].items():
        for which, k in bb["dims"].items():
            if k > bb["dim"]:
                raise ConfigError(f"config: backbones.{bname}.dims.{which} = {k} exceeds dim {bb['dim']}")
        if bb["family"] == VECTORS:  # every dataset a run may use
            used = list(config["datasets"]) + list(selection_settings(config)["datasets"]) + [
                ds for exp in (config.get("experiments") or {}).values() for ds in (exp or {}).get("datasets") or []]
            check_vectors_backbone(bname, bb, dict.fromkeys(used))
        elif any(k in bb for k in VECTOR_KEYS):
            raise ConfigError(f"config: backbones.{bname}: {sorted(k for k in VECTOR_KEYS if k in bb)} belong to a "
                              f"backbone of family {VECTORS!r}, not {bb['family']!r}")
        if "source" in bb and bb.get("model") != paths.model_dir(bname):
            raise ConfigError(f"config: backbones.{bname}.model = {bb.get('model')!r}: a backbone with source: is "
                              f"fetched by rule fetch_model into {paths.model_dir(bname)!r}; set model: to that folder")
    for ename, exp in (config.get("experiments") or {}).items():
        for i, m in enumerate(exp.get("methods", [])):
            if m not in config["methods"]:
                raise ConfigError(f"config: experiments.{ename}.methods[{i}] = {m!r} is not defined under methods")
        for m in exp.get("method_seeds") or {}:
            if m not in exp.get("methods", []):
                raise ConfigError(f"config: experiments.{ename}.method_seeds.{m}: {m!r} is not one of the "
                                  f"experiment's methods {exp.get('methods', [])}")
        for i, ds in enumerate(exp.get("datasets", []) or []):
            if ds not in registry:
                raise ConfigError(f"config: experiments.{ename}.datasets[{i}] = {ds!r} is not in the dataset registry")
    for mname in config["methods"]:
        try:
            method_hparams(config, mname)
        except (KeyError, ValueError) as exc:
            raise ConfigError(str(exc).strip("'\"")) from None
        selection_study(config, mname)
    for study in SELECTION_STUDIES:
        selection_reference(config, study)
    for ename in enabled_experiments(config):
        exp = experiment(config, ename)
        if exp["study"] == "efficiency":
            continue  # times config `efficiency.method` against frozen
        if not exp["methods"]:
            raise ConfigError(f"config: experiments.{ename} has no methods")
        for bname in exp["backbones"]:  # each defined (experiment_backbones)
            d = int(config["backbones"][bname]["dim"])
            for mname in exp["methods"]:
                check_method(config, mname, d, method_k(config, bname, mname, exp["dim"]),
                             f"experiments.{ename}, backbone {bname} at its {exp['dim']} dimension")
    from .compress import check_config as check_compress

    check_compress(config)
    for base, values in (selection_settings(config).get("lr_audit") or {}).items():
        if len(values) != 3:
            raise ConfigError(f"config: selection.lr_audit.{base} has {len(values)} candidates; the audit "
                              f"gives every method exactly three (docs/protocol.md#validation-only-selection)")


# --------------------------------------------------------------------------- the default-backbone guard
def foreign_backbone_outputs(config: Mapping, patterns: Mapping[str, str], root: str | Path = ".") -> list[tuple[str, str]]:
    """``[(path, backbone)]`` of existing outputs whose paths carry no backbone (``patterns``: the
    headline results and the default studies' per-run tables, as path patterns with
    ``{wildcards}``) but hold another backbone's results than ``config["backbone"]``.
    Read leniently: a file of any format that names a backbone counts."""
    import csv
    import json

    def files(pattern: str) -> list[Path]:
        glob = re.sub(r"\{[^}]+\}", "*", pattern)
        return [p for p in sorted(Path(root).glob(glob)) if fnmatch.fnmatch(str(p.relative_to(root)), glob)]

    def read(p: Path) -> dict:
        try:
            obj = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return obj if isinstance(obj, dict) else {}

    want, found = config["backbone"], []
    for p in files(patterns["headline"]):
        bb = read(p).get("backbone")
        if bb and bb != want:
            found.append((str(p.relative_to(root)), bb))
    for name, exp in (config.get("experiments") or {}).items():
        p = Path(root) / patterns["runs_table"].format(experiment=name)
        if (exp or {}).get("backbones") or not p.exists():
            continue
        with open(p, encoding="utf-8", newline="") as fh:
            other = sorted({row.get("backbone") for row in csv.DictReader(fh, delimiter="\t")} - {want, None, ""})
        found += [(str(p.relative_to(root)), bb) for bb in other]
    return found


def check_default_backbone(config: Mapping, patterns: Mapping[str, str], root: str | Path = ".") -> None:
    """Refuse a switch of the default ``backbone`` that would overwrite another backbone's
    results: the headline results and the default studies' tables carry no backbone in their path."""
    found = foreign_backbone_outputs(config, patterns, root)
    if not found:
        return
    shown = "; ".join(f"{p} ({bb})" for p, bb in found[:3]) + (f"; and {len(found) - 3} more" if len(found) > 3 else "")
    raise ConfigError(
        f"config: backbone = {config['backbone']!r}, but outputs whose paths carry no backbone hold another "
        f"backbone's results: {shown}. Running would overwrite them. To add a backbone, keep `backbone:` and "
        "enable experiments.second_backbone (or give a study `backbones: [...]`): its runs and table get their "
        "own paths. To switch the default backbone, first move results/tables, results/figures and the "
        "headline results results/<dataset>/<method>/ aside.")


# --------------------------------------------------------------------------- the resolved plan
def freeze(obj: Any) -> Any:
    """A read-only deep copy: mappings become read-only mappings, lists tuples."""
    if isinstance(obj, Mapping):
        return MappingProxyType({k: freeze(v) for k, v in obj.items()})
    if isinstance(obj, (list, tuple)):
        return tuple(freeze(v) for v in obj)
    return obj


def thaw(obj: Any) -> Any:
    """A plain deep copy (dicts and lists) of a frozen value: what a job parameter or a record holds."""
    if isinstance(obj, Mapping):
        return {k: thaw(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [thaw(v) for v in obj]
    return obj


# Keys of a backbone entry that decide how its embedding is scheduled or fetched, never its vectors
# (nor any compressed vector after it): they never reach a job, so changing them reruns nothing.
SCHEDULING_KEYS = ("dims", "mem_mb", "shards", "source")


@dataclass(frozen=True)
class MethodVariant:
    """One entry of ``methods:`` after expansion, as its jobs see it."""

    name: str
    type: str
    entry: Mapping[str, Any]
    hparams: Mapping[str, Any]  # resolved: the entry's values, then the training section's
    supervised: bool  # trains on the shared triplets
    negatives: str  # the {negatives} tag of the triplet set it trains on (when supervised)
    selected: str | None  # ``<study>/<method>``: where its picked hyperparameters come from
    arrival: bool = False  # every fit sees the known documents of the arrival split only


@dataclass(frozen=True)
class Backbone:
    """One entry of ``backbones:``."""

    name: str
    entry: Mapping[str, Any]
    model_dir: str | None  # the pinned folder rule fetch_model writes (backbones with ``source:``)
    shards: int

    @property
    def job_spec(self) -> dict:
        """What reaches a job of this backbone (embedding, evaluation, export): the entry without
        :data:`SCHEDULING_KEYS`. The one rule for every job."""
        return {k: thaw(v) for k, v in self.entry.items() if k not in SCHEDULING_KEYS}


def _wildcards(w: Any) -> dict:
    return dict(w.items()) if hasattr(w, "items") else dict(w)


@dataclass(frozen=True)
class Plan:
    """The resolved, read-only plan that every rule and input function reads (:func:`resolve`).

    ``config`` is the validated config with the generated method variants, frozen; ``registry``
    the dataset registry; ``local_beir`` the local BEIR directory, if any. The methods that give
    job parameters or paths return plain data (dicts, lists, tuples, strings) that a job may hold;
    :meth:`method` and :meth:`backbone` return the read-only variant and backbone records."""

    config: Mapping[str, Any]
    registry: Mapping[str, Any]
    registry_file: str
    local_beir: str | None
    methods: Mapping[str, MethodVariant]
    backbones: Mapping[str, Backbone]

    # ---- settings and entries (errors name the key) ----------------------------------------
    def setting(self, *keys: str) -> Any:
        """The config value under ``keys`` (``setting("threads", "train")``), as plain data."""
        node: Any = self.config
        for i, key in enumerate(keys):
            if not isinstance(node, Mapping) or key not in node:
                raise ConfigError(f"config: no key {'.'.join(keys[:i + 1])}")
            node = node[key]
        return thaw(node)

    def dataset(self, name: str) -> dict:
        if name not in self.registry:
            raise ConfigError(f"dataset {name!r} is not in {self.registry_file}")
        return thaw(self.registry[name])

    def zip_entry(self, zipname: str) -> dict:
        for entry in self.registry.values():
            if entry.get("zip") == zipname:
                return thaw(entry)
        raise ConfigError(f"no dataset in {self.registry_file} uses zip {zipname!r}")

    def method(self, name: str) -> MethodVariant:
        method_entry(self.config, name)  # names the defined methods if there is none
        return self.methods[name]

    def hparams(self, method: str) -> dict:
        """The resolved hyperparameters a training job of ``method`` gets."""
        return thaw(self.method(method).hparams)

    def backbone(self, name: str) -> Backbone:
        return self.backbones[defined_backbone(self.config, name, "backbone")]

    # ---- studies and runs ------------------------------------------------------------------
    def experiment(self, name: str) -> dict:
        return thaw(experiment(self.config, name))

    def enabled_experiments(self) -> list[str]:
        return enabled_experiments(self.config)

    def runs(self, name: str) -> list[dict]:
        """The runs of experiment ``name`` (none for the efficiency and frontier studies)."""
        return experiment_runs(self.config, name)

    def title(self, name: str) -> str:
        return experiment_title(self.config, name)

    def groups(self, datasets: Iterable[str]) -> dict[str, str]:
        return dataset_groups(self.registry, datasets)

    def selection(self) -> dict:
        """The ``selection`` settings with their defaults (datasets, seed)."""
        return thaw(selection_settings(self.config))

    def selection_candidates(self, study: str) -> dict:
        return selection_candidates(self.config, study)  # plain data: (name, overrides) tuples, as the select job reads

    def selection_reference(self, study: str) -> str | None:
        return selection_reference(self.config, study)

    def arrival_references(self) -> list[str]:
        return arrival_references(self.config)

    def arrival_selection(self, study: str) -> dict | None:
        """What the ``arrival_variants`` pick needs beyond the candidates (references, tolerance);
        None for another selection study."""
        if study != "arrival_variants":
            return None
        return {"references": self.arrival_references(), "tolerance": self.selection()["arrival_tolerance"]}

    def selection_runs(self, study: str, backbone: str) -> list[dict]:
        return selection_runs(self.config, study, backbone)

    def selection_study(self, method: str, stage: str) -> str | None:
        return selection_study(self.config, self.method(method).name, stage)

    def efficiency_runs(self, backbone: str) -> list[tuple[str, int]]:
        return efficiency_runs(self.config, backbone)

    def frontier_runs(self, backbone: str) -> list[tuple[str, int]]:
        return frontier_runs(self.config, backbone)

    def triplet_cap(self, dataset: str) -> int | None:
        return triplet_cap(self.config, dataset)

    def arrival(self) -> dict:
        """The ``arrival`` settings with their defaults (seed, fraction, new_query_share)."""
        return arrival_settings(self.config)

    def result_config(self, w: Any) -> dict:
        """The settings an evaluated run's result record holds (its ``config``): what decided
        its numbers, and only this dataset's triplet cap (another's must not rerun it)."""
        w = _wildcards(w)
        return {
            "backbone": self.backbone(w["backbone"]).job_spec,
            "split": self.setting("split"),
            "triplets": {**self.setting("triplets"), "max_per_query": self.triplet_cap(w["dataset"])},
            "training": self.setting("training"),
            "method_entry": thaw(self.method(w["method"]).entry),
            "evaluation": self.setting("evaluation"),
        }

    def query_instruction(self, w: Any) -> str:
        """Only instruction-following backbones get (and depend on) the dataset's instruction."""
        w = _wildcards(w)
        if self.backbone(w["backbone"]).entry["family"] != "llm2vec":
            return ""
        return self.dataset(w["dataset"]).get("instruction", "")

    # ---- runs to paths ---------------------------------------------------------------------
    def triplet_files(self, run: Mapping[str, Any], method: str) -> dict:
        """The triplet TSV and its record that ``method`` trains on, or none (label-free methods)."""
        m = self.method(method)
        if not m.supervised:
            return {}
        w = dict(run, negatives=m.negatives)
        return {"triplets": paths.TRIPLETS.format(**w), "triplets_meta": paths.TRIPLETS_META.format(**w)}

    def run_artifacts(self, run: Mapping[str, Any]) -> list[str]:
        """Every artifact behind one evaluation, from the staged data to the per-query TSV."""
        files = [paths.SOURCE.format(**run), paths.SPLITS.format(**run), paths.EMBEDDINGS.format(**run)]
        files += [paths.ARRIVAL.format(**run)] if self.method(run["method"]).arrival else []
        files += list(self.triplet_files(run, run["method"]).values())
        return files + [p.format(**run) for p in paths.RUN_FILES]

    def targets(self) -> list[str]:
        """``all``: every enabled experiment's table, the headline copies of ``main``, and every
        intermediate artifact behind them (Snakemake ignores a deleted intermediate file while its
        downstream targets exist: naming them all makes ``all`` rebuild it and what follows)."""
        targets = []
        for name in self.enabled_experiments():
            for run in self.runs(name):
                targets += self.run_artifacts(run)
                if name == "main":
                    targets.append(paths.HEADLINE.format(**run))
            targets.append(paths.TABLE.format(experiment=name))
        targets.append(paths.SELECTION.format(backbone=self.config["backbone"], study="dive_config"))
        return list(dict.fromkeys(targets))

    # ---- input functions: a job's wildcards -> the files it reads --------------------------
    def staging_input(self, w: Any) -> list[str] | str:
        entry = self.dataset(_wildcards(w)["dataset"])
        if self.local_beir or entry.get("local_only"):
            return []  # read from the local BEIR directory (config beir_data_dir / $BEIR_DATA_DIR)
        return paths.ZIP.format(zipname=entry["zip"])

    def hard_negatives(self, w: Any) -> bool:
        return parse_negatives(_wildcards(w)["negatives"])[0] == "hard"

    def model_folder(self, w: Any) -> list[str] | str:
        """The fetched model folder an embedding job reads (none for wheel-shipped or hub-cached models)."""
        return self.backbone(_wildcards(w)["backbone"]).model_dir or []

    def vector_files(self, w: Any) -> list[str]:
        """The files a ``family: vectors`` backbone's embedding job ingests for the dataset (the
        corpus and queries files, and a .npy's id list beside it); none for an encoder."""
        from .vectors import ids_path, source_path, vector_format

        w = _wildcards(w)
        bb = self.backbone(w["backbone"]).entry
        if bb["family"] != VECTORS:
            return []
        files = []
        for role in ("corpus", "queries"):
            path = str(source_path(bb, role, w["dataset"]))
            files.append(path)
            if vector_format(path) == "npy":
                files.append(str(ids_path(path)))
        return files

    def embed_parts(self, w: Any) -> list[str]:
        """The parts a sharded backbone's embedding is gathered from (none when ``shards`` is 1)."""
        w = _wildcards(w)
        n = self.backbone(w["backbone"]).shards
        if n <= 1:
            return []
        return [paths.EMBED_PART.format(dataset=w["dataset"], backbone=w["backbone"], part=p)
                for p in paths.part_names(n)]

    def triplet_inputs(self, w: Any) -> dict:
        w = _wildcards(w)
        inputs = {"source": paths.SOURCE.format(**w), "splits": paths.SPLITS.format(**w)}
        if self.hard_negatives(w):  # negatives mined from the frozen top-k of this backbone
            inputs["embeddings"] = paths.EMBEDDINGS.format(**w)
        if parse_negatives(w["negatives"])[1] == ARRIVAL:  # known documents only
            inputs["arrival"] = paths.ARRIVAL.format(**w)
        return inputs

    def train_inputs(self, w: Any) -> dict:
        w = _wildcards(w)
        inputs = {"embeddings": paths.EMBEDDINGS.format(**w), "splits": paths.SPLITS.format(**w)}
        study = self.selection_study(w["method"], w["stage"])
        if study:  # hyperparameters picked on this backbone's validation queries
            inputs["selection"] = paths.SELECTION.format(backbone=w["backbone"], study=study)
        if self.method(w["method"]).arrival:  # the fit sees the known documents only
            inputs["arrival"] = paths.ARRIVAL.format(**w)
        return inputs | self.triplet_files(w, w["method"])

    def headline_eval(self, w: Any) -> str:
        w = _wildcards(w)
        self.method(w["method"])
        return paths.EVAL_JSON.format(**headline_run(self.config, w["dataset"], w["method"], w["seed"]))

    def selection_inputs(self, w: Any) -> dict:
        """A selection's validation result records; for ``arrival_variants`` also their per-query
        files (same order) and the arrival manifests of the selection datasets (its strata)."""
        w = _wildcards(w)
        runs = self.selection_runs(w["study"], w["backbone"])
        inputs = {"results": [paths.EVAL_JSON.format(**run) for run in runs]}
        if w["study"] == "arrival_variants":
            inputs["per_query"] = [paths.PER_QUERY.format(**run) for run in runs]
            inputs["arrival"] = [paths.ARRIVAL.format(dataset=ds) for ds in self.selection()["datasets"]]
        return inputs

    def _checkpoints(self, w: Mapping, runs: Iterable[tuple[str, int]], seed: int) -> list[str]:
        return [paths.CHECKPOINT.format(**w, method=m, k=k, stage="final", seed=seed) for m, k in runs]

    def efficiency_inputs(self, w: Any) -> dict:
        w = _wildcards(w)
        runs = self.efficiency_runs(w["backbone"])
        return {"embeddings": paths.EMBEDDINGS.format(**w), "splits": paths.SPLITS.format(**w),
                "checkpoints": self._checkpoints(w, runs, self.setting("efficiency", "seed"))}

    def frontier_inputs(self, w: Any) -> dict:
        w = _wildcards(w)
        runs = self.frontier_runs(w["backbone"])
        return {"embeddings": paths.EMBEDDINGS.format(**w), "splits": paths.SPLITS.format(**w),
                "checkpoints": self._checkpoints(w, runs, self.experiment("frontier")["seeds"][0])}

    def table_inputs(self, w: Any) -> dict:
        """A study's declared inputs: its runs' result records, per-query and train-log files (in
        the same order), or its own measurement records; the audit's selection record."""
        name = _wildcards(w)["experiment"]
        exp = self.experiment(name)
        if exp["study"] in OWN_JSON_STUDIES:
            own = [paths.STUDY_JSON[exp["study"]].format(dataset=ds, backbone=bb)
                   for bb in exp["backbones"] for ds in exp["datasets"]]
            return {"results": own + ([paths.SYNTHETIC] if exp["study"] == "efficiency" else [])}
        runs = self.runs(name)
        inputs = {"results": [paths.EVAL_JSON.format(**r) for r in runs],
                  "per_query": [paths.PER_QUERY.format(**r) for r in runs],
                  "train_logs": [paths.TRAIN_LOG.format(**r) for r in runs]}
        if exp["study"] == "lr_audit":  # one backbone per audit experiment (expand)
            inputs["selection"] = paths.SELECTION.format(backbone=exp["backbones"][0], study="lr_audit")
        if exp["study"] == "arrival":  # the strata of every evaluated query, per dataset
            inputs["arrival"] = [paths.ARRIVAL.format(dataset=ds) for ds in exp["datasets"]]
            if any(self.selection_study(m, exp["stage"]) == "arrival_variants" for m in exp["methods"]):
                # the picks its variants trained with: their time and hash head the table
                inputs["picks"] = [paths.SELECTION.format(backbone=bb, study="arrival_variants")
                                   for bb in exp["backbones"]]
        return inputs

    # ---- compress: trained compressors applied to the vector files of `compress:` ------------
    def compress_entry(self, w: Any) -> dict:
        """``compress.<name>`` with its defaults (:func:`dive_core.compress.entries`)."""
        from . import compress

        return thaw(compress.entry(self.config, _wildcards(w)["name"]))

    def compress_inputs(self, w: Any) -> dict:
        """The compressor and the vector file (+ a .npy's id list) of a compress job; an output
        extension other than the input's is refused."""
        from . import compress

        w = _wildcards(w)
        return compress.job_inputs(self.config, w["name"], w.get("ext"))

    def compress_npy_inputs(self, w: Any) -> dict:
        """:meth:`compress_inputs` of an entry whose output is a .npy (three files, its own rule)."""
        from . import compress

        return compress.job_inputs(self.config, _wildcards(w)["name"], "npy")

    def compress_parts(self, w: Any) -> list[str]:
        """The row-range parts a sharded entry is gathered from (none when ``shards`` is 1)."""
        from . import compress

        return compress.part_dirs(self.config, _wildcards(w)["name"])

    def compress_outputs(self, w: Any) -> list[str]:
        from . import compress

        name = _wildcards(w)["name"]
        return compress.output_files(name, compress.entry(self.config, name))

    def compress_targets(self) -> list[str]:
        """Every ``compress:`` output, and the FAISS index of each entry with ``faiss: true``."""
        from . import compress

        return compress.targets(self.config)

    # ---- outputs that carry no backbone ----------------------------------------------------
    def check_default_backbone(self, root: str | Path = ".") -> None:
        """Refuse a switch of the default backbone that would overwrite another backbone's
        headline results and default tables (:func:`check_default_backbone`)."""
        check_default_backbone(self.config, {"headline": paths.HEADLINE, "runs_table": paths.RUNS_TSV}, root)


# the grammar of every path wildcard (rules/common.smk: wildcard_constraints)
WILDCARDS = {
    "dataset": paths.NAME, "backbone": paths.NAME, "method": paths.NAME, "zipname": paths.NAME,
    "experiment": paths.NAME, "k": r"\d+", "seed": r"\d+", "stage": "|".join(STAGES),
    "negatives": NEGATIVES_WILDCARD, "study": "|".join(SELECTION_STUDIES), "part": paths.PART,
}


def resolve(config: Mapping, registry: Mapping[str, Mapping], *, defaults: Mapping | None = None,
            registry_file: str = "the dataset registry", environ: Mapping[str, str] = os.environ) -> Plan:
    """The plan of a validated config: a copy in ``defaults``' key order (the same settings give
    the same job parameters however the config was composed), with the generated method variants
    (:func:`expand`), checked (:func:`check`), frozen. ``config`` is not changed."""
    cfg = canonical_order(thaw(config), defaults) if defaults is not None else thaw(config)
    cfg = expand(cfg)
    check(cfg, registry)
    frozen = freeze(cfg)
    methods = {}
    for name in cfg["methods"]:
        m_type = method_type(cfg, name)
        methods[name] = MethodVariant(
            name=name, type=m_type, entry=frozen["methods"][name], hparams=freeze(method_hparams(cfg, name)),
            supervised=needs_triplets(cfg, name), negatives=method_negatives(cfg, name),
            selected=cfg["methods"][name].get("selected"), arrival=bool(cfg["methods"][name].get("arrival")))
    backbones = {name: Backbone(name=name, entry=frozen["backbones"][name],
                                model_dir=paths.model_dir(name) if "source" in bb else None,
                                shards=int(bb.get("shards", 1)))
                 for name, bb in cfg["backbones"].items()}
    return Plan(config=frozen, registry=freeze(registry), registry_file=registry_file,
                local_beir=local_beir_dir(cfg, environ), methods=MappingProxyType(methods),
                backbones=MappingProxyType(backbones))
