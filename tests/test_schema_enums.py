"""Every enum of the config schema equals the code's own list of the same values, so that a value
added in one place and not the other fails here, not in a user's run."""

from __future__ import annotations

from pathlib import Path

import yaml

from dive_core import backbones, data, plan, splits, training, vectors
from dive_core.compress import config as compress_config
from dive_core.studies import STUDIES

REPO = Path(__file__).resolve().parent.parent
SCHEMA = REPO / "config" / "schema" / "config.schema.yaml"
B = "properties/backbones/additionalProperties"
E = "properties/experiments/additionalProperties/properties"

# schema location of each enum -> the code's list
OWNERS = {
    "properties/beir_local_mode": data.LOCAL_MODES,
    "properties/on_missing_qrels_ids": data.ON_MISSING,
    f"{B}/properties/family": backbones.FAMILIES,
    f"{B}/properties/pooling": backbones.POOLINGS,
    f"{B}/properties/precision": backbones.PRECISIONS,
    f"{B}/allOf/4/if/properties/family": tuple(f for f in backbones.FAMILIES if f != plan.VECTORS),  # encoders
    "properties/triplets/properties/negatives": plan.NEGATIVES,
    "properties/training/properties/precision": training.PRECISIONS,
    "properties/methods/additionalProperties/properties/negatives": plan.NEGATIVES,
    f"{E}/study": tuple(STUDIES),
    f"{E}/triplets": plan.EXPERIMENT_TRIPLETS,
    f"{E}/stage": plan.STAGES,
    f"{E}/dim": plan.DIMS,
    f"{E}/stratum": splits.PICK_STRATA,
    "properties/quantizers/properties/dims/items": plan.DIMS,  # the frontier's quantized dimensions
    "properties/compress/additionalProperties/properties/encoding": vectors.ENCODINGS,
    "properties/compress/additionalProperties/properties/side": compress_config.SIDES,
}


def enums(node, path=()):
    if isinstance(node, dict):
        if "enum" in node:
            yield "/".join(path), node["enum"]
        for k, v in node.items():
            yield from enums(v, (*path, str(k)))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from enums(v, (*path, str(i)))


def test_every_schema_enum_has_an_owner_in_the_code_and_equals_it():
    found = dict(enums(yaml.safe_load(SCHEMA.read_text(encoding="utf-8"))))
    assert set(found) == set(OWNERS), f"schema enums without an owner here: {set(found) - set(OWNERS)}; " \
                                      f"owners without a schema enum: {set(OWNERS) - set(found)}"
    for where, values in found.items():
        assert list(values) == list(OWNERS[where]), f"{SCHEMA.name}: {where} {values} != code {list(OWNERS[where])}"


def test_the_per_family_memory_model_covers_every_family():
    from dive_core import resources

    assert set(resources.BACKBONE_MEM_MB) == set(backbones.FAMILIES)
