"""The error every part of dive-compress raises for what cannot be used as asked."""

from __future__ import annotations


class CompressError(ValueError):
    """An input, model or output that cannot be used as asked; the message names the file."""
