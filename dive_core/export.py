"""A trained compressor as a product: usable outside the workflow, loaded without pickle.

``python -m dive_core.export CHECKPOINT OUT_DIR`` writes:

* ``OUT_DIR/compressor/``: the compressor alone, for any backbone (LLM2Vec included), the exact
  record of it: ``config.json`` (method type, d, k, seed, hyperparameters, state sha256,
  provenance) and ``model.safetensors`` (its learned tensors). Load it with
  :func:`load_compressor`, which returns the method object: ``load_compressor(path).compress(matrix)``
  maps (n, d) frozen embeddings to L2-normalised (n, k) vectors, exactly as the workflow's
  evaluation does.
* for a sentence-transformers backbone (MiniLM): ``OUT_DIR`` is also a sentence-transformers model
  folder - the backbone's modules followed by the compressor written with sentence-transformers'
  own modules only (:func:`compressor_modules`: ``Normalize``, ``Dense`` layers with the identity or
  ReLU activation, ``Normalize``; an asymmetric compressor's two maps under a ``Router`` that
  ``encode_query`` / ``encode_document`` select), so ``SentenceTransformer(OUT_DIR).encode(texts)``
  returns the compressed k-dimensional vectors with no ``trust_remote_code`` and without this
  package installed. The layers are the method's own statement of its map
  (:meth:`~dive_core.methods.base.Method.layers`, :mod:`dive_core.layers`); a method whose map no
  such layers express (``query_side_known``'s document side, a lookup of fitted documents' codes)
  gets the compressor folder alone, and the model card says why.
* for a k-sparse compressor (csr) on a sentence-transformers backbone: ``OUT_DIR`` is a
  sentence-transformers ``SparseEncoder`` folder instead - the backbone's modules, ``Normalize``,
  the trained ``SparseAutoEncoder`` (the library's own module, the one the method trains) and
  ``Normalize`` - so ``SparseEncoder(OUT_DIR).encode(texts)`` returns the workflow's codes as
  sparse tensors (:func:`sparse_encoder_modules`).
* ``OUT_DIR/README.md``: a model card written from the run's result JSON (``eval.json`` next to
  the checkpoint, when present): dataset, backbone, method, k, held-out metrics with query counts
  (seen / unseen too), provenance.

Loading never executes code from the exported files, nor code of this package: sentence-transformers
reads JSON configs and safetensors into its own classes (``Dense`` activations are ``torch.nn``
classes), and :func:`load_compressor` reads JSON and safetensors. Folders of the format before
(their modules.json names ``dive_core.export.CompressorModule``) are refused with the command that
exports them again (:func:`check_model_folder`).
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
OLD_MODULE = "dive_core.export.CompressorModule"  # what exports named before sentence-transformers 6


class OldExportError(ValueError):
    """A sentence-transformers folder exported in the format before: it names this package's code."""


def old_format_message(folder: str | Path) -> str:
    folder = Path(folder)
    try:
        config = json.loads((folder / "compressor" / CONFIG).read_text(encoding="utf-8"))
        checkpoint = config["provenance"]["checkpoint"]
    except (OSError, ValueError, KeyError, TypeError):
        checkpoint = None
    source = (f" (it was exported from {checkpoint})" if checkpoint else
              " (CHECKPOINT: the workflow checkpoint it was exported from, results/.../model.pt)")
    return (f"{folder}: an export in the old format: its modules.json names {OLD_MODULE}, code of this package "
            f"that sentence-transformers >= 6 runs only with trust_remote_code=True. Export it again, written with "
            f"sentence-transformers' own modules only: python -m dive_core.export {checkpoint or 'CHECKPOINT'} "
            f"{folder}{source}")


def check_model_folder(folder: str | Path) -> Path:
    """``folder`` if it is a sentence-transformers export that loads without ``trust_remote_code``:
    its modules.json names sentence-transformers' own module classes only. An export of the old
    format is refused with the command that exports it again (:class:`OldExportError`)."""
    folder = Path(folder)
    path = folder / "modules.json"
    try:
        modules = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{folder}: not a sentence-transformers export (no modules.json); for another backbone "
                         "pass the backbone= that made the training embeddings") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: invalid JSON: {exc}") from None
    types = [str(m.get("type", "")) for m in modules if isinstance(m, dict)]
    if OLD_MODULE in types:
        raise OldExportError(old_format_message(folder))
    foreign = [t for t in types if not t.startswith("sentence_transformers.")]
    if foreign:
        raise ValueError(f"{path}: module class(es) {foreign} outside sentence-transformers: not an export of "
                         "this pipeline, and loading it would run their code")
    return folder


class CompressorModule:
    """The module class that exports of the old format name (:data:`OLD_MODULE`). It only refuses
    them, with the command that exports them again, when such a folder is loaded with
    ``trust_remote_code=True``."""

    @classmethod
    def load(cls, model_name_or_path: str, subfolder: str = "", **kwargs):
        raise OldExportError(old_format_message(model_name_or_path))


def map_modules(method: Method, side: str = "document") -> list:
    """The map of ``side`` as sentence-transformers modules: ``Normalize`` (the workflow normalises
    embeddings before compressing), the method's layers as ``Dense`` modules (identity or ReLU
    activation) and ``Normalize`` steps, and ``Normalize`` (``Method.compress`` normalises its output).
    NotImplementedError for a method whose map no such layers express."""
    from sentence_transformers.base.modules import Dense, Normalize

    from .layers import NORMALIZE, dense_parts

    out = [Normalize()]
    for step in method.layers(side):
        if step == NORMALIZE:
            out.append(Normalize())
            continue
        for w, b, relu in dense_parts(step):
            out.append(Dense(int(w.shape[1]), int(w.shape[0]), bias=True,
                             activation_function=torch.nn.ReLU() if relu else torch.nn.Identity(),
                             init_weight=w.detach().clone().float(), init_bias=b.detach().clone().float()))
    return [*out, Normalize()]


def compressor_modules(method: Method) -> list:
    """The modules that follow the backbone's in an export: the map (:func:`map_modules`) of a
    symmetric compressor; for an asymmetric one (query_side), a ``Router`` whose ``query`` route
    is the query map and whose ``document`` route, also the default (plain ``encode``), is the
    document map."""
    if not getattr(method, "asymmetric", False):
        return map_modules(method)
    from sentence_transformers.base.modules import Router

    return [Router.for_query_document(query_modules=map_modules(method, "query"),
                                      document_modules=map_modules(method, "document"), default_route="document")]


def sparse_encoder_modules(method: Method) -> list:
    """The modules that follow the backbone's in a ``SparseEncoder`` export of a k-sparse method
    (csr): ``Normalize``, a copy of its trained ``SparseAutoEncoder`` (in inference it keeps the top
    k latents, as :meth:`~dive_core.methods.csr.CSR.transform`), ``Normalize`` (``Method.compress``
    normalises its codes)."""
    import copy

    from sentence_transformers.base.modules import Normalize

    return [Normalize(), copy.deepcopy(method.net).cpu().eval(), Normalize()]


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

    ``BeirDenseModel(folder)``: a sentence-transformers export (MiniLM; a csr export's codes as dense
    rows of its latents). For any other backbone
    (LLM2Vec), pass the compressor folder and the backbone that made the training embeddings,
    ``BeirDenseModel(folder, backbone=dive_core.backbones.build_backbone(...))``: it encodes
    queries with the dataset's instruction and documents without, as the workflow's embed job.
    Documents are encoded as ``title + " " + text`` (stripped), as in the workflow."""

    def __init__(self, folder: str | Path, backbone=None, device: str = "cpu"):
        folder = Path(folder)
        self.backbone, self.st = backbone, None
        self.sparse = False
        if backbone is None:
            from sentence_transformers import SentenceTransformer, SparseEncoder

            # sentence-transformers' own modules only (an old-format folder is refused, naming the fix);
            # a k-sparse compressor's export is a SparseEncoder folder, whose codes come back dense here
            st_config = folder / "config_sentence_transformers.json"
            self.sparse = st_config.is_file() and json.loads(st_config.read_text(encoding="utf-8")).get(
                "model_type") == "SparseEncoder"
            self.st = (SparseEncoder if self.sparse else SentenceTransformer)(str(check_model_folder(folder)),
                                                                              device=device)
        else:
            self.compressor = load_compressor(folder, device)

    def _encode(self, texts: list[str], batch_size: int, queries: bool):
        if self.st is not None:  # encode_query / encode_document: the backbone's own prompts (EmbeddingGemma's),
            # and the task by which the Router of an asymmetric compressor takes queries to its query map
            encode = self.st.encode_query if queries else self.st.encode_document
            if self.sparse:
                return encode(texts, batch_size=batch_size, convert_to_tensor=True, convert_to_sparse_tensor=False,
                              show_progress_bar=False).cpu().numpy()
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
def model_card(result: Mapping[str, Any] | None, config: Mapping[str, Any], st_folder: bool,
               no_folder: str | None = None) -> str:
    """The README.md of an export; ``no_folder``: why a sentence-transformers backbone got no model
    folder (a map that sentence-transformers' modules do not express)."""
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
    from .methods.specs import SPECS

    active = SPECS[config["type"]].active
    if st_folder and active is not None:
        lines += ["```python", "from sentence_transformers import SparseEncoder",
                  "# sentence-transformers' own modules only (SparseAutoEncoder, Normalize): no custom code runs",
                  "model = SparseEncoder('path/to/this/folder')",
                  f"codes = model.encode(['a text'])  # (1, {config['k']}) sparse tensor, {active(config['hparams'])} "
                  "non-zeros, L2-normalised", "```", ""]
    elif st_folder:
        asymmetric = method_class(config["type"]).asymmetric
        lines += ["```python", "from sentence_transformers import SentenceTransformer",
                  "# sentence-transformers' own modules only (Dense, Normalize" + (", Router" if asymmetric else "")
                  + "): no custom code runs",
                  "model = SentenceTransformer('path/to/this/folder')",
                  f"vectors = model.encode(['a text'])  # (1, {config['k']}), L2-normalised"]
        if asymmetric:
            lines += ["queries = model.encode_query(['a question'])  # the query map",
                      "documents = model.encode_document(['a text'])  # the document map (also plain encode)"]
        lines += ["```", ""]
    elif no_folder:
        lines += [f"No sentence-transformers model folder: {no_folder}. Compress the backbone's vectors with the "
                  "compressor alone:", ""]
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
    # what the fit recorded (the document map of a query side, the drift guard's statistics) goes with it
    method.meta = {**{key: method.meta[key] for key in RECORDED if key in method.meta}, "export": provenance}
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    st_folder = spec.get("family") == "sentence_transformers"
    no_folder = None
    if st_folder and method.sparse_codes:
        modules = sparse_encoder_modules(method)
    elif st_folder:
        try:
            modules = compressor_modules(method)
        except NotImplementedError as exc:
            st_folder, no_folder = False, str(exc)
            print(f"note: {checkpoint}: no sentence-transformers folder ({exc}); exporting the compressor alone",
                  file=sys.stderr)
    if st_folder:
        from sentence_transformers import SentenceTransformer
        from sentence_transformers.sparse_encoder import SparseEncoder

        backbone = _backbone_model(spec)
        model = (SparseEncoder if method.sparse_codes else SentenceTransformer)(
            modules=[*backbone, *modules], device="cpu", prompts=backbone.prompts,
            default_prompt_name=backbone.default_prompt_name)
        model.save(str(tmp))
    save_compressor(method, tmp / "compressor", provenance)  # the exact record, read by load_compressor
    config = json.loads((tmp / "compressor" / CONFIG).read_text(encoding="utf-8"))
    (tmp / "README.md").write_text(model_card(result, config, st_folder, no_folder), encoding="utf-8")
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


__all__ = ["BeirDenseModel", "CompressorModule", "OldExportError", "check_model_folder", "compressor_modules", "export",
           "load_compressor", "map_modules", "save_compressor", "sparse_encoder_modules"]
