"""Staging (rule stage_beir): a dataset of a local BEIR copy (linked or copied) or of a verified
zip becomes ``data/beir/{dataset}/`` with its source manifest ``source.json`` (where the files came
from and their fingerprints); the checks of fingerprints (the registry's official per-file
sha256, an artifact's recorded source); :func:`load_staged`, which loads staged data verified
against its ``source.json``.
"""

from __future__ import annotations

import os
import shutil
import zipfile
from pathlib import Path
from typing import Mapping

from .. import records
from ..atomic import atomic_path
from ..hashing import sha256_bytes
from .load import CORPUS, QUERIES, BeirDataset, ChecksumError, DataError, dataset_files, load_beir, read_decompressed

LOCAL_MODES = ("link", "copy")  # config `beir_local_mode`: how a local BEIR copy is staged


# --------------------------------------------------------------------------- fingerprints


def fingerprint(root: str | os.PathLike) -> dict[str, str]:
    """sha256 of the decompressed content of every dataset file, by canonical name."""
    return {name: sha256_bytes(read_decompressed(p)) for name, p in dataset_files(root).items()}


def check_known_hashes(fp: Mapping[str, str], known: Mapping[str, str], where: str) -> None:
    """Refuse files whose fingerprint differs from a known official sha256."""
    for name, want in known.items():
        got = fp.get(name)
        if got is None:
            raise DataError(f"{where}: expected file {name} is missing")
        if got != str(want).strip().lower():
            raise ChecksumError(
                f"{where}/{name}: sha256 {got} differs from the known official value {want}; "
                "the file is not the official release (refusing to use it)"
            )


def check_same_source(have: Mapping[str, str] | None, expected: Mapping[str, str], path: str | os.PathLike,
                      against: str | os.PathLike, remedy: str) -> None:
    """Refuse an artifact (``path``) made from other data than ``expected``, the fingerprint
    recorded by ``against``: a stale file copied in, or staged data changed under it."""
    if have is None:
        raise DataError(f"{path}: records no source fingerprint; {remedy}")
    if dict(have) != dict(expected):
        diff = sorted(k for k in set(have) | set(expected) if have.get(k) != expected.get(k))
        raise DataError(f"{path}: made from other data than {against} describes (files that differ: "
                        f"{', '.join(diff)}); {remedy}")


# --------------------------------------------------------------------------- staging


def _clear_dataset_files(dest: Path) -> None:
    for name in (CORPUS, f"{CORPUS}.gz", QUERIES, f"{QUERIES}.gz"):
        p = dest / name
        if p.exists() or p.is_symlink():
            p.unlink()
    if (dest / "qrels").is_dir():
        shutil.rmtree(dest / "qrels")


def unpack_zip(zip_path: str | os.PathLike, member_dir: str, dest: str | os.PathLike) -> None:
    """Extract the files under ``member_dir/`` of the zip into ``dest`` (atomically)."""
    dest = Path(dest)
    prefix = member_dir.strip("/") + "/"
    tmp = dest.parent / f".{dest.name}.unpack"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        with zipfile.ZipFile(zip_path) as zf:
            members = [m for m in zf.namelist() if m.startswith(prefix) and not m.endswith("/")]
            if not members:
                raise DataError(f"{zip_path}: no files under {prefix} in the archive")
            for m in members:
                rel = m[len(prefix):]
                if rel.startswith("/") or ".." in Path(rel).parts:
                    raise DataError(f"{zip_path}: unsafe member path {m!r}")
                target = tmp / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(m) as src, open(target, "wb") as out:
                    shutil.copyfileobj(src, out)
        dest.mkdir(parents=True, exist_ok=True)
        for item in tmp.iterdir():
            final = dest / item.name
            if final.is_dir() and not final.is_symlink():
                shutil.rmtree(final)
            elif final.exists() or final.is_symlink():
                final.unlink()
            os.replace(item, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def stage_local(src: str | os.PathLike, dest: str | os.PathLike, mode: str = "link") -> None:
    """Make ``dest`` a BEIR directory whose files are links to (or copies of) ``src``'s."""
    if mode not in LOCAL_MODES:
        raise ValueError(f"mode must be one of {LOCAL_MODES}, not {mode!r}")
    src, dest = Path(src).resolve(), Path(dest)
    files = dataset_files(src)
    dest.mkdir(parents=True, exist_ok=True)
    _clear_dataset_files(dest)
    for _, path in files.items():
        target = dest / path.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        if mode == "link":
            target.symlink_to(path)
        else:
            with atomic_path(target) as tmp:
                shutil.copyfile(path, tmp)


def resolve_local_root(beir_dir: str | os.PathLike, entry: Mapping) -> Path:
    """Where a dataset lives inside a local BEIR directory (``entry['subdir']``)."""
    return Path(beir_dir) / entry["subdir"]


def stage_dataset(
    name: str,
    entry: Mapping,
    dest: str | os.PathLike,
    *,
    local_dir: str | os.PathLike | None = None,
    zip_path: str | os.PathLike | None = None,
    mode: str = "link",
    on_missing: str = "error",
) -> dict:
    """Stage dataset ``name`` into ``dest`` and write ``dest/source.json``.

    Exactly one of ``local_dir`` (a local BEIR root) or ``zip_path`` (a verified zip) is used.
    The staged files are fingerprinted, checked against the registry's known per-file hashes
    (``entry['files']``, if any) and fully loaded once, so that any corrupt line, bad qrels row
    or unknown id fails here, at the data stage, with a message naming file and line.
    """
    dest = Path(dest)
    if (local_dir is None) == (zip_path is None):
        raise ValueError("give exactly one of local_dir or zip_path")
    # a stale manifest must not survive a failed re-staging (it would vouch for other files)
    stale = dest / "source.json"
    if stale.exists() or stale.is_symlink():
        stale.unlink()
    if local_dir is not None:
        src = resolve_local_root(local_dir, entry)
        if not src.is_dir():
            raise DataError(
                f"{src}: dataset {name!r} not found in the local BEIR directory {local_dir}"
            )
        stage_local(src, dest, mode)
        source = {"kind": "local", "path": str(src.resolve()), "mode": mode}
    else:
        dest.mkdir(parents=True, exist_ok=True)
        _clear_dataset_files(dest)
        unpack_zip(zip_path, entry["subdir"], dest)
        source = {"kind": "download", "url": entry.get("url"), "zip_sha256": entry.get("zip_sha256")}
    ds = load_beir(dest, on_missing=on_missing)
    check_known_hashes(ds.fingerprint, entry.get("files") or {}, str(dest))
    manifest = {
        "dataset": name,
        "source": source,
        "fingerprint": ds.fingerprint,
        "on_missing": on_missing,
        "dropped_qrels_rows": ds.dropped,
        "counts": {
            "corpus": len(ds.corpus),
            "queries": len(ds.queries),
            "qrels": {k: sum(len(v) for v in t.values()) for k, t in ds.qrels.items()},
        },
    }
    return records.write("source", dest / "source.json", manifest)


def load_staged(data_dir: str | os.PathLike) -> BeirDataset:
    """Load a staged dataset, verifying it against its ``source.json`` manifest."""
    data_dir = Path(data_dir)
    if not (data_dir / "source.json").is_file():
        raise DataError(f"{data_dir}: no source.json: the dataset is not staged; run the data stage")
    manifest = records.read("source", data_dir / "source.json")
    return load_beir(data_dir, manifest["fingerprint"], on_missing=manifest["on_missing"])
