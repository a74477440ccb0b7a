"""The CI rule of tests/conftest.py: with CI=true a skipped test fails the run and is named with
its reason; without CI, or for a test allowlisted with a reason, a skip passes. Each case runs
pytest in a subprocess on a tiny test file, with a copy of the real conftest.py; the rule, the
order of the modules and the CI log lines hold as well on `make test`'s pytest-xdist workers."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

CONFTEST = Path(__file__).resolve().parent / "conftest.py"
MAKEFILE = CONFTEST.parent.parent / "Makefile"


def make_test_workers() -> list[str]:
    """The arguments `make test` gives the main suite's pytest before PYTEST_ARGS (its workers)."""
    text = MAKEFILE.read_text(encoding="utf-8")
    workers = re.search(r"^PYTEST_WORKERS \?= (\d+)$", text, re.M).group(1)
    args = re.search(r"^\t\$\(BIN\)/python -m pytest (.*) \$\(PYTEST_ARGS\)$", text, re.M).group(1)
    return args.replace("$(PYTEST_WORKERS)", workers).split()

TINY = '''
import pytest

def test_runs():
    assert True

def test_needs_data():
    pytest.skip("needs the data set X; looked in /nowhere")

@pytest.mark.xfail(reason="a known failure is not a skip", strict=True)
def test_known_failure():
    assert False
'''

MODULE_SKIP = '''
import pytest
pytest.skip("needs the data set Y; looked in /nowhere/else", allow_module_level=True)

def test_never_collected():
    assert True
'''


def run_pytest(tmp_path: Path, ci: str | None, files: dict[str, str], allow: dict[str, str] | None = None,
               args: tuple[str, ...] = ()):
    conftest = CONFTEST.read_text(encoding="utf-8")
    if allow is not None:
        marker = "CI_ALLOWED_SKIPS: dict[str, str] = {}"
        assert marker in conftest
        conftest = conftest.replace(marker, f"CI_ALLOWED_SKIPS: dict[str, str] = {allow!r}")
    (tmp_path / "conftest.py").write_text(conftest, encoding="utf-8")
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "CI" and not k.startswith("PYTEST_")}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", *args, str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("ci", ["true", "TRUE", "1"])
def test_a_skip_fails_a_ci_run_and_is_named(tmp_path, ci):
    proc = run_pytest(tmp_path, ci, {"test_tiny.py": TINY})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "1 passed, 1 skipped, 1 xfailed" in out, out
    assert "SKIPPED (not allowed in CI) test_tiny.py::test_needs_data: needs the data set X; looked in /nowhere" in out
    assert "test_known_failure" not in out.split("skipped tests fail a CI run")[1]  # xfail is no skip


@pytest.mark.parametrize("ci", [None, "", "false", "0"])
def test_a_skip_passes_outside_ci(tmp_path, ci):
    proc = run_pytest(tmp_path, ci, {"test_tiny.py": TINY})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "1 passed, 1 skipped, 1 xfailed" in out and "not allowed in CI" not in out


def test_a_module_skipped_as_a_whole_fails_a_ci_run(tmp_path):
    proc = run_pytest(tmp_path, "true", {"test_module.py": MODULE_SKIP})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out  # "no tests ran" (5) is no excuse either
    assert "SKIPPED (not allowed in CI) test_module.py: needs the data set Y; looked in /nowhere/else" in out
    proc = run_pytest(tmp_path, None, {"test_module.py": MODULE_SKIP})
    assert proc.returncode in (0, 5), proc.stdout  # outside CI pytest's own status stands


def test_an_allowlisted_skip_passes_in_ci(tmp_path):
    allow = {"test_tiny.py::test_needs_data": "X cannot exist on CI machines"}
    proc = run_pytest(tmp_path, "true", {"test_tiny.py": TINY}, allow)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    allow = {"test_tiny.py::": "the whole file is allowed"}  # a prefix ending in "::"
    assert run_pytest(tmp_path, "true", {"test_tiny.py": TINY}, allow).returncode == 0


def test_a_failure_keeps_its_own_status_in_ci(tmp_path):
    failing = TINY + "\ndef test_fails():\n    assert False\n"
    proc = run_pytest(tmp_path, "true", {"test_tiny.py": failing})
    assert proc.returncode == 1 and "1 failed" in proc.stdout


def test_the_allowlist_is_empty():
    """Every test runs in CI; an entry here needs a reason and a good one."""
    import conftest

    assert conftest.CI_ALLOWED_SKIPS == {}


CI_LOG = '''
def test_reports(ci_log):
    ci_log("42 jobs, 3.5 s")
'''


def test_on_make_tests_workers_a_skip_still_fails_and_ci_log_lines_reach_the_summary(tmp_path):
    args = make_test_workers()
    assert args[:2] == ["-n", "2"] and "loadfile" in args, args
    files = {"test_tiny.py": TINY, "test_module.py": MODULE_SKIP, "test_log.py": CI_LOG}
    proc = run_pytest(tmp_path, "true", files, args=tuple(args))
    out = proc.stdout + proc.stderr
    assert "2 workers" in out, out  # it did run on workers
    assert proc.returncode == 1, out
    assert "SKIPPED (not allowed in CI) test_tiny.py::test_needs_data: needs the data set X; looked in /nowhere" in out
    assert "SKIPPED (not allowed in CI) test_module.py: needs the data set Y; looked in /nowhere/else" in out
    assert "test_log.py::test_reports: 42 jobs, 3.5 s" in out.split("what the tests reported")[1], out
    del files["test_module.py"]
    (tmp_path / "test_module.py").unlink()
    proc = run_pytest(tmp_path, None, files, args=tuple(args))
    assert proc.returncode == 0, proc.stdout  # outside CI a skip passes on workers too


def test_the_slowest_modules_are_collected_first(tmp_path):
    """`make test` hands modules to its workers in collection order: the slowest go first."""
    import conftest

    names = ["test_a.py", *reversed(conftest.SLOWEST_FIRST), "test_z.py"]
    files = {name: "def test_one():\n    pass\n\ndef test_two():\n    pass\n" for name in names}
    proc = run_pytest(tmp_path, None, files, args=("--collect-only", "-q"))
    order = [line.split("::")[0] for line in proc.stdout.splitlines() if "::" in line]
    modules = list(dict.fromkeys(order))
    assert modules == [*conftest.SLOWEST_FIRST, "test_a.py", "test_z.py"], proc.stdout
    assert order.count("test_workflow.py") == 2 and proc.stdout.index("test_workflow.py::test_one") < \
        proc.stdout.index("test_workflow.py::test_two")


def test_the_suites_processes_wait_passively_and_the_mkl_checks_start_as_jobs_do():
    """conftest.SUITE_ENV reaches this worker (and every process it starts: SLURM exports the
    environment too); the MKL race checks' children get a job's environment without it."""
    from conftest import SUITE_ENV
    from test_reproducibility import job_env

    assert SUITE_ENV == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    probe = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('OMP_WAIT_POLICY'))"],
                           capture_output=True, text=True, check=True)
    assert probe.stdout.strip() == "PASSIVE"
    assert "OMP_WAIT_POLICY" not in job_env() and "MKL_CBWR" not in job_env()
