#!/usr/bin/env python3
"""Copy the workflow's own study tables (and their figures) into the documentation, each with a
provenance header: the git commit of the working tree, the config files and the command of the run,
the date (UTC), the sha256 of the copied file, and the machine the table's runs were computed on,
read from the runs' own records.

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

The machine header is never typed: for each table, ``<results>/tables/<EXPERIMENT>_runs.tsv`` (written
by the table rule beside the table) lists its runs, and each run's record is read: a trained or
evaluated run's ``eval.json`` (its evaluation job's ``runtime`` and ``versions``, and its training
job's, under ``training``), the ``efficiency`` / ``frontier`` study's own record, or each record a
budget study read (its list names them). From them the
header states the CPU and its recorded SIMD flags (and the GPU, if any), the threads, MKL's
reproducibility mode (or that the records predate it: no ``mkl`` field), the torch version and the
range of commits the runs were computed at, each value with its count of runs, every distinct value
listed where they differ. A run whose training and evaluation jobs differ in a value shows it as
``A (training) / B (evaluation)``; for the commits it counts under each. A missing per-run list or
record is refused (exit status 2, naming the file) before anything is written: publish from the
results folder of the run that made the table.

``--restate COPY ...`` publishes nothing: it adds to copies published before the machine header
existed (their runs' records were not kept) that their machine is not stated and, from git, whether
their commit predates MKL's reproducible mode (``MKL_MODE_COMMIT``).

Standard library only (Python 3.11).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

REFUSED = 2  # exit status of a refusal (missing table, per-run list, record or config; bad name)
MKL_MODE_COMMIT = "3fc382faf6d4c663636c81a9e9cbc05621ac7aa8"  # runs record MKL's reproducible mode from here on
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")  # the workflow's experiment names
MARK = "<!-- Written by tools/publish_tables.py: publish again from a run instead of editing this file. -->"


def _load_paths():
    """dive_core/paths.py of this checkout, loaded as a file: the workflow's path templates, without
    importing dive_core (torch, numpy) into a standard-library tool."""
    spec = importlib.util.spec_from_file_location(
        "_dive_paths", Path(__file__).resolve().parents[1] / "dive_core" / "paths.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PATHS = _load_paths()
RUN_KEY = ("dataset", "backbone", "method", "k", "stage", "seed")  # the columns naming one evaluated run


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


# --------------------------------------------------------------------------- the runs' own records
def record_paths(results: Path, name: str) -> list[Path]:
    """The records behind table ``name``, from its per-run list; refuses a missing list or record."""
    listing = results / "tables" / f"{name}_runs.tsv"
    if not listing.is_file():
        raise Refused(f"{listing}: no per-run list for table {name!r} (the table rule writes it beside the table), "
                      f"so the machine its runs were computed on cannot be read; rebuild the table: "
                      f"snakemake --cores 2 --forcerun table {results / 'tables' / f'{name}.md'}")
    with open(listing, encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    if not rows:
        raise Refused(f"{listing}: lists no run")
    columns = set(rows[0])
    if set(RUN_KEY) <= columns:  # one evaluated run per row
        paths = [PATHS.EVAL_JSON.format(**{c: r[c] for c in RUN_KEY}) for r in rows]
    elif "latency_ms_median" in columns:  # the efficiency study: one index per row, from its records
        paths = [PATHS.SYNTHETIC if r["dataset"] == "synthetic" else
                 PATHS.EFFICIENCY.format(dataset=r["dataset"], backbone=r["backbone"]) for r in rows]
    elif "encoding" in columns:  # the frontier study: one (method, dim, encoding) per row, its repeats' too
        paths = [PATHS.FRONTIER_SEED.format(dataset=r["dataset"], backbone=r["backbone"], seed=r["seed"])
                 if r.get("repeat") == "True" else PATHS.FRONTIER.format(dataset=r["dataset"], backbone=r["backbone"])
                 for r in rows]
    elif "record" in columns:  # the budget study: the records it read (frontier or arrival codes), by path
        paths = [r["record"] for r in rows]
    else:
        raise Refused(f"{listing}: neither runs ({', '.join(RUN_KEY)}) nor efficiency or frontier rows; "
                      f"cannot tell which records are behind the table")
    # the templates start with results/: the records live under the --results folder given
    found = [results / Path(p).relative_to("results") for p in dict.fromkeys(paths)]
    missing = [p for p in found if not p.is_file()]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise Refused(f"{missing[0]}: the record of a run of table {name!r} is missing{more}; the table's "
                      f"machine header is read from its runs' records: publish from the results folder of the run")
    return found


def _jobs(record: dict) -> list[tuple[str, dict, dict]]:
    """(job, runtime, versions) of each job behind a record: training, then evaluation."""
    jobs = []
    training = record.get("training") or {}
    if training.get("runtime") is not None:
        jobs.append(("training", training["runtime"], training.get("versions") or {}))
    jobs.append(("evaluation" if jobs else "job", record.get("runtime") or {}, record.get("versions") or {}))
    return jobs


def _machine(rt: dict) -> str:
    if not rt.get("cpu"):
        return "not recorded"
    flags = rt.get("cpu_flags")
    text = f"{rt['cpu']} (SIMD flags: {' '.join(flags) if flags else 'none'})" if flags is not None else \
        f"{rt['cpu']} (SIMD flags not recorded)"
    return text + (f" + GPU {rt['cuda']}" if rt.get("cuda") else "")


def _threads(rt: dict) -> str:
    asked, used = rt.get("torch_threads"), rt.get("torch_num_threads")
    if asked is None:
        return "not recorded"
    return f"{asked}" if used in (None, asked) else f"{asked} (torch used {used})"


def _mkl(rt: dict) -> str:
    if "mkl" not in rt:
        return "none: the runs predate MKL's reproducible mode (their records have no `mkl` field)"
    mkl = rt["mkl"]
    if mkl is None:
        return "no MKL in this torch"
    mode = mkl.get("mkl_cbwr", "?")
    if mode == "BRANCH_OFF":
        return "BRANCH_OFF (MKL's default, not reproducible)"
    return f"{mode} (auto branch {mkl.get('auto_branch', '?')})"


FIELDS = (("machine", _machine), ("threads", _threads), ("MKL mode", _mkl),
          ("torch", None))  # torch: from the job's versions


def run_values(record: dict) -> dict[str, str]:
    """One run's value of each of :data:`FIELDS`; where its jobs differ: ``A (training) / B (evaluation)``."""
    out = {}
    jobs = _jobs(record)
    for field, read in FIELDS:
        per_job = [(job, (vs.get("torch") or "not recorded") if read is None else read(rt)) for job, rt, vs in jobs]
        values = list(dict.fromkeys(v for _, v in per_job))
        out[field] = values[0] if len(values) == 1 else " / ".join(f"{v} ({job})" for job, v in per_job)
    return out


def run_commits(record: dict) -> list[str]:
    """The commits a run's jobs ran at (``<sha>``, ``<sha>-dirty`` or ``not recorded``), each once."""
    return list(dict.fromkeys(rt.get("git_commit") or "not recorded" for _, rt, _ in _jobs(record)))


def _count(n: int) -> str:
    return f"{n} run{'s' if n != 1 else ''}"


def _commit_order(commits: list[str], cwd: Path) -> list[str]:
    """``commits`` in the history's order (ancestors first) where git knows them; the unknown ones after."""
    shas = [c.removesuffix("-dirty") for c in commits]
    try:
        out = _git(["rev-list", "--topo-order", "--reverse", "--ignore-missing", *sorted(set(shas))], cwd)
        place = {h: i for i, h in enumerate(out.split())}
    except (OSError, subprocess.CalledProcessError):
        place = {}
    known = sorted((c for c, s in zip(commits, shas) if s in place), key=lambda c: (place[c.removesuffix("-dirty")], c))
    return known + [c for c, s in zip(commits, shas) if s not in place]


def _short(commit: str) -> str:
    sha = re.fullmatch(r"([0-9a-f]{40})(-dirty)?", commit)
    return code(sha.group(1)[:12] + (sha.group(2) or "") if sha else commit)


def _tally(values: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return counts


def machine_lines(records: list[dict], listing: Path, cwd: Path) -> list[str]:
    """The header's lines on where the runs were computed, each value with its count of runs."""
    n = _count(len(records))
    lines = [f"> - runs: {len(records)}, listed in {code(listing.as_posix())}; the lines below are read from their "
             f"records"]
    values = [run_values(r) for r in records]
    for field, _ in FIELDS:
        counts = _tally([v[field] for v in values])
        text = f"{next(iter(counts))} ({n})" if len(counts) == 1 else \
            f"{len(counts)} values: " + "; ".join(f"{v} ({_count(k)})" for v, k in
                                                  sorted(counts.items(), key=lambda x: (-x[1], x[0])))
        lines.append(f"> - {field}: {text}")
    counts = _tally([c for r in records for c in run_commits(r)])  # a run counts under each of its jobs' commits
    order = _commit_order(list(counts), cwd)
    span = _short(order[0]) if len(order) == 1 else f"{_short(order[0])}..{_short(order[-1])}"
    text = f"{span} ({n})" + ("" if len(order) == 1 else
                              ": " + ", ".join(f"{_short(c)} ({_count(counts[c])})" for c in order))
    lines.append(f"> - commits: {text}")
    return lines


def read_records(paths: list[Path]) -> list[dict]:
    out = []
    for path in paths:
        try:
            out.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            raise Refused(f"{path}: not a readable JSON record ({exc})") from exc
    return out


def header(*, source: Path, source_sha: str, figure: tuple[Path, Path, str] | None, commit: tuple[str | None, str],
           configs: list[str], command: str | None, date: str, machine: list[str]) -> str:
    lines = [
        MARK,
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
        *machine,
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
            cwd: Path | None = None, now: datetime | None = None, suffix: str = "") -> list[Path]:
    """Copy the tables (and figures); returns the files written. ``suffix``: appended to each copy's
    name (``tuned`` -> ``tuned_scifact.md``), for a run whose table would replace a published one
    of the same name that holds more (another configuration's)."""
    if suffix and not re.fullmatch(r"[A-Za-z0-9_-]+", suffix):
        raise Refused(f"--suffix {suffix!r}: letters, digits, '_' and '-' only")
    cwd = Path.cwd() if cwd is None else cwd
    for c in configs:
        if not (cwd / c).is_file():
            raise Refused(f"{c}: config file not found (experiment names go before --config, or after --)")
    names = plan_copies(results, experiments)
    machines = {name: machine_lines(read_records(record_paths(results, name)),
                                    results / "tables" / f"{name}_runs.tsv", cwd) for name in names}
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
            dst_figure = docs / f"{name}{suffix}.png"
            atomic_write(dst_figure, fig_bytes)
            written.append(dst_figure)
            figure = (src_figure, dst_figure, hashlib.sha256(fig_bytes).hexdigest())
        head = header(source=table, source_sha=hashlib.sha256(data).hexdigest(), figure=figure, commit=commit,
                      configs=configs, command=command, date=date, machine=machines[name])
        dst = docs / f"{name}{suffix}.md"
        atomic_write(dst, head.encode("utf-8") + data)
        written.append(dst)
    return written


def restated(path: Path, cwd: Path, mkl_commit: str = MKL_MODE_COMMIT) -> str | None:
    """The text of a copy published before the machine header existed (its runs' records not kept)
    with the lines it lacks: that its machine is not stated, and whether its commit predates MKL's
    reproducible mode (``git merge-base --is-ancestor`` in ``cwd``). None for a copy that already
    has them; refuses a file without this tool's header or commit."""
    lines = path.read_text(encoding="utf-8").split("\n")
    if lines[0] != MARK:
        raise Refused(f"{path}: not a copy written by tools/publish_tables.py")
    end = next((i for i, line in enumerate(lines[1:], 1) if not line.startswith(">")), len(lines))
    fields = tuple(f"> - {field}:" for field, _ in FIELDS)
    if any(line.startswith(fields) for line in lines[:end]):
        return None
    commit = next((re.search(r"`([0-9a-f]{7,40})`", line) for line in lines[:end]
                   if line.startswith("> - commit:")), None)
    if commit is None:
        raise Refused(f"{path}: its header names no commit, so nothing can be said about its runs")
    ancestor = subprocess.run(["git", "merge-base", "--is-ancestor", commit.group(1), mkl_commit], cwd=cwd,
                              capture_output=True, text=True)
    if ancestor.returncode not in (0, 1):
        raise Refused(f"{path}: git cannot order commit {commit.group(1)} and {mkl_commit[:7]}: "
                      f"{ancestor.stderr.strip()}")
    before = ancestor.returncode == 0 and not mkl_commit.startswith(commit.group(1))
    added = ["> - machine: not stated: published before this tool read the runs' records, which were not kept "
             "([the machines](../reproducibility.md#the-machines))",
             f"> - MKL mode: none: commit {_short(commit.group(1))} predates MKL's reproducible mode "
             f"({_short(mkl_commit)}), so a rerun at a later commit may differ in the last digits" if before else
             f"> - MKL mode: not stated (records not kept); commit {_short(commit.group(1))} comes after MKL's "
             f"reproducible mode was turned on ({_short(mkl_commit)})"]
    return "\n".join(lines[:end] + added + lines[end:])


def restate(paths: list[Path], cwd: Path, mkl_commit: str = MKL_MODE_COMMIT) -> list[Path]:
    """:func:`restated` for every copy first (a refusal writes nothing), then each changed one written;
    returns those."""
    texts = {path: restated(path, cwd, mkl_commit) for path in paths}
    changed = [path for path, text in texts.items() if text is not None]
    for path in changed:
        atomic_write(path, texts[path].encode("utf-8"))
    return changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python tools/publish_tables.py",
        description="Copy results/tables/<experiment>.md (and results/figures/<experiment>.png) into "
                    "docs/tables/ with a provenance header (commit, config, command, date, sha256, and the "
                    "machine, threads, MKL mode, torch and commits read from the runs' own records).")
    ap.add_argument("experiments", nargs="*", metavar="EXPERIMENT",
                    help="experiment names (results/tables/<name>.md); none: every table")
    ap.add_argument("--results", default="results", type=Path, help="the workflow's results folder")
    ap.add_argument("--docs", default="docs/tables", type=Path, help="where the copies go")
    ap.add_argument("--config", nargs="+", default=[], metavar="CONFIG", action="extend",
                    help="the config file(s) of the run, as given to --configfile")
    ap.add_argument("--command", default=None, help="the command that produced the tables")
    ap.add_argument("--suffix", default="", help="appended to each copy's name: --suffix _scifact writes "
                                                  "docs/tables/tuned_scifact.md from results/tables/tuned.md")
    ap.add_argument("--restate", nargs="+", default=[], type=Path, metavar="COPY",
                    help="instead of publishing: add to copies published before the machine header existed "
                         "(their records not kept) that their machine is not stated and whether their commit "
                         "predates MKL's reproducible mode")
    args = ap.parse_args(argv)
    if args.restate:
        try:
            changed = restate(args.restate, Path.cwd())
        except (Refused, OSError) as exc:
            print(f"publish_tables: refused: {exc}", file=sys.stderr)
            return REFUSED
        for path in changed:
            print(path)
        return 0
    try:
        written = publish(args.results, args.docs, args.experiments, args.config, args.command, suffix=args.suffix)
    except Refused as exc:
        print(f"publish_tables: refused: {exc}", file=sys.stderr)
        return REFUSED
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
