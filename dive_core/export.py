"""A trained compressor as a product: usable outside the workflow, loaded without pickle.

``python -m dive_core.export CHECKPOINT OUT_DIR`` writes:

* ``OUT_DIR/compressor/``: the compressor alone, for any backbone (LLM2Vec included):
  ``config.json`` (method type, d, k, seed, hyperparameters, state sha256, provenance) and
  ``model.safetensors`` (its learned tensors). Load it with :func:`load_compressor`, which returns
  the method object: ``load_compressor(path).compress(matrix)`` maps (n, d) frozen embeddings to
  L2-normalised (n, k) vectors, exactly as the workflow's evaluation does.
* for a sentence-transformers backbone (MiniLM): ``OUT_DIR`` is also a sentence-transformers model
  folder - the backbone's modules followed by :class:`CompressorModule` (the compressor and the
  normalisation) - so ``SentenceTransformer(OUT_DIR, trust_remote_code=True).encode(texts)`` returns the compressed
  k-dimensional vectors. The module is found by its class path ``dive_core.export.CompressorModule``
  (the package must be importable: ``pip install -e .`` in this repository, which ``make`` does).
* ``OUT_DIR/README.md``: a model card written from the run's result JSON (``eval.json`` next to
  the checkpoint, when present): dataset, backbone, method, k, held-out metrics with query counts
  (seen / unseen too), provenance.

Loading never executes code from the exported files: JSON and safetensors only (the workflow's
own checkpoints are read with ``torch.load(weights_only=True)``). The folder holds no code:
``trust_remote_code=True``, which sentence-transformers >= 6 asks for any module class outside its
own package, only lets it import the installed ``dive_core``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any, Mapping

import torch

from . import records
from .methods import Method, method_class

CONFIG = "config.json"  # records.compressor_config: format records.COMPRESSOR_FORMAT
WEIGHTS = "model.safetensors"
# what a compressor recorded at its fit and keeps in an export: the document map an asymmetric
# compressor's query map belongs to (query_side), and the drift guard's fit statistics
RECORDED = ("document_map", "fit_statistics")


# --------------------------------------------------------------------------- compressor alone
def save_compressor(method: Method, out_dir: str | Path, provenance: Mapping[str, Any] | None = None) -> Path:
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = {n: t.detach().cpu().contiguous() for n, t in method.state_dict().items()}
    tmp = out / (WEIGHTS + ".tmp")
    save_file(state, str(tmp))
    tmp.replace(out / WEIGHTS)
    provenance = {**dict(provenance or {}), **{key: method.meta[key] for key in RECORDED if key in method.meta}}
    config = records.compressor_config(type=method.type, d=method.d, k=method.k, seed=method.seed, hparams=method.hp,
                                       state_sha256=method.state_sha256(), provenance=provenance)
    records.write_compressor_config(out / CONFIG, config)
    return out


def load_compressor(path: str | Path, device: str = "cpu") -> Method:
    """The compressor exported to ``path`` (a ``compressor/`` folder, or an export folder that
    holds one): an object with ``.compress(matrix)``, ``.d`` and ``.k``. JSON and safetensors
    only; the learned state is checked against the recorded sha256."""
    from safetensors.torch import load_file

    p = Path(path)
    found = None
    for cand in (p, p / "compressor"):  # the compressor folder, or an export folder holding one
        try:
            config = json.loads((cand / CONFIG).read_text(encoding="utf-8"))
        except (FileNotFoundError, NotADirectoryError):
            continue
        except json.JSONDecodeError as exc:
            raise ValueError(f"{cand / CONFIG}: invalid JSON: {exc}") from None
        if isinstance(config, dict) and config.get("format") == records.COMPRESSOR_FORMAT:
            found = cand
            break
    if found is None:
        raise FileNotFoundError(f"{p}: no {records.COMPRESSOR_FORMAT} compressor here (expected {CONFIG} with format "
                                f"{records.COMPRESSOR_FORMAT!r} in it or in {p / 'compressor'})")
    p = found
    records.check_compressor_config(config, p / CONFIG)
    m = method_class(config["type"])(int(config["d"]), int(config["k"]), config["hparams"], int(config["seed"]),
                                     device)
    m.load_state_dict(load_file(str(p / WEIGHTS), device=device))
    if m.state_sha256() != config["state_sha256"]:
        raise ValueError(f"{p}: weights do not match the recorded state_sha256")
    prov = config.get("provenance", {})
    m.meta = {"export": prov, **{key: prov[key] for key in RECORDED if key in prov}}
    m.check_loaded(str(p))
    return m


# --------------------------------------------------------------------------- sentence-transformers
def _module_base():
    try:
        from sentence_transformers.base.modules import Module
    except ImportError:  # older sentence-transformers
        return torch.nn.Module
    return Module


class CompressorModule(_module_base()):
    """The last module of an exported sentence-transformers model: normalises the backbone's
    sentence embedding, applies the trained compressor and normalises again (the workflow's
    ``Method.compress``)."""

    config_keys: list[str] = []
    # sentence-transformers passes encode_query's / encode_document's task ("query" / "document"):
    # an asymmetric compressor (query_side) maps queries by its query map, everything else by its
    # document map (plain ``encode`` gives no task: the document map)
    forward_kwargs = {"task"}

    def __init__(self, method: Method | None = None):
        super().__init__()
        self.method = method

    def forward(self, features: dict, task: str | None = None, **kwargs) -> dict:
        x = features["sentence_embedding"]
        z = torch.nn.functional.normalize(x.float(), dim=-1)
        task = task if task is not None else features.get("task")
        transform = self.method.transform_query if task == "query" else self.method.transform
        with torch.no_grad():
            out = torch.nn.functional.normalize(transform(z.to(self.method.device)), dim=-1)
        features["sentence_embedding"] = out.to(x.device)
        return features

    def get_sentence_embedding_dimension(self) -> int:
        return int(self.method.k)

    get_embedding_dimension = get_sentence_embedding_dimension

    def save(self, output_path: str, *args, **kwargs) -> None:
        save_compressor(self.method, output_path, self.method.meta.get("export"))

    @classmethod
    def load(cls, model_name_or_path: str, subfolder: str = "", **kwargs) -> "CompressorModule":
        path = Path(model_name_or_path) / subfolder
        return cls(load_compressor(path))


def _backbone_model(spec: Mapping[str, Any]):
    from sentence_transformers import SentenceTransformer

    from .backbones import resolve_model_path

    model = SentenceTransformer(resolve_model_path(spec["model"]), device="cpu")
    if spec.get("max_length"):
        model.max_seq_length = int(spec["max_length"])
    return model


# --------------------------------------------------------------------------- BEIR
class BeirDenseModel:
    """An exported model as a BEIR dense model (``encode_queries`` / ``encode_corpus``), for
    ``beir.retrieval.search.dense.DenseRetrievalExactSearch`` with ``score_function="dot"`` (the
    vectors are L2-normalised, so dot = cosine).

    ``BeirDenseModel(folder)``: a sentence-transformers export (MiniLM). For any other backbone
    (LLM2Vec), pass the compressor folder and the backbone that made the training embeddings,
    ``BeirDenseModel(folder, backbone=dive_core.backbones.build_backbone(...))``: it encodes
    queries with the dataset's instruction and documents without, as the workflow's embed job.
    Documents are encoded as ``title + " " + text`` (stripped), as in the workflow."""

    def __init__(self, folder: str | Path, backbone=None, device: str = "cpu"):
        folder = Path(folder)
        self.backbone, self.st = backbone, None
        if backbone is None:
            if not (folder / "modules.json").is_file():
                raise ValueError(f"{folder}: not a sentence-transformers export; pass the backbone= that "
                                 "made the training embeddings")
            from sentence_transformers import SentenceTransformer

            # the folder names dive_core.export.CompressorModule: sentence-transformers >= 6 loads a
            # module class of its own package only with trust_remote_code (here: this repository's code)
            self.st = SentenceTransformer(str(folder), device=device, trust_remote_code=True)
        else:
            self.compressor = load_compressor(folder, device)

    def _encode(self, texts: list[str], batch_size: int, queries: bool):
        if self.st is not None:  # encode_query / encode_document: the backbone's own prompts (EmbeddingGemma's),
            # and the task that routes an asymmetric compressor's queries to its query map (CompressorModule)
            encode = self.st.encode_query if queries else self.st.encode_document
            return encode(texts, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False)
        from .embeddings import l2_normalize

        raw = (self.backbone.encode_queries if queries else self.backbone.encode_docs)(texts)
        return self.compressor.compress(l2_normalize(raw), side="query" if queries else "document")

    @staticmethod
    def _out(vectors, kwargs):
        return torch.from_numpy(vectors) if kwargs.get("convert_to_tensor") else vectors

    def encode_queries(self, queries: list[str], batch_size: int = 64, **kwargs):
        return self._out(self._encode(list(queries), batch_size, queries=True), kwargs)

    def encode_corpus(self, corpus, batch_size: int = 64, **kwargs):
        if isinstance(corpus, dict):  # BEIR >= 2.1 passes {"title": [...], "text": [...]} or a list of dicts
            docs = [{"title": t, "text": x} for t, x in zip(corpus.get("title", []), corpus["text"])]
        else:
            docs = list(corpus)
        texts = [f"{d.get('title', '')} {d.get('text', '')}".strip() for d in docs]
        return self._out(self._encode(texts, batch_size, queries=False), kwargs)


# --------------------------------------------------------------------------- model card
def model_card(result: Mapping[str, Any] | None, config: Mapping[str, Any], st_folder: bool) -> str:
    lines = [f"# DIVE pipeline export: {config['type']} {config['d']} -> {config['k']} dimensions", ""]
    if result:
        lines += [f"Trained by the DIVE pipeline on **{result['dataset']}** (backbone **{result['backbone']}**, "
                  f"method `{result['method']}` of type `{result['method_type']}`, stage `{result['stage']}`, "
                  f"seed {result['seed']}).", "",
                  f"## Held-out results ({result['role']} queries, exact inner-product search over the corpus)", "",
                  "| queries | n | nDCG@10 | Recall@10 | Recall@100 | MRR@10 |", "|---|---|---|---|---|---|"]
        rows = [("all", result["n_queries"], result["metrics"])]
        for name in ("seen", "unseen"):
            sub = (result.get("subsets") or {}).get(name) or {}
            rows.append((name, sub.get("n_queries", 0), sub.get("metrics")))
        for name, n, m in rows:
            cells = ["–"] * 4 if not m else [f"{m[x]:.4f}" for x in ("ndcg@10", "recall@10", "recall@100", "mrr@10")]
            lines.append(f"| {name} | {n} | " + " | ".join(cells) + " |")
        lines += ["", "`seen`: a relevant document of the query was a training positive; `unseen`: none was.", ""]
    lines += ["## Use", ""]
    if st_folder:
        lines += ["```python", "from sentence_transformers import SentenceTransformer",
                  "# trust_remote_code: the compressor is dive_core.export.CompressorModule (needs dive_core importable)",
                  "model = SentenceTransformer('path/to/this/folder', trust_remote_code=True)",
                  f"vectors = model.encode(['a text'])  # (1, {config['k']}), L2-normalised", "```", ""]
    lines += ["```python", "from dive_core import load_compressor",
              "compressor = load_compressor('path/to/this/folder')",
              f"small = compressor.compress(frozen_embeddings)  # (n, {config['d']}) -> (n, {config['k']})", "```", "",
              "## Provenance", "", "```json", json.dumps({"hparams": config["hparams"],
                                                        "state_sha256": config["state_sha256"],
                                                        **config.get("provenance", {})}, indent=2, default=str),
              "```", ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------- export
def export(checkpoint: str | Path, out_dir: str | Path, result: Mapping[str, Any] | None = None,
           backbone_spec: Mapping[str, Any] | None = None) -> Path:
    """Export ``checkpoint`` to ``out_dir`` (see the module docstring); ``result`` = the run's
    result JSON (model card, backbone spec); ``backbone_spec`` overrides the spec it records.
    The folder is written under a temporary name and renamed when complete."""
    method = Method.load(checkpoint)
    out = Path(out_dir)
    spec = dict(backbone_spec or ((result or {}).get("config") or {}).get("backbone") or {})
    provenance = {k: (result or {}).get(k) for k in ("dataset", "backbone", "method", "stage", "seed", "k")}
    provenance.update({"checkpoint": str(checkpoint), "weights_sha256": method.state_sha256(),
                       "backbone_spec": spec or None})
    method.meta = {"export": provenance}
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    st_folder = spec.get("family") == "sentence_transformers"
    if st_folder:
        from sentence_transformers import SentenceTransformer

        from dive_core.export import CompressorModule as module  # its importable path, also under -m

        backbone = _backbone_model(spec)
        model = SentenceTransformer(modules=[*backbone, module(method)], device="cpu")
        model.save(str(tmp))
        # one copy of the compressor: the sentence-transformers module lives in compressor/
        modules = json.loads((tmp / "modules.json").read_text(encoding="utf-8"))
        entry = next(m for m in modules if m["type"].endswith(".CompressorModule"))
        (tmp / entry["path"]).replace(tmp / "compressor")
        entry["path"] = "compressor"
        (tmp / "modules.json").write_text(json.dumps(modules, indent=2), encoding="utf-8")
    else:
        save_compressor(method, tmp / "compressor", provenance)
    config = json.loads((tmp / "compressor" / CONFIG).read_text(encoding="utf-8"))
    (tmp / "README.md").write_text(model_card(result, config, st_folder), encoding="utf-8")
    shutil.rmtree(out, ignore_errors=True)
    tmp.replace(out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dive_core.export", description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint", help="a workflow checkpoint (results/.../model.pt)")
    ap.add_argument("out_dir", help="the folder to write")
    ap.add_argument("--result", help="the run's result JSON (default: eval.json next to the checkpoint)")
    args = ap.parse_args(argv)
    result_path = Path(args.result) if args.result else Path(args.checkpoint).with_name("eval.json")
    result = records.read("result", result_path) if result_path.is_file() else None
    if result is None:
        print(f"note: no result JSON at {result_path}: exporting the compressor alone, without metrics",
              file=sys.stderr)
    out = export(args.checkpoint, args.out_dir, result)
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["BeirDenseModel", "CompressorModule", "export", "load_compressor", "save_compressor"]
