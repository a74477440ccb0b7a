#!/usr/bin/env python3
"""Copy the workflow's own study tables (and their figures) into the documentation, each with a
provenance header: the git commit of the working tree, the config files and the command of the run,
the date (UTC) and the sha256 of the copied file.

    python tools/publish_tables.py [--results results] [--docs docs/tables] \
        [--config CONFIG ...] [--command "..."] [--] [EXPERIMENT ...]

(``--config`` takes several files: put the experiment names before it, or after ``--``.)

For each EXPERIMENT, ``<results>/tables/<EXPERIMENT>.md`` is copied to ``<docs>/<EXPERIMENT>.md``
with the header prepended, and ``<results>/figures/<EXPERIMENT>.png``, if present, to
``<docs>/<EXPERIMENT>.png`` unchanged. Without EXPERIMENT names every ``<results>/tables/*.md`` is
copied. A missing table or config file is refused (exit status 2, naming the file) before anything
is written. Every file is written to a temporary name in its folder and renamed into place, so an
interrupted run leaves the previous copy intact.

The commit is ``git rev-parse HEAD`` run in the current directory; ``+ uncommitted changes`` is
added when ``git status --porcelain`` lists a modified tracked file (the publish folder itself is
not counted: it holds this command's own outputs). Run it from the checkout that produced the
results, right after the run, with the same ``--config`` files and the command you ran.

Standard library only (Python 3.11).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

REFUSED = 2  # exit status of a refusal (missing table or config, bad name)
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")  # the workflow's experiment names


class Refused(Exception):
    """A condition under which nothing is published; the message names the file."""


def _git(args: list[str], cwd: Path) -> str:
    out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return out.stdout


def git_state(cwd: Path, exclude: Path | None = None) -> tuple[str | None, str]:
    """(commit, note): the commit of ``cwd``'s checkout (None if git cannot tell) and
    ``" + uncommitted changes"`` when a tracked file outside ``exclude`` is modified."""
    try:
        commit = _git(["rev-parse", "HEAD"], cwd).strip()
    except (OSError, subprocess.CalledProcessError) as exc:
        why = exc.stderr.strip() if isinstance(exc, subprocess.CalledProcessError) and exc.stderr else str(exc)
        return None, f"unknown (git rev-parse HEAD failed: {why.splitlines()[0] if why else 'no output'})"
    pathspec = ["--", "."]
    if exclude is not None:
        try:
            top = Path(_git(["rev-parse", "--show-toplevel"], cwd).strip()).resolve()
            rel = exclude.resolve().relative_to(top)
            pathspec.append(f":(top,exclude){rel.as_posix()}")
        except (ValueError, subprocess.CalledProcessError):
            pass  # the publish folder is outside the repository: nothing to exclude
    try:
        status = _git(["status", "--porcelain", "--untracked-files=no", *pathspec], cwd)
    except (OSError, subprocess.CalledProcessError):
        return commit, " (git status failed: uncommitted changes unknown)"
    return commit, (" + uncommitted changes" if status.strip() else "")


def code(text: str) -> str:
    """``text`` as a Markdown code span, whatever backticks it holds."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def header(*, source: Path, source_sha: str, figure: tuple[Path, Path, str] | None, commit: tuple[str | None, str],
           configs: list[str], command: str | None, date: str) -> str:
    lines = [
        "<!-- Written by tools/publish_tables.py: publish again from a run instead of editing this file. -->",
        f"> Copied by {code('python tools/publish_tables.py')} from a run of the workflow.",
        ">",
        f"> - source: {code(source.as_posix())}, sha256 {code(source_sha)}",
    ]
    if figure is not None:
        src, dst, sha = figure
        lines.append(f"> - figure: {code(dst.name)}, copied from {code(src.as_posix())}, sha256 {code(sha)}")
    lines += [
        "> - commit: " + (code(commit[0]) if commit[0] else "") + commit[1],
        "> - config: " + (", ".join(code(c) for c in configs) if configs else "not given"),
        "> - command: " + (code(command) if command else "not given"),
        f"> - date (UTC): {date}",
        "",
        "",
    ]
    return "\n".join(lines)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, then rename it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def plan_copies(results: Path, experiments: list[str]) -> list[str]:
    """The experiments to publish; refuses a bad name or a missing table before anything is written."""
    tables = results / "tables"
    if not experiments:
        found = sorted(p.stem for p in tables.glob("*.md")) if tables.is_dir() else []
        if not found:
            raise Refused(f"{tables}: no tables (*.md) to publish; run the workflow first")
        return found
    for name in experiments:
        if not NAME.match(name):
            raise Refused(f"{name!r}: not an experiment name (give the name under experiments:, e.g. main)")
        table = tables / f"{name}.md"
        if not table.is_file():
            raise Refused(f"{table}: no such table; build it first: snakemake --cores 2 {table}")
    return list(dict.fromkeys(experiments))


def publish(results: Path, docs: Path, experiments: list[str], configs: list[str], command: str | None,
            cwd: Path | None = None, now: datetime | None = None) -> list[Path]:
    """Copy the tables (and figures); returns the files written."""
    cwd = Path.cwd() if cwd is None else cwd
    for c in configs:
        if not (cwd / c).is_file():
            raise Refused(f"{c}: config file not found (experiment names go before --config, or after --)")
    names = plan_copies(results, experiments)
    commit = git_state(cwd, exclude=docs if docs.is_absolute() else cwd / docs)
    date = (now or datetime.now(timezone.utc)).astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    written = []
    for name in names:
        table = results / "tables" / f"{name}.md"
        data = table.read_bytes()
        src_figure = results / "figures" / f"{name}.png"
        figure = None
        if src_figure.is_file():
            fig_bytes = src_figure.read_bytes()
            dst_figure = docs / f"{name}.png"
            atomic_write(dst_figure, fig_bytes)
            written.append(dst_figure)
            figure = (src_figure, dst_figure, hashlib.sha256(fig_bytes).hexdigest())
        head = header(source=table, source_sha=hashlib.sha256(data).hexdigest(), figure=figure, commit=commit,
                      configs=configs, command=command, date=date)
        dst = docs / f"{name}.md"
        atomic_write(dst, head.encode("utf-8") + data)
        written.append(dst)
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python tools/publish_tables.py",
        description="Copy results/tables/<experiment>.md (and results/figures/<experiment>.png) into "
                    "docs/tables/ with a provenance header (commit, config, command, date, sha256).")
    ap.add_argument("experiments", nargs="*", metavar="EXPERIMENT",
                    help="experiment names (results/tables/<name>.md); none: every table")
    ap.add_argument("--results", default="results", type=Path, help="the workflow's results folder")
    ap.add_argument("--docs", default="docs/tables", type=Path, help="where the copies go")
    ap.add_argument("--config", nargs="+", default=[], metavar="CONFIG", action="extend",
                    help="the config file(s) of the run, as given to --configfile")
    ap.add_argument("--command", default=None, help="the command that produced the tables")
    args = ap.parse_args(argv)
    try:
        written = publish(args.results, args.docs, args.experiments, args.config, args.command)
    except Refused as exc:
        print(f"publish_tables: refused: {exc}", file=sys.stderr)
        return REFUSED
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
