"""Frozen: the normalised full-dimension backbone embedding (uncompressed reference)."""

from .base import Method, register


@register
class Frozen(Method):
    type = "frozen"

    def build(self) -> None:
        if self.k != self.d:
            raise ValueError(f"frozen is uncompressed: its dimension must be d={self.d}, not {self.k}")

    def transform(self, x):
        return x
