"""Semantic checks and helpers for the workflow configuration (the JSON schema in
``config/schema/`` checks its shape; this module checks what a schema cannot: names that must
exist elsewhere, hyperparameters of each method, DIVE's k*H <= d, ...). No Snakemake import."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

import yaml

ENV_BEIR = "BEIR_DATA_DIR"
UNCOMPRESSED_TYPES = {"frozen"}


class ConfigError(ValueError):
    """A configuration problem; the message names the key."""


def load_yaml(path: str | os.PathLike) -> Any:
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as fh:
            return yaml.safe_load(fh)
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ConfigError(f"{where}: invalid YAML: {getattr(exc, 'problem', exc)}") from exc


def canonical_order(config: Any, template: Any) -> Any:
    """``config`` with its mapping keys in ``template``'s order (recursively), other keys after
    them in their own order. Snakemake compares a job's params with the recorded ones in key
    order, and the merged config's order depends on how it was composed (``--configfile
    config/paper.yaml`` puts its keys first, ``--configfile config/config.yaml config/paper.yaml``
    does not): ordering every config like the defaults file makes the same settings the same
    params however they were given."""
    if not isinstance(config, Mapping):
        return config
    template = template if isinstance(template, Mapping) else {}
    keys = [k for k in template if k in config] + [k for k in config if k not in template]
    return {k: canonical_order(config[k], template.get(k)) for k in keys}


def load_registry(path: str | os.PathLike) -> dict[str, dict]:
    reg = load_yaml(path)
    if not isinstance(reg, dict):
        raise ConfigError(f"{path}: expected a mapping of dataset names")
    for name, entry in reg.items():
        if not isinstance(entry, dict) or "subdir" not in entry:
            raise ConfigError(f"{path}: {name}: every dataset needs a 'subdir'")
        if not entry.get("local_only") and not entry.get("url"):
            raise ConfigError(f"{path}: {name}: needs 'url' (or local_only: true)")
    return reg


def local_beir_dir(config: Mapping, environ: Mapping[str, str] = os.environ) -> str | None:
    """The configured local BEIR directory: config key ``beir_data_dir``, else $BEIR_DATA_DIR."""
    value = config.get("beir_data_dir") or environ.get(ENV_BEIR) or None
    return str(Path(value).expanduser().resolve()) if value else None


def method_type(config: Mapping, method: str) -> str:
    entry = config["methods"].get(method)
    if entry is None:
        raise ConfigError(f"config: unknown method {method!r}; defined under methods: {sorted(config['methods'])}")
    return entry.get("type", method)


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
    from .methods import resolve_hparams

    return resolve_hparams(method, config["methods"][method], config.get("training", {}))


def method_negatives(config: Mapping, method: str) -> str:
    """The triplet set a method trains on: ``random`` or ``hard`` negatives, with the suffix
    ``-docdisjoint`` for the document-disjoint variant (``doc_disjoint: true``)."""
    entry = config["methods"][method]
    neg = entry.get("negatives", config["triplets"]["negatives"])
    return f"{neg}-{DOC_DISJOINT}" if entry.get("doc_disjoint") else neg


# ---- generated method variants (selection candidates, head counts, document-disjoint runs) ----
LABEL_FREE_TYPES = {"frozen", "truncate", "pca", "autoencoder"}  # fit without relevance labels
SELECTION_STUDIES = ("lr_audit", "dive_config")
SELECTION_PATH = "results/selection/{study}.json"
DOC_DISJOINT = "docdisjoint"


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
    return sel


def selection_candidates(config: Mapping, study: str) -> dict[str, list[tuple[str, dict]]]:
    """``{base method: [(candidate method name, overrides), ...]}`` of a selection study.

    ``lr_audit``: each audited method at each of its learning rates (``{base}-lr{value}``);
    ``dive_config``: the product of ``selection.dive_grid`` (``dive-{key}{value}...``); an empty
    grid is the paper's single point, whose only candidate is ``dive`` itself. A candidate whose
    overrides equal the base entry's values is the base method itself (its runs are shared)."""
    import itertools

    sel = selection_settings(config)
    if study == "lr_audit":
        grids = {base: {"lr": list(values)} for base, values in sel["lr_audit"].items()}
    elif study == "dive_config":
        grids = {"dive": dict(sel["dive_grid"])}
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
            same = all(k in entry and entry[k] == v for k, v in over.items())
            name = base if same else base + "-" + "-".join(f"{k.replace('_', '')}{_value_tag(v)}"
                                                            for k, v in over.items())
            cands.append((name, over))
        out[base] = cands
    return out


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


def expand(config: dict) -> None:
    """Add the generated method variants to ``config["methods"]`` and resolve every study's
    method list (``experiments.<name>.methods``) in place. Idempotent."""
    config.setdefault("selection", {})
    base_entries = {n: dict(e) for n, e in config["methods"].items()}
    for study in SELECTION_STUDIES:
        for base, cands in selection_candidates(config, study).items():
            for name, over in cands:
                if name != base:
                    entry = {k: v for k, v in base_entries[base].items() if k != "selected"}
                    _add_method(config, name, {**entry, **over})
    bb = config["backbones"][config["backbone"]]
    for ename, exp in (config.get("experiments") or {}).items():
        study = exp.get("study", "main")
        if study == "heads":
            base = exp.get("base", "dive")
            k = int(bb["dims"][exp.get("dim", "primary")])
            variants, note = heads_variants(config, base, exp.get("heads", [2, 4, 8]), k, int(bb["dim"]))
            for h, name in variants:
                if name != base:
                    _add_method(config, name, {**base_entries[base], "heads": h})
            exp["methods"] = [name for _, name in variants]
            exp["heads_note"] = note
        elif study == "lr_audit":
            cands = selection_candidates(config, "lr_audit")
            exp["methods"] = [n for c in cands.values() for n, _ in c] + [exp.get("reference", "dive")]
            exp["datasets"] = selection_settings(config)["datasets"]
            exp["seeds"] = [selection_settings(config)["seed"]]
            exp["stage"] = "select"
        if exp.get("triplets") == "doc_disjoint":
            names = []
            for m in exp.get("methods", []):
                entry = config["methods"].get(m)
                if entry is None or entry.get("type", m) in LABEL_FREE_TYPES or entry.get("doc_disjoint"):
                    names.append(m)
                    continue
                name = f"{m}-{DOC_DISJOINT}"
                _add_method(config, name, {**entry, "doc_disjoint": True})
                names.append(name)
            exp["methods"] = names


def selection_input(config: Mapping, method: str, stage: str = "final") -> str | None:
    """The selection JSON a method's ``stage`` jobs read their picked hyperparameters from, or
    None. ``selected: <study>/<base>`` in the method entry; a study with a single candidate (the
    paper's fixed DIVE point) picks nothing, so nothing depends on it. A select-stage run of a
    method that is itself one of the study's candidates trains at its own values: the pick is made
    from that run (``dive`` with ``selected: dive_config/dive`` and a grid holding its values),
    so reading the pick there would be a dependency cycle."""
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
    return SELECTION_PATH.format(study=study)


def apply_selection(hp: Mapping, selection: Mapping, ref: str) -> tuple[dict, dict]:
    """``hp`` with the picked overrides of ``ref`` = '<study>/<base>' from a selection JSON."""
    base = str(ref).partition("/")[2]
    try:
        over = selection["methods"][base]["pick"]["overrides"]
    except KeyError:
        raise ConfigError(f"selection JSON of {selection.get('study')!r} has no pick for {base!r}") from None
    return {**hp, **over}, dict(over)


def triplet_cap(config: Mapping, dataset: str) -> int | None:
    """``triplets.max_per_query``: null (the paper's protocol: every triplet), an int, or a
    mapping dataset -> int (datasets not listed: no cap)."""
    cap = config["triplets"].get("max_per_query")
    if isinstance(cap, Mapping):
        cap = cap.get(dataset)
    return None if cap is None else int(cap)


def experiment(config: Mapping, name: str) -> dict:
    """An experiment with its defaults filled in: all configured datasets and seeds, the
    ``final`` stage (test queries) and the ``primary`` dimension."""
    exps = config.get("experiments") or {}
    if name not in exps:
        raise ConfigError(f"config: no experiment {name!r} under experiments: (have {sorted(exps)})")
    exp = dict(exps[name])
    exp.setdefault("datasets", list(config["datasets"]))
    exp.setdefault("seeds", list(config["seeds"]))
    exp.setdefault("stage", "final")
    exp.setdefault("dim", "primary")
    exp.setdefault("enabled", True)
    return exp


def enabled_experiments(config: Mapping) -> list[str]:
    return [n for n in (config.get("experiments") or {}) if experiment(config, n)["enabled"]]


def experiment_runs(config: Mapping, name: str) -> list[dict]:
    """The (dataset, backbone, method, k, stage, seed) runs of an experiment (its ``backbones``,
    default: the configured backbone)."""
    exp = experiment(config, name)
    return [dict(dataset=ds, backbone=bb, method=m, k=method_k(config, bb, m, exp["dim"]),
                 stage=exp["stage"], seed=seed)
            for bb in exp.get("backbones") or [config["backbone"]]
            for ds in exp["datasets"] for m in exp["methods"] for seed in exp["seeds"]]


_CHECKED: dict[tuple, None] = {}


def foreign_backbone_outputs(config: Mapping, root: str | Path = ".") -> list[tuple[str, str]]:
    """``[(path, backbone)]`` of existing outputs without a backbone in their path (headline
    results ``results/{dataset}/{method}/seed{seed}.json``, the selection JSONs, the tables of
    experiments that follow the default backbone) made from another backbone than
    ``config["backbone"]``."""
    import csv
    import json

    def read(p: Path) -> dict:
        try:
            obj = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return obj if isinstance(obj, dict) else {}

    root, want, found = Path(root), config["backbone"], []
    for p in sorted(root.glob("results/*/*/seed*.json")):
        bb = read(p).get("backbone")
        if bb and bb != want:
            found.append((str(p.relative_to(root)), bb))
    for p in sorted(root.glob("results/selection/*.json")):  # inputs: results/{dataset}/{backbone}/...
        inputs = read(p).get("inputs") or {}
        other = sorted({Path(x).parts[2] for x in inputs if len(Path(x).parts) > 3} - {want})
        found += [(str(p.relative_to(root)), bb) for bb in other]
    for name, exp in (config.get("experiments") or {}).items():
        p = root / "results" / "tables" / f"{name}_runs.tsv"
        if (exp or {}).get("backbones") or not p.exists():
            continue
        with open(p, encoding="utf-8", newline="") as fh:
            other = sorted({row.get("backbone") for row in csv.DictReader(fh, delimiter="\t")} - {want, None, ""})
        found += [(str(p.relative_to(root)), bb) for bb in other]
    return found


def check_default_backbone(config: Mapping, root: str | Path = ".") -> None:
    """Refuse a switch of the default ``backbone`` that would overwrite another backbone's
    results: the headline results and the default studies' tables carry no backbone in their path."""
    found = foreign_backbone_outputs(config, root)
    if not found:
        return
    shown = "; ".join(f"{p} ({bb})" for p, bb in found[:3]) + (f"; and {len(found) - 3} more" if len(found) > 3 else "")
    raise ConfigError(
        f"config: backbone = {config['backbone']!r}, but outputs whose paths carry no backbone hold another "
        f"backbone's results: {shown}. Running would overwrite them. To add a backbone, keep `backbone:` and "
        "enable experiments.second_backbone (or give a study `backbones: [...]`): its runs and table get their "
        "own paths. To switch the default backbone, first move results/tables, results/figures, "
        "results/selection and the headline results results/<dataset>/<method>/ aside.")


def check_method(config: Mapping, mname: str, d: int, k: int, where: str) -> None:
    """Build the method as its jobs will (d, k, resolved hyperparameters): every value's type and
    range is checked by the method itself (a value given on the command line as a string, such
    as heads: '7', is refused, not multiplied), and DIVE's k*H <= d. Errors name the key."""
    from .methods import method_class

    hp = method_hparams(config, mname)
    key = (mname, d, k, repr(sorted(hp.items())))
    if key in _CHECKED:
        return
    try:
        method_class(method_type(config, mname))(d, k, hp, 0, "cpu")
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"config: methods.{mname} ({where}, d = {d}, k = {k}): {exc}") from None
    _CHECKED[key] = None


def check(config: Mapping, registry: Mapping[str, dict], deep: bool = True) -> None:
    """Raise :class:`ConfigError` naming the offending key. ``deep`` also resolves every
    method's hyperparameters (imports the method implementations, hence torch)."""
    for i, ds in enumerate(config["datasets"]):
        if ds not in registry:
            raise ConfigError(f"config: datasets[{i}] = {ds!r} is not in the dataset registry "
                              f"({config.get('dataset_registry')}); known: {sorted(registry)}")
    if config["backbone"] not in config["backbones"]:
        raise ConfigError(f"config: backbone {config['backbone']!r} is not defined under backbones")
    fr = config["split"]["fractions"]
    if abs(sum(fr) - 1.0) > 1e-9:
        raise ConfigError(f"config: split.fractions {fr} must sum to 1")
    for bname, bb in config["backbones"].items():
        for which, k in bb["dims"].items():
            if k > bb["dim"]:
                raise ConfigError(f"config: backbones.{bname}.dims.{which} = {k} exceeds dim {bb['dim']}")
    for ename, exp in (config.get("experiments") or {}).items():
        for i, m in enumerate(exp.get("methods", [])):
            if m not in config["methods"]:
                raise ConfigError(f"config: experiments.{ename}.methods[{i}] = {m!r} is not defined under methods")
        for i, ds in enumerate(exp.get("datasets", []) or []):
            if ds not in registry:
                raise ConfigError(f"config: experiments.{ename}.datasets[{i}] = {ds!r} is not in the dataset registry")
    if not deep:
        return
    for mname in config["methods"]:
        try:
            method_hparams(config, mname)
        except (KeyError, ValueError) as exc:
            raise ConfigError(str(exc).strip("'\"")) from None
        selection_input(config, mname)
    for ename in enabled_experiments(config):
        exp = experiment(config, ename)
        if exp.get("study") == "efficiency":
            continue  # times config `efficiency.method` against frozen
        if not exp.get("methods"):
            raise ConfigError(f"config: experiments.{ename} has no methods")
        for bname in exp.get("backbones") or [config["backbone"]]:
            if bname not in config["backbones"]:
                raise ConfigError(f"config: experiments.{ename}.backbones: {bname!r} is not defined under backbones")
            d = int(config["backbones"][bname]["dim"])
            for mname in exp["methods"]:
                check_method(config, mname, d, method_k(config, bname, mname, exp["dim"]),
                             f"experiments.{ename}, backbone {bname} at its {exp['dim']} dimension")
    for base, values in (selection_settings(config).get("lr_audit") or {}).items():
        if len(values) != 3:
            raise ConfigError(f"config: selection.lr_audit.{base} has {len(values)} candidates; the audit "
                              f"gives every method exactly three (SPEC section 4)")


# ---- job resources ---------------------------------------------------------------------------
# What each rule declares as `resources: mem_mb, runtime`, from the size of the data it reads, so
# that a local run under `--resources mem_mb=N` and a SLURM submission schedule jobs by what
# they hold. Memory: the embedding-reading jobs hold one float32 copy of the corpus matrix plus
# what the method or index needs (peak RSS per stage measured with benchmarks/scale.py, at most
# 2.5x the matrix); text jobs hold the JSONL as Python objects. Runtime: generous wall-clock
# bounds in minutes for a cluster queue. Each retry (`--retries`) asks for 50% more of both.
JOB_RESOURCES = {
    # kind: (fixed MB, MB per MB of text read, MB per MB of matrices read, fixed minutes, minutes
    #        per GB read). Text: JSONL/TSV/JSON inputs; matrices: embedding files and checkpoints.
    "text": (1500, 8.0, 2.0, 15, 60),      # stage_beir, make_splits, triplets (hard negatives: + matrix)
    "embed": (1500, 8.0, 1.0, 60, 600),    # + the backbone's own memory (backbones.<name>.mem_mb)
    "train": (2500, 3.0, 1.5, 60, 240),    # one float32 copy of the matrices, triplets as arrays
    "evaluate": (2000, 3.0, 2.5, 30, 60),  # + the compressed copy, the index, a query batch
    "measure": (2000, 3.0, 3.5, 60, 120),  # efficiency, frontier: several indexes of one corpus
    "small": (1000, 2.0, 0.0, 10, 10),     # tables, selection, headline copies, downloads
}
BACKBONE_MEM_MB = {"sentence_transformers": 2000, "llm2vec": 24000}  # weights + activations, default
MATRIX_SUFFIXES = (".h5", ".pt", ".npy")


def job_resources(kind: str, text_mb: float, matrix_mb: float = 0.0, backbone: Mapping | None = None,
                  attempt: int = 1) -> dict:
    """``{"mem_mb": ..., "runtime": ...}`` for a job of ``kind`` (see :data:`JOB_RESOURCES`)
    reading ``text_mb`` MB of text and ``matrix_mb`` MB of matrices; ``backbone`` (its config
    entry) for embedding jobs. Each retry (``attempt`` > 1) asks for 50% more."""
    import math

    if kind not in JOB_RESOURCES:
        raise ValueError(f"unknown job kind {kind!r}; known: {sorted(JOB_RESOURCES)}")
    fixed, per_text, per_matrix, minutes, per_gb = JOB_RESOURCES[kind]
    if backbone is not None:
        fixed += backbone.get("mem_mb") or BACKBONE_MEM_MB[backbone["family"]]
    grow = 1.0 + 0.5 * (max(int(attempt), 1) - 1)
    return {"mem_mb": math.ceil((fixed + per_text * text_mb + per_matrix * matrix_mb) * grow),
            "runtime": math.ceil((minutes + per_gb * (text_mb + matrix_mb) / 1024) * grow)}


def data_mb(paths, staged_manifest: str = "source.json") -> tuple[float, float] | None:
    """``(text MB, matrix MB)`` that a job reads: its input files, where a staged dataset's
    ``source.json`` stands for every file of its folder. None if an input does not exist yet."""
    sizes = {"text": 0, "matrix": 0}

    def add(f: Path) -> None:
        sizes["matrix" if f.suffix in MATRIX_SUFFIXES else "text"] += f.stat().st_size

    for p in map(Path, paths):
        if not p.exists():
            return None
        if p.name == staged_manifest or p.is_dir():
            for f in (p.parent if p.name == staged_manifest else p).rglob("*"):
                if f.is_file():
                    add(f)
        else:
            add(p)
    return sizes["text"] / 2**20, sizes["matrix"] / 2**20
