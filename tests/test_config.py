"""Loading the configuration (dive_core.config), without Snakemake: the defaults file's key order,
and the types of values given on the command line."""

from __future__ import annotations

from pathlib import Path

from dive_core import config as dcfg

REPO = Path(__file__).resolve().parent.parent


def test_config_key_order_follows_the_defaults_file():
    """However a config was composed (`--configfile config/paper.yaml` alone puts paper.yaml's
    keys first), the workflow sees the defaults file's key order, so the same settings give the
    same params and no job reruns for the order alone."""
    template = dcfg.load_yaml(Path(__file__).resolve().parent.parent / "config" / "config.yaml")
    composed = {"triplets": {"max_per_query": {"nfcorpus": 4}, **{k: v for k, v in template["triplets"].items()
                                                                  if k != "max_per_query"}},
                "datasets": ["scifact", "nfcorpus"], "extra": {"b": 1, "a": 2}}
    ordered = dcfg.canonical_order(composed, template)
    assert list(ordered["triplets"]) == list(template["triplets"])
    assert ordered["triplets"]["max_per_query"] == {"nfcorpus": 4}
    assert list(ordered) == ["datasets", "triplets", "extra"] and list(ordered["extra"]) == ["b", "a"]
    assert dcfg.canonical_order([1, 2], {"a": 1}) == [1, 2]


def test_command_line_values_get_the_schemas_types():
    """`snakemake --config` parses only the top level: nested values arrive as text. They are
    typed by the schema (and numbers/booleans where the schema says nothing, e.g. method
    hyperparameters) before validation; `gpu=0` / `threads=N` stand for every rule."""
    from jsonschema import Draft202012Validator
    from snakemake.cli import parse_config

    root = Path(__file__).resolve().parent.parent / "config"
    schema, defaults = dcfg.load_yaml(root / "schema" / "config.schema.yaml"), dcfg.load_yaml(root / "config.yaml")
    given = parse_config([
        "gpu=0", "threads={embed: 4, train: '3'}", "backbones={minilm: {shards: 3, batch_size: 32}}",
        "training={epochs: 3, precision: bf16}", "methods={dive: {margin: 0.5, lr: 1e-3, heads: 2, type: dive}}",
        "triplets={max_per_query: {nfcorpus: 20}}", "seeds=[2027, 2028]", "datasets=[scifact, 123]",
        "selection={datasets: null, dive_grid: {margin: [0.5, 0.7]}}", "evaluation={top_k: ten}"])
    assert given["threads"] == {"embed": "4", "train": "3"} and given["seeds"] == ["2027", "2028"]  # as text
    typed = dcfg.command_line_values(given, schema, defaults)
    assert typed["gpu"] == {rule: 0 for rule in defaults["gpu"]} and len(typed["gpu"]) == 5
    assert typed["threads"] == {"embed": 4, "train": 3}
    assert typed["backbones"] == {"minilm": {"shards": 3, "batch_size": 32}}
    assert typed["training"] == {"epochs": 3, "precision": "bf16"}
    assert typed["methods"]["dive"] == {"margin": 0.5, "lr": 1e-3, "heads": 2, "type": "dive"}
    assert typed["triplets"] == {"max_per_query": {"nfcorpus": 20}}
    assert typed["seeds"] == [2027, 2028]
    assert typed["datasets"] == ["scifact", "123"]  # names stay text
    assert typed["selection"] == {"datasets": None, "dive_grid": {"margin": [0.5, 0.7]}}
    assert typed["evaluation"] == {"top_k": "ten"}  # not a number: left for the schema to report
    merged = {**defaults, **{k: v for k, v in typed.items() if k not in ("methods", "backbones", "training",
                                                                         "triplets", "selection")}}
    merged["evaluation"] = {"top_k": 100}
    assert not list(Draft202012Validator(schema).iter_errors(merged))
    assert dcfg.command_line_values({"threads": 8}, schema, defaults)["threads"] == {r: 8 for r in defaults["threads"]}
    assert dcfg.command_line_values({"gpu": True}, schema, defaults)["gpu"] is True  # not a count: schema refuses


def test_a_yaml_error_names_its_file_and_line(tmp_path, capsys):
    """A YAML syntax error in a configuration file is reported with its file and line, by the loader
    the workflow uses and by `python -m dive_core.config FILE...` (for `--configfile` files, which
    Snakemake parses before the workflow starts, with an error that names neither)."""
    import pytest

    bad = tmp_path / "bad.yaml"
    bad.write_text("backbone: minilm\nseeds: [2027, 2028\n  epochs: 3\n")
    with pytest.raises(dcfg.ConfigError, match=rf"^{bad}:3: invalid YAML: expected ',' or '\]'"):
        dcfg.load_yaml(bad)
    assert dcfg.main([str(REPO / "config" / "config.yaml"), str(bad)]) == 1
    out = capsys.readouterr()
    assert f"{REPO / 'config' / 'config.yaml'}: valid YAML" in out.out and f"{bad}:3: invalid YAML" in out.err
    assert dcfg.main([str(REPO / "config" / "paper.yaml")]) == 0


def test_the_fast_loader_reads_every_shipped_yaml_as_pyyaml_does():
    """load_yaml parses with libyaml (the pinned PyYAML wheel has it) and gets the values
    yaml.safe_load gets, for every YAML file the repository ships."""
    import yaml

    assert dcfg._FAST_LOADER is yaml.CSafeLoader
    files = sorted(p for pattern in ("config/**/*.yaml", "profiles/**/*.yaml", "envs/*.yaml", "tests/*.yaml")
                   for p in REPO.glob(pattern))
    assert len(files) > 10
    for f in files:
        assert dcfg.load_yaml(f) == yaml.safe_load(f.read_text(encoding="utf-8")), f
