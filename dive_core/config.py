"""Loading the workflow configuration: YAML files with errors that name the file and line, the
merged config in the defaults file's key order, the dataset registry, the local BEIR directory.
The JSON schema in ``config/schema/`` checks the config's shape; :func:`dive_core.plan.check`
checks what a schema cannot. No Snakemake import."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

ENV_BEIR = "BEIR_DATA_DIR"


class ConfigError(ValueError):
    """A configuration problem; the message names the key."""


#: libyaml's parser where PyYAML has it: the same values as yaml.safe_load, 15 times faster (every
#: Snakemake process, a SLURM job's included, parses the default config and its schema)
_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(path: str | os.PathLike) -> Any:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    try:
        return yaml.load(text, Loader=_FAST_LOADER)  # noqa: S506 - a safe loader
    except yaml.YAMLError:
        pass
    try:  # an error: parsed again by PyYAML's own parser, whose message says what it expected
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ConfigError(f"{where}: invalid YAML: {getattr(exc, 'problem', exc)}") from exc


def canonical_order(config: Any, template: Any) -> Any:
    """``config`` with its mapping keys in ``template``'s order (recursively), other keys after
    them in their own order. Snakemake compares a job's params with the recorded ones in key
    order, and the merged config's order depends on how it was composed (``--configfile
    config/paper.yaml`` puts its keys first, ``--configfile config/config.yaml config/paper.yaml``
    does not): ordering every config like the defaults file makes the same settings the same
    params however they were given."""
    if not isinstance(config, Mapping):
        return config
    template = template if isinstance(template, Mapping) else {}
    keys = [k for k in template if k in config] + [k for k in config if k not in template]
    return {k: canonical_order(config[k], template.get(k)) for k in keys}


def load_registry(path: str | os.PathLike) -> dict[str, dict]:
    reg = load_yaml(path)
    if not isinstance(reg, dict):
        raise ConfigError(f"{path}: expected a mapping of dataset names")
    for name, entry in reg.items():
        if not isinstance(entry, dict) or "subdir" not in entry:
            raise ConfigError(f"{path}: {name}: every dataset needs a 'subdir'")
        if not entry.get("local_only") and not entry.get("url"):
            raise ConfigError(f"{path}: {name}: needs 'url' (or local_only: true)")
    return reg


def local_beir_dir(config: Mapping, environ: Mapping[str, str] = os.environ) -> str | None:
    """The configured local BEIR directory: config key ``beir_data_dir``, else $BEIR_DATA_DIR."""
    value = config.get("beir_data_dir") or environ.get(ENV_BEIR) or None
    return str(Path(value).expanduser().resolve()) if value else None


# ---- values from the command line -----------------------------------------------------------
# Keys whose value may be one number for every rule: `--config gpu=0` (a CPU-only cluster) and
# `--config threads=8` stand for that number under each key the defaults file lists.
PER_RULE_KEYS = ("gpu", "threads")


def command_line_values(config: Mapping, schema: Mapping, defaults: Mapping) -> dict:
    """``config`` with the text that ``snakemake --config`` leaves in nested values turned into
    the types the schema asks for, and the per-rule shorthands expanded (:data:`PER_RULE_KEYS`).

    Snakemake parses only the top level of ``--config key=value``; below it every scalar stays a
    string (``--config gpu='{embed: 0}'`` gives ``{'embed': '0'}``). A string is converted where
    the schema admits no string but a number, integer, boolean, null, object or array and the
    text reads as one; where the schema does not constrain a value (method hyperparameters), a
    string that reads as a number or a boolean becomes that. Anything else is left for the
    schema validation to report with its key."""
    out = _coerce(dict(config), schema, schema)
    for key in PER_RULE_KEYS:
        value = out.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and isinstance(defaults.get(key), Mapping):
            out[key] = {rule: value for rule in defaults[key]}
    return out


def _resolve(schema: Any, root: Mapping) -> Mapping:
    while isinstance(schema, Mapping) and "$ref" in schema:
        node: Any = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            node = node[part]
        schema = node
    return schema if isinstance(schema, Mapping) else {}


def _types(schema: Mapping, root: Mapping) -> set[str] | None:
    """The JSON types a schema admits; None when it does not constrain the type."""
    schema = _resolve(schema, root)
    if "type" in schema:
        t = schema["type"]
        return {t} if isinstance(t, str) else set(t)
    if "enum" in schema or "const" in schema:
        return {_json_type(v) for v in schema.get("enum", [schema.get("const")])}
    branches = schema.get("oneOf") or schema.get("anyOf")
    if branches:
        found: set[str] = set()
        for b in branches:
            t = _types(b, root)
            if t is None:
                return None
            found |= t
        return found
    return None


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    return {dict: "object", list: "array"}.get(type(v), "string")


def _branch(schema: Mapping, root: Mapping, value: Any) -> Mapping:
    """The oneOf/anyOf branch that admits ``value``'s JSON type (for recursing into it)."""
    schema = _resolve(schema, root)
    for b in schema.get("oneOf") or schema.get("anyOf") or ():
        t = _types(b, root)
        if t is not None and _json_type(value) in t:
            return _resolve(b, root)
    return schema


def _parse_text(text: str) -> Any:
    """A command-line string as the value it spells: an integer, a float (``1e-3`` included), a
    boolean, null, or a YAML flow mapping or list; the string itself otherwise."""
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _coerce(value: Any, schema: Any, root: Mapping) -> Any:
    if isinstance(value, str):
        types = _types(schema, root)
        if types is not None and "string" in types:
            return value
        parsed = _parse_text(value)
        kind = _json_type(parsed)
        if types is None:
            return parsed if kind in ("integer", "number", "boolean") else value
        if kind in types or (kind == "integer" and "number" in types):
            return _coerce(parsed, schema, root) if kind in ("object", "array") else parsed
        return value
    if isinstance(value, Mapping):
        s = _branch(schema, root, value)
        props, extra = s.get("properties", {}), s.get("additionalProperties")
        return {k: _coerce(v, props.get(k, extra if isinstance(extra, Mapping) else {}), root)
                for k, v in value.items()}
    if isinstance(value, list):
        items = _branch(schema, root, value).get("items")
        return [_coerce(v, items if isinstance(items, Mapping) else {}, root) for v in value]
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dive_core.config FILE...``: each YAML file parsed as the workflow parses its
    configuration; a syntax error is printed with its file and line (Snakemake reads a
    ``--configfile`` before the workflow starts, and its error names neither). Exit 1 on any error."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m dive_core.config",
                                 description="Parse each YAML file as the workflow parses its configuration; "
                                             "a syntax error names its file and line.")
    ap.add_argument("files", metavar="FILE", nargs="+", help="a config file (config/config.yaml, a --configfile)")
    files = ap.parse_args(argv).files
    bad = 0
    for f in files:
        try:
            load_yaml(f)
            print(f"{f}: valid YAML")
        except ConfigError as exc:
            print(exc, file=sys.stderr)
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
