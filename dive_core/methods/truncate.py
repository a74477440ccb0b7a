"""Truncate: ``normalise(z[:k])``, the first k coordinates of the frozen embedding (DIVE's
starting point, since DIVE's adapter is the identity at initialisation)."""

from .base import Method, register


@register
class Truncate(Method):
    type = "truncate"

    def transform(self, x):
        return x[:, : self.k]

    def layers(self, side="document"):
        from ..layers import identity_rows

        return [identity_rows(self.d, slice(0, self.k))]

    def reconstruction_error(self, x):
        return x[:, self.k:].norm(dim=-1)  # the dropped coordinates
