"""Loading the workflow configuration: YAML files with errors that name the file and line, the
merged config in the defaults file's key order, the dataset registry, the local BEIR directory.
The JSON schema in ``config/schema/`` checks the config's shape; :func:`dive_core.plan.check`
checks what a schema cannot. No Snakemake import."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

import yaml

ENV_BEIR = "BEIR_DATA_DIR"


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
