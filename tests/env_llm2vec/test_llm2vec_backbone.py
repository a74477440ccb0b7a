"""LLM2Vec backbones (dive_core/backbones.py) on a tiny random Llama, run inside the LLM2Vec
environment (.venv-llm2vec: `make test` runs this folder with its interpreter; llm2vec 0.2.3
pins transformers<=4.44.2, below the main stack). Nothing is fetched: the Llama and its tokenizer
are built in a temp directory."""

from __future__ import annotations

import importlib.metadata
import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from dive_core.backbones import build_backbone  # noqa: E402
from tiny_llm import TEXTS  # noqa: E402
from tiny_llm import DEFAULT_WORDS as WORDS  # noqa: E402
from tiny_llm import build_tiny_llama  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
from test_environment_pins import installed_problems, parse_lock  # noqa: E402

INSTRUCTION = "Given a claim, retrieve documents:"


def test_this_environment_is_the_llm2vec_lock():
    """Running here means running in .venv-llm2vec at exactly requirements-llm2vec.lock's versions."""
    lock = parse_lock((REPO / "requirements-llm2vec.lock").read_text())
    problems = installed_problems(lock, importlib.metadata.version)
    assert not problems, (f"{sys.prefix} differs from requirements-llm2vec.lock (`make venv-llm2vec`):\n"
                          + "\n".join(problems))


# --------------------------------------------------------------------------- tiny LLM2Vec model
@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), WORDS)


def llm2vec_spec(path, **over):
    spec = {"family": "llm2vec", "base_model": str(path), "dim": 32, "pooling": "mean",
            "max_length": 64, "precision": "fp32", "batch_size": 4}
    spec.update(over)
    return spec


@pytest.fixture(scope="module")
def tiny_bb(tiny_llama):
    return build_backbone("tiny", llm2vec_spec(tiny_llama), instruction=INSTRUCTION, device="cpu")


@pytest.fixture(scope="module")
def tiny_adapter(tiny_llama, tmp_path_factory) -> Path:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaModel

    path = tmp_path_factory.mktemp("tiny-lora")
    peft_model = get_peft_model(
        LlamaModel.from_pretrained(tiny_llama),
        LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"]),
    )
    g = torch.Generator().manual_seed(1)
    n = 0
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:  # lora_B starts at zero: perturb so the adapter is no no-op
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
                n += 1
    assert n == 4  # q_proj and v_proj of 2 layers
    peft_model.save_pretrained(path)
    return path


def test_llm2vec_shapes_dtype_determinism(tiny_bb):
    assert tiny_bb.dim == 32 and tiny_bb.device == "cpu"
    q1, d1 = tiny_bb.encode_queries(TEXTS), tiny_bb.encode_docs(TEXTS)
    for x in (q1, d1):
        assert x.shape == (len(TEXTS), 32)
        assert x.dtype == np.float32
        assert np.isfinite(x).all()
        assert np.linalg.norm(x, axis=1).min() > 1e-3  # not a degenerate all-zero output
    # distinct texts -> distinct vectors
    assert np.abs(d1[0] - d1[1]).max() > 1e-3
    np.testing.assert_array_equal(tiny_bb.encode_queries(TEXTS), q1)
    np.testing.assert_array_equal(tiny_bb.encode_docs(TEXTS), d1)
    assert tiny_bb.encode_docs([]).shape == (0, 32)
    a = tiny_bb.attributes
    assert a["family"] == "llm2vec" and a["pooling"] == "mean" and a["max_length"] == 64
    assert a["instruction"] == INSTRUCTION and a["precision"] == "fp32" and a["peft_model"] == ""


def test_llm2vec_batch_composition_does_not_change_vectors(tiny_bb):
    """Left padding in a mixed-length batch must not leak into the pooled vectors."""
    batch_q, batch_d = tiny_bb.encode_queries(TEXTS), tiny_bb.encode_docs(TEXTS)
    single_q = np.concatenate([tiny_bb.encode_queries([t]) for t in TEXTS])
    single_d = np.concatenate([tiny_bb.encode_docs([t]) for t in TEXTS])
    np.testing.assert_allclose(batch_q, single_q, atol=1e-5)
    np.testing.assert_allclose(batch_d, single_d, atol=1e-5)


def test_llm2vec_instruction_on_queries_only(tiny_bb, monkeypatch):
    q, d = tiny_bb.encode_queries(TEXTS), tiny_bb.encode_docs(TEXTS)
    # the instruction changes the query embedding of the very same text
    assert (np.abs(q - d).max(axis=1) > 1e-3).all()

    # what reaches the tokenizer: instruction + separator + text for queries, text alone for docs
    seen: list[str] = []
    orig = tiny_bb.model.prepare_for_tokenization
    monkeypatch.setattr(tiny_bb.model, "prepare_for_tokenization",
                        lambda t: seen.append(t) or orig(t))
    tiny_bb.encode_queries(["dog ran"])
    tiny_bb.encode_docs(["dog ran"])
    sep = "!@#$%^&*()"
    assert seen == [f"{INSTRUCTION} {sep}dog ran", f"{sep}dog ran"]


def test_llm2vec_equals_manual_mean_pooling(tiny_bb):
    """Recompute with the bidirectional Llama directly: documents = mean over their tokens;
    queries = mean over the text tokens of "instruction text" (instruction in context, not pooled)."""
    import torch

    tok, net = tiny_bb.model.tokenizer, tiny_bb.model.model

    def hidden(s):
        ids = tok(s, return_tensors="pt")
        with torch.no_grad():
            return net(**ids).last_hidden_state[0]

    for text in TEXTS:
        n_text = len(tok(text, add_special_tokens=False)["input_ids"])
        doc = hidden(text).mean(0).numpy()
        query = hidden(f"{INSTRUCTION} {text}")[-n_text:].mean(0).numpy()
        np.testing.assert_allclose(tiny_bb.encode_docs([text])[0], doc, atol=1e-5)
        np.testing.assert_allclose(tiny_bb.encode_queries([text])[0], query, atol=1e-5)
        # and the query really is different from pooling the text alone
        assert np.abs(query - doc).max() > 1e-3


def test_llm2vec_wrong_dim_and_precision_raise(tiny_llama):
    with pytest.raises(ValueError, match=r"dim 64 .* outputs 32"):
        build_backbone("tiny", llm2vec_spec(tiny_llama, dim=64), instruction=INSTRUCTION,
                       device="cpu")
    with pytest.raises(ValueError, match="precision"):
        build_backbone("tiny", llm2vec_spec(tiny_llama, precision="fp8"), device="cpu")
    with pytest.raises(ValueError, match="unknown family"):
        build_backbone("tiny", {"family": "word2vec"}, device="cpu")


def test_llm2vec_peft_adapter_changes_embeddings(tiny_llama, tiny_adapter, tiny_bb):
    from peft import PeftModel

    bb = build_backbone("tiny-lora", llm2vec_spec(tiny_llama, peft_model=str(tiny_adapter)),
                        instruction=INSTRUCTION, device="cpu")
    assert isinstance(bb.model.model, PeftModel)
    assert bb.attributes["peft_model"] == str(tiny_adapter)
    q, d = bb.encode_queries(TEXTS), bb.encode_docs(TEXTS)
    assert q.shape == d.shape == (len(TEXTS), 32) and np.isfinite(q).all() and np.isfinite(d).all()
    base_q, base_d = tiny_bb.encode_queries(TEXTS), tiny_bb.encode_docs(TEXTS)
    assert (np.abs(d - base_d).max(axis=1) > 1e-2).all()
    assert (np.abs(q - base_q).max(axis=1) > 1e-2).all()
    # merging the adapter into the weights gives the same vectors
    merged = build_backbone("tiny-lora-merged",
                            llm2vec_spec(tiny_llama, peft_model=str(tiny_adapter), merge_peft=True),
                            instruction=INSTRUCTION, device="cpu")
    assert not isinstance(merged.model.model, PeftModel)
    np.testing.assert_allclose(merged.encode_docs(TEXTS), d, atol=1e-4)
    np.testing.assert_allclose(merged.encode_queries(TEXTS), q, atol=1e-4)
