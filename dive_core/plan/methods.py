"""The method entries of the config: type, output dimension k, resolved hyperparameters, whether a
method trains on triplets and on which triplet set, and the triplet and arrival settings. The
method metadata comes from :mod:`dive_core.methods.specs` (no torch)."""

from __future__ import annotations

from typing import Mapping

from ..config import ConfigError
from ..methods.specs import UNCOMPRESSED_TYPES, resolve_hparams, spec
from .grammar import ARRIVAL, DOC_DISJOINT, negatives_tag


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
    ``backbone``; uncompressed methods (frozen) always have the backbone's full dimension, and a
    type whose hyperparameters fix its output dimension (csr: expansion x d) has that one."""
    bb = config["backbones"][backbone]
    if method_type(config, method) in UNCOMPRESSED_TYPES:
        return int(bb["dim"])
    s = spec(method_type(config, method))
    if s.output_dim is not None:
        try:
            return s.dimension(int(bb["dim"]), 0, method_hparams(config, method))
        except ValueError as exc:
            raise ConfigError(f"config: methods.{method}: {exc}") from None
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
