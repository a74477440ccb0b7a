"""Value checks for hyperparameters, shared by the baseline methods (autoencoder, mrl,
search_adaptor). ``Method.__init__`` already rejects missing and unknown names; these reject
wrong values with an error that names the method, the key and the value. Private module (its
name starts with ``_``), so method discovery skips it."""

from __future__ import annotations

import math
from typing import Any, Mapping


def _fail(method: str, key: str, value: Any, want: str) -> ValueError:
    return ValueError(f"method {method!r}: hyperparameter {key!r} must be {want}, got {value!r}")


def as_int(method: str, hp: Mapping[str, Any], key: str, minimum: int = 1) -> int:
    """An integer >= ``minimum`` (integral floats such as 2048.0 are accepted; bools are not)."""
    v = hp[key]
    if isinstance(v, str):  # e.g. from snakemake --config, which passes nested values as text
        raise _fail(method, key, v, f"an integer >= {minimum} (a string was given: --config passes nested values "
                                    "as text; set it in a --configfile)")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not float(v).is_integer():
        raise _fail(method, key, v, f"an integer >= {minimum}")
    if int(v) < minimum:
        raise _fail(method, key, v, f"an integer >= {minimum}")
    return int(v)


def as_float(method: str, hp: Mapping[str, Any], key: str, positive: bool = False) -> float:
    """A finite real number, >= 0 (or > 0 with ``positive``). Numeric strings such as '1e-3'
    (which YAML 1.1 reads as a string) are accepted, as ``float()`` does for DIVE."""
    v = hp[key]
    want = "a finite number " + ("> 0" if positive else ">= 0")
    if isinstance(v, bool):
        raise _fail(method, key, v, want)
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise _fail(method, key, v, want) from None
    if not math.isfinite(x) or x < 0 or (positive and x == 0):
        raise _fail(method, key, v, want)
    return x


def check_shared(method: str, hp: Mapping[str, Any]) -> None:
    """The shared training keys: lr > 0, weight_decay >= 0, epochs/batch_size/hidden >= 1."""
    as_float(method, hp, "lr", positive=True)
    as_float(method, hp, "weight_decay")
    for key in ("epochs", "batch_size", "hidden"):
        as_int(method, hp, key)


def as_choice(method: str, hp: Mapping[str, Any], key: str, choices: tuple[str, ...]) -> str:
    """One of ``choices``."""
    v = hp[key]
    if v not in choices:
        raise _fail(method, key, v, f"one of {list(choices)}")
    return v


def as_bool(method: str, hp: Mapping[str, Any], key: str) -> bool:
    """A YAML boolean (true / false), not a string or a number."""
    v = hp[key]
    if not isinstance(v, bool):
        raise _fail(method, key, v, "true or false")
    return v
