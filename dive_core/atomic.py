"""Crash-safe writes: every output is written to a temporary file in the target directory
and renamed into place only once it is complete, so an interrupted job never leaves a
half-written artifact (and never clobbers a previous good one)."""

from __future__ import annotations

import contextlib
import errno
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


_NOT_WRITABLE = {errno.EACCES, errno.EPERM, errno.EROFS}
_NO_SPACE = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
# libraries that write through C (HDF5) may lose errno and keep only the message
_NO_SPACE_TEXT = ("No space left", "File too large", "Disk quota")


def _kind(exc: BaseException, path: Path, tmp: Path | None) -> str | None:
    """'space' or 'permission' when ``exc`` (or an error it arose from: HDF5 reports a full disk
    again, as a RuntimeError, while closing) is a failure to write the output - not, say, an
    unreadable input met while writing it; None otherwise. ``tmp`` None: creating the output."""
    names = {str(path), str(path.parent), str(tmp)}
    while exc is not None:
        code = getattr(exc, "errno", None)
        if code in _NO_SPACE or any(t in str(exc) for t in _NO_SPACE_TEXT):
            return "space"
        filename = getattr(exc, "filename", None)
        if code in _NOT_WRITABLE and (tmp is None or filename is None or str(filename) in names):
            return "permission"
        exc = exc.__cause__ or exc.__context__
    return None


def _write_error(path: Path, exc: BaseException, kind: str | None) -> OSError:
    """``exc`` restated so that the user sees which output could not be written and why."""
    why = {"space": "no space left (disk full, quota or file-size limit)",
           "permission": f"its directory {path.parent} is not writable (read-only file system or no "
                         "permission)"}.get(kind or "", getattr(exc, "strerror", None) or str(exc))
    code = getattr(exc, "errno", None) or {"space": errno.ENOSPC, "permission": errno.EACCES}.get(kind or "")
    return OSError(code, f"cannot write {path}: {why}; nothing was written there and a previous "
                             f"{path.name}, if any, is unchanged")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str | None = None) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it onto ``path`` on success.

    On any exception (including KeyboardInterrupt) the temporary file is removed and
    ``path`` is left untouched. A read-only directory or a full disk is reported as an
    ``OSError`` that names ``path``.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix or ".tmp")
    except OSError as exc:
        raise _write_error(path, exc, _kind(exc, path, None)) from exc
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        # mkstemp creates the file 0600; give the result the mode a plain open() would have
        os.chmod(tmp_path, 0o666 & ~_umask())
        os.replace(tmp_path, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
        kind = _kind(exc, path, tmp_path) if isinstance(exc, Exception) else None
        if kind:
            raise _write_error(path, exc, kind) from exc
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
