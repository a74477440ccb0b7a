"""The plan's vocabulary: the selection studies, the studies over their own measurement JSONs, an
experiment's stages, dimensions and triplets, the triplet sets (the ``{negatives}`` wildcard, encoded
and decoded only here), and the grammar of every path wildcard built from them (:data:`WILDCARDS`)."""

from __future__ import annotations

import re

from .. import paths
from ..config import ConfigError

SELECTION_STUDIES = ("lr_audit", "dive_config", "arrival_variants")
OWN_JSON_STUDIES = ("efficiency", "frontier", "budget")  # studies over their own measurement JSONs, not over runs
# an experiment's keys (config `experiments.<name>`): its stage, its output dimension, its triplets
STAGES = ("select", "final")  # select: train on train, score validation queries; final: score test queries
DIMS = ("primary", "secondary")  # which of the backbone's `dims`
EXPERIMENT_TRIPLETS = ("default", "doc_disjoint")


# --------------------------------------------------------------------------- triplet sets
NEGATIVES = ("random", "hard")
DOC_DISJOINT = "docdisjoint"
ARRIVAL = "arrival"
TRIPLET_VARIANTS = (DOC_DISJOINT, ARRIVAL)
NEGATIVES_WILDCARD = rf"({'|'.join(NEGATIVES)})(-({'|'.join(TRIPLET_VARIANTS)}))?"  # the {negatives} path wildcard


def negatives_tag(mode: str, variant: str | None = None) -> str:
    """The ``{negatives}`` wildcard of a triplet set: ``random`` / ``hard`` negatives, with
    ``-docdisjoint`` when every document relevant to an evaluated query is excluded, ``-arrival``
    when only the known documents of the arrival split (:func:`dive_core.splits.make_arrival_manifest`)
    may be a positive or a negative."""
    if mode not in NEGATIVES:
        raise ConfigError(f"config: negatives {mode!r}: expected one of {list(NEGATIVES)}")
    if variant is not None and variant not in TRIPLET_VARIANTS:
        raise ConfigError(f"triplet variant {variant!r}: expected one of {list(TRIPLET_VARIANTS)}")
    return f"{mode}-{variant}" if variant else mode


def parse_negatives(tag: str) -> tuple[str, str | None]:
    """``(mode, variant)`` of a ``{negatives}`` wildcard (the inverse of :func:`negatives_tag`);
    ``variant``: None, :data:`DOC_DISJOINT` or :data:`ARRIVAL`."""
    if not re.fullmatch(NEGATIVES_WILDCARD, tag):
        raise ValueError(f"negatives {tag!r}: expected {NEGATIVES_WILDCARD}")
    mode, _, variant = tag.partition("-")
    return mode, variant or None


# the grammar of every path wildcard (rules/common.smk: wildcard_constraints)
WILDCARDS = {
    "dataset": paths.NAME, "backbone": paths.NAME, "method": paths.NAME, "zipname": paths.NAME,
    "experiment": paths.NAME, "k": r"\d+", "seed": r"\d+", "stage": "|".join(STAGES),
    "negatives": NEGATIVES_WILDCARD, "study": "|".join(SELECTION_STUDIES), "part": paths.PART,
    "budget": r"\d+",
}
