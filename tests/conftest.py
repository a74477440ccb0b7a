"""Shared fixtures, and the rule that in CI a skipped test fails the run.

* ``generated_beir``: a local BEIR directory (what ``BEIR_DATA_DIR`` points at) holding the
  generated collection ``generated-tiny`` (dive_core/generated.py) where the registry looks for it.
  The end-to-end and BEIR tests run on it, so they never depend on data outside the repository.
* With ``CI=true`` in the environment, a run in which any test (or module) was skipped exits
  non-zero and lists the skips, unless the test's node id is in ``CI_ALLOWED_SKIPS`` with a
  reason. A skip means a check did not run; locally that is allowed (the real-SciFact tests need
  a copy of BEIR SciFact), in CI it is not (``.ci/run`` points ``BEIR_DATA_DIR`` at the shared
  copy).
* ``make test`` runs the suite on two pytest-xdist workers, each module on one (``--dist loadfile
  --no-loadscope-reorder``): modules are handed out in collection order, and ``SLOWEST_FIRST``
  puts the longest first, so that they do not start last and leave the other worker idle.
* ``OMP_WAIT_POLICY=PASSIVE``: the two workers share two cores, so torch's and MKL's
  OpenMP threads, which by default spin for a while after each parallel region, would spin on the
  cores the other worker's jobs need (two 2-thread trainings at once took twice as long as one;
  passive, as long as one). The wait policy changes no number: the same bytes either way. The MKL
  race checks (tests/test_reproducibility.py) run their children with the default policy, the one
  their rates were observed under. ``SUITE_ENV`` names what the suite sets.
* ``ci_log``: a line for the CI log. A worker's own output is not shown, so the line travels on
  the test's report and the run's summary prints it ("what the tests reported").
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent

# set before any test module imports torch; every process the suite starts inherits it
SUITE_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}
os.environ.update(SUITE_ENV)

# tests/env_llm2vec/ runs inside the LLM2Vec environment (`make test` runs it with .venv-llm2vec's
# interpreter; dive_core/environments.py); an interpreter without llm2vec does not collect it.
try:
    importlib.metadata.distribution("llm2vec")
    collect_ignore: list[str] = []
except importlib.metadata.PackageNotFoundError:
    collect_ignore = ["env_llm2vec"]

# node id (or a prefix of it, e.g. "tests/test_x.py::") -> why this skip is acceptable in CI.
# Keep it empty: every test must run in CI.
CI_ALLOWED_SKIPS: dict[str, str] = {}


def shared_beir_dir() -> Path:
    """Where tests look for a real local BEIR copy (SciFact, ...): $BEIR_DATA_DIR, else the
    shared copy beside the repository."""
    env = os.environ.get("BEIR_DATA_DIR")
    return Path(env) if env else (REPO.parent / "shared" / "data" / "beir").resolve()


@pytest.fixture
def shared_scifact() -> Path:
    """The official BEIR SciFact in a local BEIR directory; the test skips, naming what it needs
    and where it looked, if there is none (CI has one: .ci/run sets BEIR_DATA_DIR)."""
    root = shared_beir_dir() / "scifact"
    if not root.is_dir():
        env = os.environ.get("BEIR_DATA_DIR")
        pytest.skip(f"needs the official BEIR SciFact (scifact/ with corpus.jsonl[.gz], queries.jsonl, qrels/); "
                    f"looked in {root} (" + (f"BEIR_DATA_DIR={env}" if env else
                                              "BEIR_DATA_DIR unset: the shared copy beside the repository") + ")")
    return root


@pytest.fixture(scope="session")
def generated_beir(tmp_path_factory) -> Path:
    """A local BEIR directory with the generated collection at ``_generated/generated-tiny``."""
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    from dive_core.generated import write_beir_dir

    root = tmp_path_factory.mktemp("generated-beir")
    write_beir_dir(root)
    return root


# --------------------------------------------------------------------------- order, CI log
# The modules that take longest, longest first: bd833fc's `make test` on the AVX2 EPYC, one process,
# --durations=0 summed per module (s): 1210, 550, 304, 193, 129, 68, 53, 51 (docs/tests.md). Every
# other module follows in its own order.
SLOWEST_FIRST = ("test_workflow.py", "test_slurm.py", "test_reproducibility.py", "test_paper_shapes.py",
                 "test_compiled_step.py", "test_compress.py", "test_export.py", "test_efficiency.py")


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each module keeps its order


@pytest.fixture
def ci_log(record_property):
    """``ci_log(line)``: ``line`` printed in the run's terminal summary, with the test's node id."""
    return lambda line: record_property("ci_log", line)


def _ci_log_lines(terminalreporter) -> list[str]:
    seen: dict[str, None] = {}  # every phase's report carries the test's properties: print each once
    for reports in terminalreporter.stats.values():
        for report in reports:
            for key, line in getattr(report, "user_properties", ()):
                if key == "ci_log":
                    seen.setdefault(f"{report.nodeid}: {line}")
    return list(seen)


# --------------------------------------------------------------------------- CI: a skip fails
def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def _allowed(nodeid: str) -> bool:
    return any(nodeid == key or (key.endswith("::") and nodeid.startswith(key)) for key in CI_ALLOWED_SKIPS)


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # (file, line, "Skipped: reason")
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


_SKIPPED: list[tuple[str, str]] = []  # (node id, reason) of every skip in this session


def pytest_configure(config):
    _SKIPPED.clear()


def _record(report) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        _SKIPPED.append((report.nodeid, _skip_reason(report)))


def pytest_runtest_logreport(report):
    _record(report)


def pytest_collectreport(report):  # a module skipped as a whole (pytest.skip(allow_module_level=True))
    _record(report)


def _not_allowed() -> list[tuple[str, str]]:
    return [(n, r) for n, r in _SKIPPED if not _allowed(n)]


def pytest_sessionfinish(session, exitstatus):
    # a run whose every test was skipped ends "no tests ran" (5): that fails too
    if in_ci() and _not_allowed() and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    lines = _ci_log_lines(terminalreporter)
    if lines:
        terminalreporter.section("what the tests reported", sep="-")
        for line in lines:
            terminalreporter.line(line)
    bad = _not_allowed() if in_ci() else []
    if not bad:
        return
    terminalreporter.section("skipped tests fail a CI run (CI=true)", sep="=", red=True, bold=True)
    for nodeid, reason in bad:
        terminalreporter.line(f"SKIPPED (not allowed in CI) {nodeid}: {reason}", red=True)
    terminalreporter.line(f"{len(bad)} skipped: make the data they need available, or add the test to "
                          "CI_ALLOWED_SKIPS in tests/conftest.py with the reason")
