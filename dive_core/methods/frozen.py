"""Frozen: the normalised full-dimension backbone embedding (uncompressed reference)."""

from .base import Method, register


@register
class Frozen(Method):
    type = "frozen"

    def build(self) -> None:
        """Nothing to build: k = d is checked by its spec."""

    def transform(self, x):
        return x

    def layers(self, side="document"):
        return []
