"""Compression methods, one module each, behind :class:`~dive_core.methods.base.Method`.

Importing this package imports no torch: :mod:`.specs` (what the run plan needs to know of each
method type) is loaded at once, the implementations on first use of a name below."""

from .specs import SPECS, MethodSpec, add_spec, resolve_hparams, spec

_BASE = ("METHODS", "Method", "discover", "method_class", "new_method", "register")


def __getattr__(name: str):
    if name in _BASE:  # torch-backed: import the implementations now
        from . import base

        base.discover()
        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["SPECS", "MethodSpec", "add_spec", "resolve_hparams", "spec", *_BASE]
