"""The scan of existing result files: outputs whose paths carry no backbone but hold another
backbone's results than the default one (:func:`check_default_backbone`)."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path
from typing import Mapping

from ..config import ConfigError


# --------------------------------------------------------------------------- the default-backbone guard
def foreign_backbone_outputs(config: Mapping, patterns: Mapping[str, str],
                             root: str | Path = ".") -> list[tuple[str, str]]:
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
    shown = "; ".join(f"{p} ({bb})" for p, bb in found[:3]) + (
        f"; and {len(found) - 3} more" if len(found) > 3 else "")
    raise ConfigError(
        f"config: backbone = {config['backbone']!r}, but outputs whose paths carry no backbone hold another "
        f"backbone's results: {shown}. Running would overwrite them. To add a backbone, keep `backbone:` and "
        "enable experiments.second_backbone (or give a study `backbones: [...]`): its runs and table get their "
        "own paths. To switch the default backbone, first move results/tables, results/figures and the "
        "headline results results/<dataset>/<method>/ aside.")
