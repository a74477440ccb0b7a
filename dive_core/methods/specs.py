"""What the workflow knows of each method type without importing torch: whether it trains on
relevance labels (and so on the shared triplets), the names of its hyperparameters, how a config
entry resolves into them, and the checks of their values.

The run plan (which jobs exist, their inputs, their parameters) is built from this module alone,
so it is the same in any environment that drives Snakemake, with or without torch. The
implementations in this package (one module per type, registered with
:func:`dive_core.methods.base.register`) take ``supervised`` and ``hyperparameters`` from here, and
``Method.__init__`` runs :meth:`MethodSpec.check` before building anything.

Adding a method = a :class:`MethodSpec` in :data:`SPECS` (or :func:`add_spec`), a registered class
in a new module of this package, and an entry under ``methods:`` in the config.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

# Shared training keys (the config's ``training:`` section is their fallback).
SHARED = ("lr", "epochs", "batch_size", "hidden", "weight_decay")
# Keys a method entry in the config may carry besides its hyperparameters.
ENTRY_KEYS = {"type", "negatives", "description", "selected", "doc_disjoint", "arrival"}
SIDES = ("document", "query")  # what Method.compress maps: the corpus side or the query side
UNCOMPRESSED_TYPES = {"frozen"}  # always at the backbone's full dimension


# --------------------------------------------------------------------------- value checks
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
    (which YAML 1.1 reads as a string) are accepted, as ``float()`` does."""
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


def check_shared(method: str, hp: Mapping[str, Any],
                 ints: tuple[str, ...] = ("epochs", "batch_size", "hidden")) -> None:
    """The shared training keys: lr > 0, weight_decay >= 0, ``ints`` (epochs/batch_size/hidden) >= 1."""
    as_float(method, hp, "lr", positive=True)
    as_float(method, hp, "weight_decay")
    for key in ints:
        as_int(method, hp, key)


def check_heads(dim: int, k: int, heads: int) -> None:
    """DIVE needs ``k * H <= d`` coordinates; anything else is a configuration error."""
    if k < 1 or heads < 1:
        raise ValueError(f"k and H must be positive (k={k}, H={heads})")
    if k * heads > dim:
        raise ValueError(
            f"invalid DIVE configuration: k*H = {k}*{heads} = {k * heads} exceeds the embedding "
            f"dimension d = {dim}; lower the output dimension k or the number of heads H"
        )


def _no_checks(d: int, k: int, hp: Mapping[str, Any]) -> None:
    """Nothing to check beyond 1 <= k <= d."""


def _frozen(d: int, k: int, hp: Mapping[str, Any]) -> None:
    if k != d:
        raise ValueError(f"frozen is uncompressed: its dimension must be d={d}, not {k}")


def _autoencoder(d: int, k: int, hp: Mapping[str, Any]) -> None:
    check_shared("autoencoder", hp)


def _dive(d: int, k: int, hp: Mapping[str, Any]) -> None:
    check_shared("dive", hp)
    for key in ("margin", "lambda_view", "gamma_geo"):
        as_float("dive", hp, key)
    as_float("dive", hp, "tau", positive=True)
    as_choice("dive", hp, "triplet_loss", ("hinge", "softplus"))
    check_heads(d, k, as_int("dive", hp, "heads"))


def _dive_corpus(d: int, k: int, hp: Mapping[str, Any]) -> None:
    _dive(d, k, hp)
    as_choice("dive_corpus", hp, "init", ("identity", "pca"))
    as_int("dive_corpus", hp, "corpus_docs", minimum=0)
    as_float("dive_corpus", hp, "gamma_corpus")
    if (int(hp["corpus_docs"]) == 0) != (float(hp["gamma_corpus"]) == 0):
        raise ValueError("method 'dive_corpus': corpus_docs and gamma_corpus are both 0 (no corpus stream) or "
                         f"both > 0, got corpus_docs = {hp['corpus_docs']}, gamma_corpus = {hp['gamma_corpus']}")


def _mrl(d: int, k: int, hp: Mapping[str, Any]) -> None:
    check_shared("mrl", hp)
    for key in ("alpha", "beta", "gamma_rank"):
        as_float("mrl", hp, key)
    as_int("mrl", hp, "min_prefix")
    as_int("mrl", hp, "topk_neighbors")
    as_choice("mrl", hp, "l1_reduction", ("sum", "mean"))
    if as_choice("mrl", hp, "schedule", ("joint", "two_stage")) == "two_stage" and as_int("mrl", hp, "epochs") < 2:
        raise ValueError("method 'mrl': schedule 'two_stage' needs epochs >= 2")


def _search_adaptor(d: int, k: int, hp: Mapping[str, Any]) -> None:
    check_shared("search_adaptor", hp)
    for key in ("alpha", "beta"):
        as_float("search_adaptor", hp, key)
    as_int("search_adaptor", hp, "predictor_hidden")
    as_choice("search_adaptor", hp, "l1_reduction", ("sum", "mean"))
    as_bool("search_adaptor", hp, "prediction_stop_gradient")


def stage_widths(d: int, k: int) -> list[int]:
    """SMEC's widths ``[d, w_1, ..., k]`` with ``w_{s+1} = max(w_s // 2, k)`` (decision 1 of
    :mod:`dive_core.methods.smec`): one training stage per step."""
    if not 1 <= k <= d:
        raise ValueError(f"smec: need 1 <= k <= d, got k={k}, d={d}")
    widths = [int(d)]
    while widths[-1] > k:
        widths.append(max(widths[-1] // 2, int(k)))
    return widths


def _smec(d: int, k: int, hp: Mapping[str, Any]) -> None:
    check_shared("smec", hp)
    stages = len(stage_widths(d, k)) - 1
    if isinstance(hp["epochs"], int) and hp["epochs"] < stages:
        raise ValueError(f"method 'smec': epochs = {hp['epochs']} cannot be split over its {stages} stages at "
                         f"d = {d} -> k = {k} (widths {stage_widths(d, k)}); give it at least {stages} epochs")
    as_int("smec", hp, "queue_size")
    as_int("smec", hp, "queue_neighbors")
    as_float("smec", hp, "gumbel_tau", positive=True)
    as_float("smec", hp, "xbm_weight")
    as_float("smec", hp, "ads_lr", positive=True)


def _query_side(d: int, k: int, hp: Mapping[str, Any]) -> None:
    check_shared("query_side", hp)
    as_choice("query_side", hp, "doc_map", ("pca", "autoencoder", "truncate"))
    as_choice("query_side", hp, "query_map", ("linear", "mlp", "procrustes"))
    as_choice("query_side", hp, "loss", ("hinge", "softmax"))
    for key in ("anchor", "margin", "gamma_geo"):
        as_float("query_side", hp, key)
    as_float("query_side", hp, "tau", positive=True)
    as_float("query_side", hp, "doc_lr", positive=True)
    as_int("query_side", hp, "doc_epochs")


def _query_side_known(d: int, k: int, hp: Mapping[str, Any]) -> None:
    _query_side(d, k, hp)
    as_float("query_side_known", hp, "offset_anchor")


# CSR (dive_core/methods/csr.py): no MLP, so no `hidden`; its width is expansion x d
CSR_SHARED = ("lr", "epochs", "batch_size", "weight_decay")
CSR_FREE = ("expansion", "topk", "k_aux", "dead_threshold", "beta", *CSR_SHARED)


def csr_width(d: int, hp: Mapping[str, Any], method: str = "csr") -> int:
    """CSR's output dimension H = expansion x d: the latents of its k-sparse code."""
    return as_int(method, hp, "expansion") * int(d)


def _csr_free(d: int, k: int, hp: Mapping[str, Any], method: str = "csr_free") -> None:
    check_shared(method, hp, ints=("epochs", "batch_size"))
    width = csr_width(d, hp, method)
    topk = as_int(method, hp, "topk")
    if 4 * topk > width:  # the loss reconstructs from the top 4k latents as well
        raise _fail(method, "topk", topk, f"at most H/4 = {width // 4} (H = expansion x d = {width}: the loss "
                                          "also reconstructs from the top 4 x topk latents)")
    as_int(method, hp, "k_aux", minimum=0)
    as_int(method, hp, "dead_threshold", minimum=0)
    as_float(method, hp, "beta")


def _csr(d: int, k: int, hp: Mapping[str, Any]) -> None:
    _csr_free(d, k, hp, "csr")
    as_float("csr", hp, "gamma")


# --------------------------------------------------------------------------- the specs
@dataclass(frozen=True)
class MethodSpec:
    type: str
    #: True if fitting uses relevance labels (the shared triplets); False for label-free methods.
    supervised: bool
    hyperparameters: tuple[str, ...]
    #: ``check(d, k, hp)`` raises ValueError naming the key for a wrong value (hp: every name given).
    check: Callable[[int, int, Mapping[str, Any]], None] = _no_checks
    #: False for a method whose ``fit`` reads nothing (frozen, truncate): the arrival study shares
    #: its runs with every other study instead of refitting it on known documents.
    fitted: bool = True
    #: ``output_dim(d, hp)``: the output dimension of a type whose hyperparameters fix it, whatever
    #: dimension an experiment asks for (csr: its H = expansion x d latents, which may exceed d);
    #: None: the experiment's k, with ``1 <= k <= d``.
    output_dim: Callable[[int, Mapping[str, Any]], int] | None = None
    #: ``active(hp)``: the non-zeros a stored vector keeps, for a type whose output is a k-sparse
    #: code (csr: ``topk``); None: a dense vector. Decides how a vector is stored, searched and
    #: counted (:func:`stored_bytes`, :mod:`dive_core.sparse`).
    active: Callable[[Mapping[str, Any]], int] | None = None

    def dimension(self, d: int, k: int, hp: Mapping[str, Any]) -> int:
        """The output dimension of a method of this type on ``d``-dimensional embeddings when ``k``
        is asked for: ``d`` for an uncompressed type (frozen), :attr:`output_dim` where the type
        fixes it, else ``k``."""
        if self.type in UNCOMPRESSED_TYPES:
            return int(d)
        return int(k) if self.output_dim is None else int(self.output_dim(d, hp))

    def validate(self, d: int, k: int, hp: Mapping[str, Any]) -> None:
        """What every method of this type must satisfy before anything is built: ``1 <= k <= d``
        (``k`` = :attr:`output_dim` for a type that fixes it), then :attr:`check` (used by
        ``Method.__init__`` and by the plan's checks alike)."""
        if self.output_dim is not None:
            self.check(d, k, hp)
            if k != self.output_dim(d, hp):
                raise ValueError(f"method {self.type!r}: output dimension k={k} must be its own, "
                                 f"{self.output_dim(d, hp)} at d={d} (from its hyperparameters)")
            return
        if not 1 <= k <= d:
            raise ValueError(f"method {self.type!r}: output dimension k={k} must be in [1, d={d}]")
        self.check(d, k, hp)


SPECS: dict[str, MethodSpec] = {s.type: s for s in (
    MethodSpec("frozen", False, (), _frozen, fitted=False),
    MethodSpec("truncate", False, (), fitted=False),
    MethodSpec("pca", False, ()),
    MethodSpec("autoencoder", False, SHARED, _autoencoder),
    MethodSpec("mrl", True, ("alpha", "beta", "gamma_rank", "min_prefix", "topk_neighbors", "l1_reduction",
                             "schedule", *SHARED), _mrl),
    MethodSpec("search_adaptor", True, ("alpha", "beta", "predictor_hidden", "l1_reduction",
                                        "prediction_stop_gradient", *SHARED), _search_adaptor),
    MethodSpec("smec", True, ("queue_size", "queue_neighbors", "gumbel_tau", "xbm_weight", "ads_lr", *SHARED),
               _smec),
    MethodSpec("dive", True, ("margin", "lambda_view", "gamma_geo", "tau", "heads", "triplet_loss", *SHARED),
               _dive),
    MethodSpec("dive_corpus", True, ("margin", "lambda_view", "gamma_geo", "tau", "heads", "triplet_loss", "init",
                                     "corpus_docs", "gamma_corpus", *SHARED), _dive_corpus),
    MethodSpec("query_side", True, ("doc_map", "query_map", "loss", "anchor", "margin", "tau", "gamma_geo", "doc_lr",
                                    "doc_epochs", *SHARED), _query_side),
    MethodSpec("query_side_known", True, ("doc_map", "query_map", "loss", "anchor", "margin", "tau", "gamma_geo",
                                          "doc_lr", "doc_epochs", "offset_anchor", *SHARED), _query_side_known),
    MethodSpec("csr", True, (*CSR_FREE[:5], "gamma", *CSR_SHARED), _csr, output_dim=csr_width,
               active=lambda hp: int(hp["topk"])),
    MethodSpec("csr_free", False, CSR_FREE, _csr_free, output_dim=lambda d, hp: csr_width(d, hp, "csr_free"),
               active=lambda hp: int(hp["topk"])),
)}


def stored_bytes(type_name: str, k: int, hp: Mapping[str, Any]) -> int:
    """Bytes one vector of a ``type_name`` method with output dimension ``k`` takes as the main
    tables store it: a float32 vector (4k), or for a k-sparse type its code of ``active(hp)``
    (index, fp16 value) pairs (:func:`dive_core.sparse.code_bytes`)."""
    from ..retrieval import bytes_per_vector
    from ..sparse import SPARSE_ENCODING

    active = spec(type_name).active
    if active is None:
        return bytes_per_vector("float32", int(k))
    return bytes_per_vector(SPARSE_ENCODING, int(k), active(hp))


def add_spec(spec: MethodSpec) -> MethodSpec:
    """Declare a method type outside this module (a plug-in, a test); the same spec twice is fine."""
    if SPECS.get(spec.type, spec) != spec:
        raise TypeError(f"method type {spec.type!r} is already declared differently")
    SPECS[spec.type] = spec
    return spec


def spec(type_name: str) -> MethodSpec:
    if type_name not in SPECS:
        raise KeyError(f"unknown method type {type_name!r}; known: {sorted(SPECS)}")
    return SPECS[type_name]


def resolve_hparams(name: str, entry: Mapping[str, Any], training: Mapping[str, Any]) -> dict[str, Any]:
    """The hyperparameters of config entry ``methods.<name>``: its own values, falling back to
    the shared ``training`` section for names the method declares; missing or unknown keys are
    errors that name the key."""
    s = spec(entry.get("type", name))
    unknown = set(entry) - set(s.hyperparameters) - ENTRY_KEYS
    if unknown:
        raise ValueError(
            f"config: methods.{name}: unknown key(s) {sorted(unknown)} for method type "
            f"{s.type!r}; it accepts {sorted(s.hyperparameters)}"
        )
    out = {}
    for key in s.hyperparameters:
        if key in entry:
            out[key] = entry[key]
        elif key in training:
            out[key] = training[key]
        else:
            raise ValueError(f"config: methods.{name}: missing hyperparameter {key!r} (type {s.type!r})")
    return out
