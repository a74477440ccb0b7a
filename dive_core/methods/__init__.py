"""Compression methods, one module each, behind :class:`~dive_core.methods.base.Method`."""

from .base import METHODS, Method, discover, method_class, new_method, register, resolve_hparams

discover()

__all__ = ["METHODS", "Method", "discover", "method_class", "new_method", "register", "resolve_hparams"]
