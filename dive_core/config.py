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
    return config["methods"][method].get("negatives", config["triplets"]["negatives"])


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
    """The (dataset, backbone, method, k, stage, seed) runs of an experiment (default backbone)."""
    exp = experiment(config, name)
    bb = config["backbone"]
    return [dict(dataset=ds, backbone=bb, method=m, k=method_k(config, bb, m, exp["dim"]),
                 stage=exp["stage"], seed=seed)
            for ds in exp["datasets"] for m in exp["methods"] for seed in exp["seeds"]]


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
    used = {m for name in enabled_experiments(config) for m in experiment(config, name)["methods"]}
    bname = config["backbone"]
    bb = config["backbones"][bname]
    for mname in config["methods"]:
        try:
            hp = method_hparams(config, mname)
        except (KeyError, ValueError) as exc:
            raise ConfigError(str(exc).strip("'\"")) from None
        if "heads" in hp and mname in used:
            for which, k in bb["dims"].items():
                if k * int(hp["heads"]) > bb["dim"]:
                    raise ConfigError(
                        f"config: methods.{mname}: k*H = {k}*{hp['heads']} = {k * hp['heads']} "
                        f"exceeds d = {bb['dim']} of backbone {bname} at its {which} dimension "
                        f"(backbones.{bname}.dims.{which}); DIVE needs k*H <= d")
