"""The compressor: a workflow checkpoint or an exported folder, loaded, and what it is (its provenance)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from .errors import CompressError


def load_model(path: str | Path, device: str = "cpu"):
    """The compressor in ``path``: a workflow checkpoint file, or an exported folder. It remembers
    ``path`` as its ``source``, which refusals name."""
    p = Path(path)
    if p.is_dir():
        from ..export import load_compressor

        try:
            method = load_compressor(p, device)
        except (FileNotFoundError, ValueError) as exc:
            raise CompressError(f"{p}: not a usable compressor folder: {exc}") from None
    elif p.is_file():
        from ..methods import Method

        try:
            method = Method.load(p, device)
        except ValueError as exc:  # records.RecordError names the file
            raise CompressError(str(exc)) from None
    else:
        raise CompressError(f"{p}: no such compressor (expected a workflow checkpoint model.pt or an exported folder)")
    method.source = str(path)
    return method


def job_model(path, name: str):
    """The compressor of the workflow's ``compress.<name>`` jobs, which write dense vector files: a
    k-sparse compressor (csr) is refused, naming ``dive-compress``, which writes its codes."""
    method = load_model(path)
    if method.sparse_codes:
        raise CompressError(f"compress.{name}: {path} is a k-sparse compressor ({method.type}: {method.active} of "
                            f"{method.k} latents); the compress: jobs write dense vector files. Write its (index, "
                            f"fp16 value) codes with: dive-compress {path} INPUT OUTPUT.parquet")
    return method


def _method(model, device: str = "cpu"):
    return model if hasattr(model, "compress") and hasattr(model, "k") else load_model(model, device)


RUN_KEYS = ("dataset", "backbone", "method", "stage")


def provenance(method, side: str = "document") -> dict:
    """What the compressor is: type, d -> k, seed, weights sha256, hyperparameters, and where a
    workflow trained it (dataset, backbone, method, stage) when its checkpoint or export says.

    An asymmetric compressor (query_side) is described by the map of ``side`` alone: for
    ``document``, its document map's type, seed, hyperparameters and state sha256 (so a corpus
    compressed before and after a refit of the query side carries the same record); for ``query``,
    the whole compressor. Either way ``side`` is recorded. A symmetric one records no side."""
    meta = dict(method.meta or {})
    source = "export" if "export" in meta else "checkpoint"
    run = (meta.get("export") or {}) if source == "export" else meta
    if getattr(method, "asymmetric", False) and side == "document":
        doc = meta["document_map"]
        prov = {"type": method.type, "side": side, "document_map": doc["type"], "d": int(method.d),
                "k": int(method.k), "seed": int(doc["seed"]), "weights_sha256": doc["state_sha256"],
                "hparams": dict(doc["hparams"]), "source": source}
    else:
        prov = {"type": method.type, "d": int(method.d), "k": int(method.k), "seed": int(method.seed),
                "weights_sha256": method.state_sha256(), "hparams": dict(method.hp), "source": source}
        if getattr(method, "asymmetric", False):
            prov["side"] = side
    prov.update({key: run[key] for key in RUN_KEYS if run.get(key) is not None})
    return prov


def describe(prov: Mapping[str, Any]) -> str:
    """One human-readable paragraph of :func:`provenance`."""
    side = f", {prov['side']} side" + (f" ({prov['document_map']} document map)" if "document_map" in prov else "") \
        if "side" in prov else ""
    lines = [f"compressor: {prov['type']} {prov['d']} -> {prov['k']} dimensions{side}, seed {prov['seed']}, "
             f"weights sha256 {prov['weights_sha256']} ({prov['source']})"]
    run = [f"{key} {prov[key]}" for key in RUN_KEYS if key in prov]
    lines.append("  trained by the workflow: " + ", ".join(run) if run else
                 "  no workflow run recorded (dataset/backbone/method/stage unknown)")
    return "\n".join(lines)
