"""Crash-safe writes: every output is written to a temporary file in the target directory
and renamed into place only once it is complete, so an interrupted job never leaves a
half-written artifact (and never clobbers a previous good one)."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator


def _umask() -> int:
    """The process umask, read without changing it where possible (``os.umask`` both sets and
    returns it, which is racy with threads)."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str | None = None) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it onto ``path`` on success.

    On any exception (including KeyboardInterrupt) the temporary file is removed and
    ``path`` is left untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(
        dir=path.parent, prefix=f".{path.name}.", suffix=suffix or ".tmp"
    )
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        # mkstemp creates the file 0600; give the result the mode a plain open() would have
        os.chmod(tmp_path, 0o666 & ~_umask())
        os.replace(tmp_path, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
        raise


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", **kwargs: Any):
    """Like ``open(path, mode)`` but the file only appears under ``path`` once closed cleanly."""
    if "w" not in mode:
        raise ValueError("atomic_open only supports write modes")
    with atomic_path(path) as tmp:
        with open(tmp, mode, **kwargs) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as pretty, key-sorted JSON, atomically."""
    with atomic_open(path, "w", encoding="utf-8") as fh:
        json.dump(obj, fh, indent=2, sort_keys=True, allow_nan=False)
        fh.write("\n")


def read_json(path: str | os.PathLike) -> Any:
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from exc
