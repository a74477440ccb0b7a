"""Read-only copies of config values and their plain copies back: what the resolved plan holds and
what a job parameter or a record holds."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping


# --------------------------------------------------------------------------- read-only and plain copies
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

