"""Every `snakemake` command that README.md, docs/ and the Makefile give a user still builds the
targets it names when Snakemake parses it. Options such as ``--resources``, ``--configfile``,
``--config``, ``--groups`` and ``--group-components`` take several values, so a target written after
them is read as one more value: ``snakemake --cores 16 --resources gpu=1 all`` fails ("dictionary
update sequence element #1 has length 1") instead of running ``all``. Each command is parsed with
Snakemake's own argument parser; no workflow is loaded."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from snakemake.cli import get_argument_parser

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^\s*```")
SPAN = re.compile(r"`([^`]+)`")
COMMAND = re.compile(r"(?:^|(?<=[\s/]))snakemake(?![\w-])(.*)")
# what a user names as a target in these pages: a rule of the workflow or a file under results/
TARGET = re.compile(r"^(all|compress_all|results/\S+)$")
# what a Makefile recipe's $(SNAKEMAKE_ARGS) may hold (README.md's `make all` row)
MAKE_ARGS = ["", "--configfile config/paper.yaml", "--resources gpu=1", "--config device=cpu",
             "--set-threads train=4", "--forcerun train"]


def documented_commands() -> list[tuple[str, str]]:
    """(``page:line``, the arguments after ``snakemake``) of every command in a code span or block,
    cut at a shell operator or a comment."""
    out = []
    for page in PAGES:
        in_block = False
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            if FENCE.match(line):
                in_block = not in_block
                continue
            for piece in [line] if in_block else SPAN.findall(line):
                m = COMMAND.search(piece)
                if m:
                    rest = re.split(r"\s(?:#|\||&&|;|>|2>)|\s{2,}", " " + m.group(1).lstrip())[0]
                    out.append((f"{page.relative_to(REPO)}:{n}", rest.strip()))
    return out


def make_commands() -> list[tuple[str, str]]:
    """The Makefile's snakemake recipes with each sample of $(SNAKEMAKE_ARGS) put in."""
    out = []
    lines = (REPO / "Makefile").read_text(encoding="utf-8").replace("\\\n", " ").splitlines()
    for n, line in enumerate(lines, 1):
        m = re.search(r"\$\(BIN\)/snakemake (--cores .*)", line)
        if m and "$(SNAKEMAKE_ARGS)" in line:
            for extra in MAKE_ARGS:
                args = m.group(1).replace("$(CORES)", "2").replace("$(SNAKEMAKE_ARGS)", extra)
                out.append((f"Makefile:{n} SNAKEMAKE_ARGS='{extra}'", args))
    return out


def parsed_targets(args: str) -> list[str]:
    namespace, _ = get_argument_parser().parse_known_args(shlex.split(args))
    return list(namespace.targets or [])


def test_the_pages_hold_the_commands_this_test_reads():
    found = dict(documented_commands())
    assert len(found) >= 30
    assert "--cores 2 results/scifact/dive/seed2027.json" in found.values()
    assert len(make_commands()) == 3 * len(MAKE_ARGS)  # make all, smoke and dry-run


@pytest.mark.parametrize("where, args", documented_commands() + make_commands())
def test_a_documented_snakemake_command_keeps_its_targets(where, args):
    named = [t for t in shlex.split(args) if TARGET.match(t)]
    try:
        targets = parsed_targets(args)
    except Exception as exc:  # Snakemake's parser raises on a target taken as an option's value
        pytest.fail(f"{where}: `snakemake {args}` does not parse: {exc!r}")
    assert set(named) <= set(targets), (f"{where}: in `snakemake {args}` Snakemake reads {targets} as the "
                                        f"targets, not {named}: put the targets before options that take "
                                        "several values, or after `--`")


# ---------------------------------------------------------------- python -m commands
MODULE = re.compile(r"python3? -m ((?:dive_core|benchmarks)[\w.]*)")


def documented_modules() -> list[str]:
    """Every ``python -m dive_core...`` / ``benchmarks...`` module that README.md, docs/ and
    config/README.md name (config/README.md names ``dive_core.config FILE`` without ``python -m``)."""
    found = {"dive_core.config"}
    for page in [*PAGES, REPO / "config" / "README.md"]:
        found.update(MODULE.findall(page.read_text(encoding="utf-8")))
    return sorted(found)


@pytest.mark.parametrize("module", documented_modules())
def test_help_of_each_documented_module_prints_its_usage_and_writes_nothing(module, tmp_path):
    """`python -m dive_core.generated --help` wrote the collection into a folder named '--help';
    `dive_core.data.derive` and `dive_core.config` took '--help' for a path."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", module, "--help"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage:"), proc.stdout
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- job groups
def _dry_run(args: list[str]):
    import os
    import subprocess
    import sys

    bindir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
    return subprocess.run([str(bindir / "snakemake"), "-n", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.parametrize("where, args", [c for c in documented_commands() if "--groups" in c[1]])
def test_a_documented_job_grouping_plans(where, args):
    """`--groups train=gpu_train` alone, as cluster.md gave it, stopped `all` before any job:
    'Group gpu_train depends on itself' (the tuned studies' trainings read a selection made from
    other trainings' evaluations). Each grouping the pages give builds its job graph."""
    proc = _dry_run(shlex.split(args))
    assert proc.returncode == 0, f"{where}: `snakemake -n {args}`:\n{proc.stdout[-1500:]}{proc.stderr[-1500:]}"


def test_grouping_trainings_and_evaluations_without_the_selection_is_refused_for_all():
    """What cluster.md says of `all`: without select in the group, Snakemake refuses it."""
    proc = _dry_run(["--profile", "profiles/slurm", "all", "--groups", "train=gpu_train", "evaluate=gpu_train",
                     "--group-components", "gpu_train=8"])
    assert proc.returncode != 0 and "depends on itself" in proc.stdout + proc.stderr
