"""Exported compressors: safetensors + JSON round trip for every method type, refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dive_core.export import load_compressor, save_compressor
from dive_core.methods import SPECS, new_method
from dive_core.training import TrainLog
from synthetic import FAST, make_problem

TYPES = tuple(SPECS)  # every declared method type


def configured(mtype):
    """The configured hyperparameters (of the first config entry of type ``mtype``), trained for 2
    epochs on the small synthetic problem."""
    from pathlib import Path

    from dive_core import config as dcfg
    from dive_core.methods import resolve_hparams

    cfg = dcfg.load_yaml(Path(__file__).resolve().parent.parent / "config" / "config.yaml")
    name = next(n for n, e in cfg["methods"].items() if e.get("type", n) == mtype)
    entry = dict(cfg["methods"][name])
    if mtype == "mrl":
        entry["min_prefix"] = 4  # k = 8 here
    return resolve_hparams(name, entry, {**cfg["training"], **FAST, "epochs": 2, "doc_epochs": 2})


@pytest.fixture(scope="module")
def problem():
    return make_problem()


@pytest.mark.parametrize("mtype", TYPES)
def test_round_trip_every_method_type(tmp_path, problem, mtype):
    k = problem.d if mtype == "frozen" else problem.k
    m = new_method(mtype, problem.d, k, configured(mtype), seed=1)
    m.fit(problem.train, TrainLog(), progress=False)
    save_compressor(m, tmp_path / "c", {"dataset": "synthetic"})
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == ["config.json", "model.safetensors"]
    back = load_compressor(tmp_path / "c")
    assert back.type == mtype and (back.d, back.k) == (problem.d, k)
    for side in ("document", "query"):
        assert np.array_equal(back.compress(problem.docs, side=side), m.compress(problem.docs, side=side))


def test_refuses_foreign_and_tampered_folders(tmp_path, problem):
    m = new_method("truncate", problem.d, problem.k, {}, seed=0)
    with pytest.raises(FileNotFoundError, match="no dive-compressor/2 compressor"):
        load_compressor(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))  # a transformers folder
    with pytest.raises(FileNotFoundError, match="no dive-compressor/2"):
        load_compressor(tmp_path)
    d = new_method("dive", problem.d, problem.k, configured("dive"), seed=0)
    save_compressor(d, tmp_path / "d")
    from safetensors.torch import load_file, save_file

    state = load_file(str(tmp_path / "d" / "model.safetensors"))
    name = next(iter(state))
    save_file({**state, name: state[name] + 1.0}, str(tmp_path / "d" / "model.safetensors"))
    with pytest.raises(ValueError, match="do not match the recorded state_sha256"):
        load_compressor(tmp_path / "d")
    # the same folder with its own weights back loads again: the refusal was about the bytes
    save_file(state, str(tmp_path / "d" / "model.safetensors"))
    assert np.array_equal(load_compressor(tmp_path / "d").compress(problem.docs), d.compress(problem.docs))
    # a compressor without learned state (truncate): its dimensions come from config.json alone
    save_compressor(m, tmp_path / "t")
    config = json.loads((tmp_path / "t" / "config.json").read_text(encoding="utf-8"))
    assert (config["format"], config["type"], config["d"], config["k"]) == ("dive-compressor/2", "truncate",
                                                                             problem.d, problem.k)
    back = load_compressor(tmp_path / "t")
    assert (back.d, back.k) == (problem.d, problem.k)
    out = back.compress(problem.docs)
    assert out.shape == (len(problem.docs), problem.k) and np.array_equal(out, m.compress(problem.docs))
    # a hand-edited k would load silently as another compressor (no weights to disagree): refused
    (tmp_path / "t" / "config.json").write_text(json.dumps({**config, "k": problem.k - 1}), encoding="utf-8")
    with pytest.raises(ValueError, match="do not match the recorded config_sha256"):
        load_compressor(tmp_path / "t")


def test_export_for_a_backbone_without_a_sentence_transformers_folder(tmp_path, problem):
    """LLM2Vec (or any backbone): the compressor alone and the model card, no model folder."""
    from dive_core.export import export

    m = new_method("dive", problem.d, problem.k, configured("dive"), seed=0)
    m.fit(problem.train, TrainLog(), progress=False)
    m.save(tmp_path / "model.pt", {})
    spec = {"family": "llm2vec", "base_model": "McGill-NLP/LLM2Vec-Sheared-LLaMA-mntp", "dim": problem.d}
    out = export(tmp_path / "model.pt", tmp_path / "export", backbone_spec=spec)
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "compressor"]
    assert np.array_equal(load_compressor(out).compress(problem.docs), m.compress(problem.docs))
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "load_compressor" in card and "SentenceTransformer" not in card and "llm2vec" in card
